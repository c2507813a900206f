//! Kafka clients: configuration, topic checks and creation, producing with acks.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{Client, ClientContext, OAuthToken};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::info;

use super::msk_iam::{self, MskIam};
use super::topics::{TopicDefinition, Topics};
use crate::core::partitioning::PartitionId;

pub const PARTITIONER: &str = "murmur2_random";

pub const METADATA_TIMEOUT: Duration = Duration::from_secs(15);

/// How to reach the brokers: the bootstrap servers and the librdkafka properties every
/// client gets (TLS, SASL and the like, from `--kafka-property` or the config file's `[kafka]`
/// table). Secret values (passwords, keys, tokens) never show in its `Debug` output, in logs
/// or in errors.
#[derive(Clone)]
pub struct Connection {
    pub brokers: String,
    properties: Vec<(String, String)>,
    quirks: Quirks,
    /// Signs the OAUTHBEARER tokens of `sasl.mechanism=AWS_MSK_IAM`.
    msk_iam: Option<std::sync::Arc<MskIam>>,
}

/// Workarounds for a broker that speaks Kafka's protocol with known bugs, chosen with
/// `--broker-quirks`. Kafka needs none, so a production deployment never pays for a test
/// broker's bugs; each variant says what it costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Quirks {
    /// Kafka, or a broker that behaves like it.
    #[default]
    None,
    /// tansu 0.6: it holds a fetch for its whole wait even when records arrive meanwhile
    /// (the input consumer waits 10 ms at most, so a job report is not held up by it, at
    /// the cost of a fetch every 10 ms when idle), and it answers a fetch that starts
    /// inside a multi-record batch with nothing (job reports go one per produce request,
    /// so a consumer whose committed offset falls among them is never stuck), and its
    /// ListOffsets(earliest) names the batch *written* first, which among concurrent writers
    /// need not be the lowest offset: a read "from the beginning" would skip the batches
    /// before it. tansu deletes nothing, so history is read from offset 0 ([`Reader`]). Its
    /// high watermark can be one short after a multi-record batch, so a forwarded copy's mark
    /// may name one offset beyond it.
    Tansu,
}

/// Properties Sluice sets itself, per client, for its guarantees (ordering, co-partitioning,
/// idempotence, offsets): a value given for one would be overridden, so it is refused,
/// unless it is the value Sluice sets everywhere ([`SLUICES_OWN_VALUES`]).
const OWNED_PROPERTIES: &[&str] = &[
    "group.id",
    "group.instance.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "partition.assignment.strategy",
    "isolation.level",
    "enable.idempotence",
    "transactional.id",
    "partitioner",
    "acks",
    "enable.partition.eof",
];

/// Owned properties whose value is the same in every client Sluice makes, with the values
/// that mean it (case aside): a file written for Kafka's tools that sets one of these
/// (Confluent Cloud's template says `acks=all`) is taken as it is, since it asks for what
/// Sluice does anyway.
const SLUICES_OWN_VALUES: &[(&str, &[&str])] = &[
    ("acks", &["all", "-1"]),
    ("enable.idempotence", &["true"]),
    ("enable.auto.commit", &["false"]),
    ("isolation.level", &["read_committed"]),
];

#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("kafka property {0}: Sluice sets it itself (its guarantees depend on it)")]
    Owned(String),
    #[error(
        "kafka property {name}: Sluice sets it to {ours} (its guarantees depend on it); remove it, or give that value"
    )]
    OwnedOtherwise { name: String, ours: &'static str },
    #[error("kafka property bootstrap.servers: give the brokers with --brokers (or `brokers` in the config file)")]
    Bootstrap,
    #[error("kafka property {0:?}: expected NAME=VALUE, with a librdkafka property name")]
    Malformed(String),
    #[error("kafka property {property}: {source_desc}")]
    Secret { property: String, source_desc: String },
    #[error(
        "sasl.mechanism=AWS_MSK_IAM: no region: the brokers' host names name none; set aws.msk.iam.region (or AWS_REGION)"
    )]
    MskIamRegion,
    #[error("kafka property {0}: it is for sasl.mechanism=AWS_MSK_IAM, which is not set")]
    MskIamUnused(String),
}

/// `sasl.mechanism`'s value for AWS MSK IAM, and the properties only it takes.
const MSK_IAM: &str = "AWS_MSK_IAM";
const MSK_IAM_REGION: &str = "aws.msk.iam.region";
const MSK_IAM_ROLE: &str = "aws.msk.iam.role.arn";

#[derive(Default)]
struct MskIamSettings {
    on: bool,
    region: Option<String>,
    role: Option<String>,
}

impl MskIamSettings {
    fn signer(self, brokers: &str) -> Result<Option<std::sync::Arc<MskIam>>, ConnectionError> {
        if !self.on {
            return match (self.region, self.role) {
                (Some(_), _) => Err(ConnectionError::MskIamUnused(MSK_IAM_REGION.into())),
                (_, Some(_)) => Err(ConnectionError::MskIamUnused(MSK_IAM_ROLE.into())),
                _ => Ok(None),
            };
        }
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let region = self
            .region
            .or_else(|| msk_iam::region_of(brokers))
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .ok_or(ConnectionError::MskIamRegion)?;
        Ok(Some(std::sync::Arc::new(MskIam::new(region, self.role))))
    }
}

impl Connection {
    /// `properties`: librdkafka's names and values, where a value of `${env:NAME}` or
    /// `${file:PATH}` is read from that environment variable or file (a trailing newline
    /// dropped), so secrets need not be written on a command line or in a file under review.
    ///
    /// `sasl.mechanism=AWS_MSK_IAM` (Java's name for it) is AWS MSK IAM authentication:
    /// librdkafka speaks OAUTHBEARER with tokens Sluice signs ([`MskIam`]), in the region
    /// `aws.msk.iam.region` names, else the brokers' host names, else `AWS_REGION` /
    /// `AWS_DEFAULT_REGION`, with the role `aws.msk.iam.role.arn` if given.
    pub fn new(brokers: &str, properties: &[(String, String)]) -> Result<Connection, ConnectionError> {
        let mut resolved = Vec::new();
        let mut msk = MskIamSettings::default();
        for (name, value) in properties {
            let name = name.trim();
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(ConnectionError::Malformed(name.to_string()));
            }
            if name == "bootstrap.servers" {
                return Err(ConnectionError::Bootstrap);
            }
            if OWNED_PROPERTIES.contains(&name) {
                match SLUICES_OWN_VALUES.iter().find(|(owned, _)| *owned == name) {
                    Some((_, ours)) if ours.iter().any(|v| v.eq_ignore_ascii_case(value.trim())) => continue,
                    Some((_, ours)) => {
                        return Err(ConnectionError::OwnedOtherwise {
                            name: name.to_string(),
                            ours: ours[0],
                        })
                    }
                    None => return Err(ConnectionError::Owned(name.to_string())),
                }
            }
            let value = resolve(name, value)?;
            match name {
                // Not librdkafka's: Sluice signs the tokens and librdkafka sends them.
                "sasl.mechanism" | "sasl.mechanisms" => {
                    msk.on = value.trim().eq_ignore_ascii_case(MSK_IAM);
                    let mechanism = if msk.on { "OAUTHBEARER" } else { value.as_str() };
                    resolved.push((name.to_string(), mechanism.to_string()));
                }
                MSK_IAM_REGION => msk.region = Some(value),
                MSK_IAM_ROLE => msk.role = Some(value),
                _ => resolved.push((name.to_string(), value)),
            }
        }
        Ok(Connection {
            brokers: brokers.to_string(),
            properties: resolved,
            quirks: Quirks::None,
            msk_iam: msk.signer(brokers)?,
        })
    }

    /// Before the first client is made: fetches the credentials that AWS MSK IAM tokens
    /// are signed with, and keeps them fresh (nothing to do for other mechanisms).
    pub async fn start_tokens(&self) -> Result<()> {
        match &self.msk_iam {
            Some(msk) => msk.start().await.map_err(anyhow::Error::msg),
            None => Ok(()),
        }
    }

    /// A consumer of `config` (made from [`Connection::config`]) that needs no context of
    /// its own, its first token given.
    pub fn consumer<T>(&self, config: &ClientConfig) -> rdkafka::error::KafkaResult<T>
    where
        T: rdkafka::config::FromClientConfigAndContext<Plain> + Consumer<Plain>,
    {
        let consumer: T = config.create_with_context(Plain { tokens: self.tokens() })?;
        self.tokens().sign_in(consumer.client());
        Ok(consumer)
    }

    /// What every client of this connection answers librdkafka's token requests with.
    pub fn tokens(&self) -> Tokens {
        Tokens(self.msk_iam.clone())
    }

    /// The values of the secret properties (passwords, keys, tokens): what job reports must
    /// never show.
    pub fn secret_values(&self) -> Vec<String> {
        self.properties
            .iter()
            .filter(|(name, _)| is_secret(name))
            .map(|(_, value)| value.clone())
            .collect()
    }

    /// The same connection, working around `quirks` of its broker.
    pub fn with_quirks(self, quirks: Quirks) -> Connection {
        Connection { quirks, ..self }
    }

    pub fn quirks(&self) -> Quirks {
        self.quirks
    }

    /// Where a read of a partition's whole history starts: its beginning, or offset 0 on
    /// tansu (see [`Quirks::Tansu`]).
    pub fn beginning(&self) -> Offset {
        match self.quirks {
            Quirks::None => Offset::Beginning,
            Quirks::Tansu => Offset::Offset(0),
        }
    }

    /// Plaintext, no properties (local brokers, tests).
    pub fn plaintext(brokers: &str) -> Connection {
        Connection {
            brokers: brokers.to_string(),
            properties: Vec::new(),
            quirks: Quirks::None,
            msk_iam: None,
        }
    }

    /// The settings a client of `role` starts from: the user's properties, but those of the
    /// other role (one properties file serves every client, as with Kafka's tools, and
    /// librdkafka would warn about each at every client it creates).
    pub fn config(&self, role: Role) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("client.id", "sluice");
        for (name, value) in &self.properties {
            if Role::of(name).is_none_or(|r| r == role) {
                config.set(name, value);
            }
        }
        config
    }
}

/// Which kind of librdkafka client a property is for (an admin client is a producer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Consumer,
    Producer,
}

impl Role {
    /// The role of a property only one kind of client takes, from librdkafka's
    /// CONFIGURATION.md (a name ending in `.` covers the family); `None`: every client's.
    fn of(name: &str) -> Option<Role> {
        const CONSUMER: &[&str] = &[
            "session.timeout.ms",
            "heartbeat.interval.ms",
            "max.poll.interval.ms",
            "fetch.",
            "queued.",
            "auto.commit.interval.ms",
            "group.protocol",
            "group.remote.assignor",
            "check.crcs",
            "coordinator.query.interval.ms",
            "consume.callback.max.messages",
        ];
        const PRODUCER: &[&str] = &[
            "linger.ms",
            "queue.buffering.",
            "batch.",
            "compression.",
            "message.timeout.ms",
            "delivery.timeout.ms",
            "request.timeout.ms",
            "message.send.max.retries",
            "retries",
            "transaction.timeout.ms",
            "sticky.partitioning.linger.ms",
            "queuing.strategy",
            "delivery.report.only.error",
        ];
        let matches = |list: &[&str]| {
            list.iter()
                .any(|p| name == *p || (p.ends_with('.') && name.starts_with(p)))
        };
        if matches(CONSUMER) {
            Some(Role::Consumer)
        } else if matches(PRODUCER) {
            Some(Role::Producer)
        } else {
            None
        }
    }
}

/// What a client answers librdkafka's requests for an OAUTHBEARER token with: a token
/// Sluice signs (AWS MSK IAM), or none (librdkafka's own OIDC handler never asks).
#[derive(Clone, Default)]
pub struct Tokens(Option<std::sync::Arc<MskIam>>);

/// The principal a signed token is sent for: MSK takes the caller from the signature.
const TOKEN_PRINCIPAL: &str = "sluice";

impl Tokens {
    /// A token for librdkafka, signed now.
    pub fn generate(&self) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        let msk = self.0.as_ref().ok_or(
            "no OAUTHBEARER token to give: set sasl.oauthbearer.method=oidc (and its settings), or sasl.mechanism=AWS_MSK_IAM",
        )?;
        let token = msk.token_now()?;
        let lifetime_ms = token
            .expires
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Ok(OAuthToken {
            token: token.value,
            principal_name: TOKEN_PRINCIPAL.into(),
            lifetime_ms,
        })
    }

    /// Gives `client` a fresh token at once. librdkafka asks for tokens through the
    /// client's queue, which only a poll serves: a client that is not polled yet, or only
    /// ever asked for metadata and watermarks, would otherwise never connect.
    pub fn sign_in<C: ClientContext>(&self, client: &Client<C>) {
        if self.0.is_none() {
            return;
        }
        let token = match self.generate() {
            Ok(token) => token,
            Err(e) => return tracing::warn!("AWS MSK IAM: {e}"),
        };
        let (Ok(value), Ok(principal)) = (
            std::ffi::CString::new(token.token),
            std::ffi::CString::new(token.principal_name),
        ) else {
            return;
        };
        let mut error = [0 as std::ffi::c_char; 512];
        // SAFETY: `client` is alive for the call; the strings and the error buffer outlive
        // it, and librdkafka copies what it keeps. No extensions are passed.
        let code = unsafe {
            rdkafka::bindings::rd_kafka_oauthbearer_set_token(
                client.native_ptr(),
                value.as_ptr(),
                token.lifetime_ms,
                principal.as_ptr(),
                std::ptr::null_mut(),
                0,
                error.as_mut_ptr(),
                error.len(),
            )
        };
        if code != rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            // SAFETY: librdkafka writes a NUL-terminated message into the buffer.
            let message = unsafe { std::ffi::CStr::from_ptr(error.as_ptr()) };
            tracing::warn!(
                "AWS MSK IAM: librdkafka refused the token: {}",
                message.to_string_lossy()
            );
        }
    }
}

/// A client context that logs librdkafka's errors, for clients that need nothing else.
#[derive(Clone, Default)]
pub struct Plain {
    tokens: Tokens,
}

impl ClientContext for Plain {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _: Option<&str>) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        self.tokens.generate()
    }
}

impl rdkafka::consumer::ConsumerContext for Plain {}

/// Keeps the last error librdkafka reported: a refused password or an untrusted certificate
/// shows there, where a metadata call only times out.
#[derive(Default)]
struct LastError {
    last: std::sync::Mutex<Option<(RDKafkaErrorCode, String)>>,
    tokens: Tokens,
}

impl rdkafka::consumer::ConsumerContext for LastError {}

impl ClientContext for LastError {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _: Option<&str>) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        self.tokens.generate()
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::error!("librdkafka: {error}: {reason}");
        if let Some(code) = error.rdkafka_error_code() {
            *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((code, reason.to_string()));
        }
    }
}

/// Whether librdkafka's reason for a failed connection is one no retry mends.
fn refused(code: RDKafkaErrorCode, reason: &str) -> bool {
    matches!(code, RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SSL)
        || ["SASL", "SSL handshake", "certificate"]
            .iter()
            .any(|s| reason.contains(s))
}

/// Connects to the brokers and reads their metadata: the first thing a command does, so that
/// a wrong password or an untrusted certificate stops it at once, by name, rather than as a
/// timeout later.
pub fn check_connection(kafka: &Connection) -> Result<()> {
    let consumer: BaseConsumer<LastError> = kafka
        .config(Role::Consumer)
        .create_with_context(LastError {
            tokens: kafka.tokens(),
            ..LastError::default()
        })
        .context("creating a Kafka client (check the kafka properties)")?;
    kafka.tokens().sign_in(consumer.client());
    let deadline = std::time::Instant::now() + METADATA_TIMEOUT;
    loop {
        let attempt = consumer.fetch_metadata(None, Duration::from_secs(1));
        // Errors arrive as events, which a poll serves (the consumer has no partitions).
        let _ = consumer.poll(Duration::from_millis(100));
        let last = consumer
            .context()
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match (attempt, last) {
            (Ok(_), _) => return Ok(()),
            (Err(_), Some((code, reason))) if refused(code, &reason) => {
                bail!("connecting to {kafka}: {reason} (check the TLS and SASL kafka properties)")
            }
            (Err(e), last) if std::time::Instant::now() >= deadline => bail!(
                "connecting to {kafka}: {e}{} (is the broker reachable, and does its listener expect this security.protocol?)",
                last.map(|(_, r)| format!("; last client error: {r}")).unwrap_or_default()
            ),
            (Err(_), _) => {}
        }
    }
}

/// A record the broker did not acknowledge, with the client's typed error.
#[derive(Debug, thiserror::Error)]
#[error("producing to {topic}: {source}{}", fatal.as_ref().map(|f| format!(" (the producer is in a fatal state: {f})")).unwrap_or_default())]
pub struct ProduceError {
    pub topic: String,
    #[source]
    pub source: KafkaError,
    /// librdkafka's fatal error, when the producer is in that state: it accepts no record
    /// again, so retrying with it can never succeed (a fenced transactional id, an
    /// idempotence guarantee it can no longer keep).
    pub fatal: Option<Box<str>>,
}

impl ProduceError {
    /// Whether the record exceeds the size the client or broker accept: retrying the same
    /// record cannot succeed.
    pub fn too_large(&self) -> bool {
        self.source.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge)
    }

    /// Whether the broker refused the producer itself (its id, epoch or sequence), which
    /// retries with the same producer do not mend: a broker that lost its producer state
    /// (tansu after a restart answers with an unknown error) or moved its epoch on.
    pub fn refuses_producer(&self) -> bool {
        matches!(
            self.source,
            KafkaError::MessageProduction(
                RDKafkaErrorCode::Unknown
                    | RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::UnknownProducerId
                    | RDKafkaErrorCode::OutOfOrderSequenceNumber
                    | RDKafkaErrorCode::InvalidProducerEpoch
                    | RDKafkaErrorCode::DuplicateSequenceNumber
            )
        )
    }
}

/// Whether a librdkafka property holds a secret (its value is never shown).
pub fn is_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "password",
        "secret",
        "ssl.key.pem",
        "ssl_key",
        "sasl.oauthbearer.config",
        "token",
    ]
    .iter()
    .any(|s| name.contains(s))
}

/// A property's value, read from `${env:NAME}` or `${file:PATH}` when it says so (also the
/// schema registry's credentials, see [`super::codec::registry`]).
pub(crate) fn resolve(name: &str, value: &str) -> Result<String, ConnectionError> {
    let secret = |source_desc: String| ConnectionError::Secret {
        property: name.to_string(),
        source_desc,
    };
    let Some(inner) = value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) else {
        return Ok(value.to_string());
    };
    match inner.split_once(':') {
        Some(("env", var)) => std::env::var(var).map_err(|_| secret(format!("environment variable {var} is not set"))),
        Some(("file", path)) => std::fs::read_to_string(path)
            .map(|text| {
                text.strip_suffix('\n')
                    .unwrap_or(&text)
                    .trim_end_matches('\r')
                    .to_string()
            })
            .map_err(|e| secret(format!("reading {path}: {e}"))),
        _ => Err(secret(format!("{value:?} is neither ${{env:NAME}} nor ${{file:PATH}}"))),
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: Vec<(&str, &str)> = self
            .properties
            .iter()
            .map(|(k, v)| (k.as_str(), if is_secret(k) { "[redacted]" } else { v.as_str() }))
            .collect();
        f.debug_struct("Connection")
            .field("brokers", &self.brokers)
            .field("properties", &shown)
            .finish()
    }
}

impl std::fmt::Display for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.brokers)
    }
}

/// Sets `name` to `value` unless the user's properties gave it: Sluice's choices are
/// defaults, theirs win (unlike [`OWNED_PROPERTIES`], which guarantees depend on).
fn default_to(config: &mut ClientConfig, name: &str, value: &str) {
    if config.get(name).is_none() {
        config.set(name, value);
    }
}

/// The processor's input consumer settings (also what the benchmark's pass-through
/// baseline uses, so the two compare like for like).
pub fn input_consumer_config(kafka: &Connection, group: &str) -> ClientConfig {
    let mut config = kafka.config(Role::Consumer);
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        // Range assignment gives partition N of every input to the same member: the
        // co-partitioning that lets one task own a pipeline. Sticky/cooperative assignors do
        // not promise that, so eager range rebalancing it is.
        .set("partition.assignment.strategy", "range")
        .set("isolation.level", "read_committed");
    // Records fetched ahead of the loop: librdkafka's default, 64 MiB, is a fifth of what
    // an instance with 100,000 pipelines holds in all; 16 MiB is still several batches
    // ahead at any record size the limits allow.
    default_to(&mut config, "queued.max.messages.kbytes", "16384");
    if kafka.quirks == Quirks::Tansu {
        // The broker may hold a fetch this long when there is nothing new: it bounds how
        // long a record (a job report, say) waits before the processor sees it. Kafka
        // answers as soon as a record arrives; tansu holds the fetch the whole time.
        default_to(&mut config, "fetch.wait.max.ms", "10");
    }
    config
}

/// Every producer Sluice makes: its client tells [`Watch`] what it sees of the brokers.
pub type Producer = FutureProducer<Watch>;

/// What a producer's client reports besides its deliveries. A produce round waits through a
/// whole outage inside librdkafka's retries (up to `message.timeout.ms`), so an outage shows
/// here, from the client's own polling thread, long before any delivery fails.
#[derive(Clone, Default)]
pub struct Watch {
    on_brokers_down: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
    tokens: Tokens,
}

impl Watch {
    /// Calls `f` each time librdkafka finds every broker down.
    pub fn on_brokers_down(f: impl Fn() + Send + Sync + 'static) -> Self {
        Self {
            on_brokers_down: Some(std::sync::Arc::new(f)),
            tokens: Tokens::default(),
        }
    }

    /// The same watch, its clients signing in to `kafka`.
    fn of(self, kafka: &Connection) -> Self {
        Self {
            tokens: kafka.tokens(),
            ..self
        }
    }
}

impl ClientContext for Watch {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::error!("librdkafka: {error}: {reason}");
        if let (Some(RDKafkaErrorCode::AllBrokersDown), Some(f)) = (error.rdkafka_error_code(), &self.on_brokers_down) {
            f();
        }
    }

    fn generate_oauth_token(&self, _: Option<&str>) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        self.tokens.generate()
    }
}

/// An idempotent producer that waits for all replicas.
pub fn producer(kafka: &Connection) -> Result<Producer> {
    create_producer(&producer_config(kafka), &Watch::default().of(kafka))
}

fn create_producer(config: &ClientConfig, watch: &Watch) -> Result<Producer> {
    let producer: Producer = config
        .create_with_context(watch.clone())
        .context("creating Kafka producer")?;
    watch.tokens.sign_in(producer.client());
    Ok(producer)
}

/// How many records in a row, over at least [`REFUSAL_SPAN`], the broker refuses a producer
/// itself before a [`RenewableProducer`] is replaced: one refused round can be a broker
/// shutting down; refusals that go on through several retries are not mended by retrying.
const REFUSALS_BEFORE_RENEWAL: u32 = 3;
const REFUSAL_SPAN: Duration = Duration::from_secs(1);

/// A run of records the broker refused for the producer's sake (its id, epoch or sequence),
/// with none accepted in between.
#[derive(Debug, Default)]
struct Refusals {
    count: u32,
    since: Option<std::time::Instant>,
}

impl Refusals {
    /// Notes one refusal at `now`; whether the producer is now to be replaced.
    fn refused(&mut self, now: std::time::Instant) -> bool {
        self.count += 1;
        let since = *self.since.get_or_insert(now);
        self.count >= REFUSALS_BEFORE_RENEWAL && now.duration_since(since) >= REFUSAL_SPAN
    }
}

/// A long-lived idempotent producer that replaces itself (a new producer id) when the broker
/// keeps refusing it: a broker that lost its producer state (tansu after a restart), or that
/// bumped the producer's epoch twice when a reconnection repeated the request (tansu after a
/// dropped connection: every record then comes back `ProducerFenced`), answers every retry so,
/// and no retry of the same producer mends it. Records the old producer may have written are
/// written again by the new one: events carry their `eventId`, changelog writes put the same
/// values again, reports and directory records are read as the latest.
///
/// A transactional producer is never replaced ([`RenewableProducer::fixed`]): its fencing
/// means another instance took its transactional id.
#[derive(Clone)]
pub struct RenewableProducer {
    config: Option<ClientConfig>,
    watch: Watch,
    current: std::sync::Arc<std::sync::Mutex<Generation>>,
}

struct Generation {
    producer: Producer,
    number: u64,
    refusals: Refusals,
}

impl RenewableProducer {
    /// An idempotent producer with Sluice's settings.
    pub fn new(kafka: &Connection) -> Result<Self> {
        Self::with_config(producer_config(kafka), Watch::default().of(kafka))
    }

    /// [`RenewableProducer::new`], its clients (this one and any that replace it) watched.
    pub fn watched(kafka: &Connection, watch: Watch) -> Result<Self> {
        Self::with_config(producer_config(kafka), watch.of(kafka))
    }

    fn with_config(config: ClientConfig, watch: Watch) -> Result<Self> {
        let producer = create_producer(&config, &watch)?;
        Ok(Self {
            config: Some(config),
            watch,
            current: std::sync::Arc::new(std::sync::Mutex::new(Generation {
                producer,
                number: 0,
                refusals: Refusals::default(),
            })),
        })
    }

    /// A producer that is never replaced.
    pub fn fixed(producer: Producer) -> Self {
        Self {
            config: None,
            watch: Watch::default(),
            current: std::sync::Arc::new(std::sync::Mutex::new(Generation {
                producer,
                number: 0,
                refusals: Refusals::default(),
            })),
        }
    }

    /// The producer in use now.
    pub fn current(&self) -> Producer {
        self.lock().producer.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generation> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`send`] through the producer in use.
    pub async fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, &[u8])],
    ) -> Result<(PartitionId, i64), ProduceError> {
        self.send_to(topic, None, key, value, headers).await
    }

    /// [`send_to`] through the producer in use, which is replaced when this refusal makes
    /// enough in a row.
    pub async fn send_to(
        &self,
        topic: &str,
        partition: Option<PartitionId>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, &[u8])],
    ) -> Result<(PartitionId, i64), ProduceError> {
        let (producer, number) = {
            let current = self.lock();
            (current.producer.clone(), current.number)
        };
        let mut result = send_to(&producer, topic, partition, key, value, headers).await;
        self.note(number, &result, std::time::Instant::now());
        // Replaced by a producer that can send: the failure was no longer fatal.
        if let Err(e) = &mut result {
            if e.fatal.is_some() && self.config.is_some() && fatal_error(&self.current()).is_none() {
                e.fatal = None;
            }
        }
        result
    }

    /// Notes the answer the producer numbered `number` had at `now`.
    fn note(&self, number: u64, result: &Result<(PartitionId, i64), ProduceError>, now: std::time::Instant) {
        let mut current = self.lock();
        // An answer to a producer already replaced says nothing of the new one.
        if current.number != number {
            return;
        }
        match result {
            Ok(_) => current.refusals = Refusals::default(),
            Err(e) if e.refuses_producer() || e.fatal.is_some() => {
                // A producer in a fatal state is replaced at once: it never sends again.
                let renew = current.refusals.refused(now) || e.fatal.is_some();
                if let (true, Some(config)) = (renew, &self.config) {
                    match create_producer(config, &self.watch) {
                        Ok(producer) => {
                            tracing::warn!(topic = %e.topic, error = %e.source, "the broker keeps refusing this producer's records: continuing with a new producer");
                            current.producer = producer;
                            current.number += 1;
                            current.refusals = Refusals::default();
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "could not create a new producer; retrying with the old one")
                        }
                    }
                }
            }
            Err(_) => {}
        }
    }
}

/// The producer of job reports. On tansu, one record per produce request: a broker that
/// cannot serve a fetch starting inside a multi-record batch (tansu 0.6 answers it with
/// nothing, so a consumer whose committed offset falls there never moves again) then never
/// holds the processor's jobs partitions up. On Kafka, reports finished together share a
/// request.
pub fn report_producer(kafka: &Connection) -> Result<RenewableProducer> {
    RenewableProducer::with_config(report_producer_config(kafka), Watch::default().of(kafka))
}

fn report_producer_config(kafka: &Connection) -> ClientConfig {
    let mut config = producer_config(kafka);
    if kafka.quirks == Quirks::Tansu {
        default_to(&mut config, "batch.num.messages", "1");
    }
    config
}

/// A transactional producer: a new one with the same `id` fences the old one out.
pub fn transactional_producer(kafka: &Connection, id: &str, watch: &Watch) -> Result<Producer> {
    create_producer(
        producer_config(kafka).set("transactional.id", id),
        &watch.clone().of(kafka),
    )
    .context("creating transactional Kafka producer")
}

/// Codec of every record Sluice produces (events, changelog, dead letters, reports) unless
/// `compression.type` is given: lz4 costs little CPU and, on the changelog's repetitive
/// JSON, shrinks what the brokers store and replicate several times over.
pub const DEFAULT_COMPRESSION: &str = "lz4";

fn producer_config(kafka: &Connection) -> ClientConfig {
    let mut config = kafka.config(Role::Producer);
    config
        .set("enable.idempotence", "true")
        // The Java client's partitioner: records keyed by pipeline id land on the same
        // partition whichever client produced them (librdkafka's default hashes differently).
        .set("partitioner", PARTITIONER)
        .set("acks", "all");
    // Sluice enqueues a whole batch's outputs and then waits for their acknowledgements:
    // lingering would only add to every batch's round trip (two per batch).
    default_to(&mut config, "linger.ms", "0");
    default_to(&mut config, "compression.type", DEFAULT_COMPRESSION);
    config
}

/// Partition counts of `topics`, failing with a clear message if one is missing.
pub fn partition_counts<C: ClientContext>(client: &Client<C>, topics: &[&str]) -> Result<Vec<(String, usize)>> {
    topics
        .iter()
        .map(|topic| Ok((topic.to_string(), replicas_per_partition(client, topic)?.len())))
        .collect()
}

/// How many replicas each partition of `topic` has, failing with a clear message if the topic
/// is missing.
fn replicas_per_partition<C: ClientContext>(client: &Client<C>, topic: &str) -> Result<Vec<usize>> {
    let metadata = client
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .with_context(|| format!("fetching metadata of {topic} (is the broker reachable?)"))?;
    let t = metadata
        .topics()
        .first()
        .ok_or_else(|| anyhow!("no metadata for {topic}"))?;
    if t.error().is_some() || t.partitions().is_empty() {
        bail!("topic {topic} does not exist: create it with `sluice topics apply`");
    }
    Ok(t.partitions().iter().map(|p| p.replicas().len()).collect())
}

/// Refuses inputs with different partition counts: one task must own all of a pipeline's
/// records, which holds only when every input is partitioned alike.
pub fn check_copartitioned(counts: &[(String, usize)]) -> Result<usize> {
    let first = counts
        .first()
        .map(|(_, n)| *n)
        .ok_or_else(|| anyhow!("no input topics"))?;
    if counts.iter().any(|(_, n)| *n != first) {
        let listing: Vec<String> = counts.iter().map(|(t, n)| format!("{t}={n}")).collect();
        bail!(
            "input topics must have the same partition count, found {}; recreate them with `sluice topics apply` or add partitions so they match",
            listing.join(", ")
        );
    }
    Ok(first)
}

/// What `topics apply` found for one topic.
#[derive(Debug)]
pub struct TopicReport {
    pub name: String,
    pub created: bool,
    /// Configs that differ from the definition (empty: it matches).
    pub drift: Vec<String>,
    /// The broker did not describe the topic's configs, so they were not checked.
    pub unchecked: Option<String>,
}

fn admin(kafka: &Connection) -> Result<AdminClient<Plain>> {
    let admin: AdminClient<Plain> = kafka
        .config(Role::Producer)
        .create_with_context(Plain { tokens: kafka.tokens() })
        .context("creating admin client")?;
    kafka.tokens().sign_in(admin.inner());
    Ok(admin)
}

/// The configs the broker describes for `topic`; `Err` with the reason when it describes
/// none (a broker without DescribeConfigs, a missing topic, no permission).
pub async fn topic_configs(
    kafka: &Connection,
    topic: &str,
) -> Result<std::collections::HashMap<String, Option<String>>, String> {
    let admin = admin(kafka).map_err(|e| format!("{e:#}"))?;
    let options = AdminOptions::new().request_timeout(Some(METADATA_TIMEOUT));
    let described = admin
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &options)
        .await
        .map_err(|e| e.to_string())?;
    match described.into_iter().next() {
        Some(Ok(resource)) if !resource.entries.is_empty() => {
            Ok(resource.entries.into_iter().map(|e| (e.name, e.value)).collect())
        }
        Some(Ok(_)) => Err("the broker described no configs".into()),
        Some(Err(code)) => Err(code.to_string()),
        None => Err("no answer for this topic".into()),
    }
}

/// Creates the missing topics of `defs`, checks every partition count (a difference is an
/// error: it would break co-partitioning) and reports config drift of existing topics.
pub async fn apply_topics(kafka: &Connection, topics: &Topics, defs: &[TopicDefinition]) -> Result<Vec<TopicReport>> {
    let admin = admin(kafka)?;
    let names: Vec<String> = defs.iter().map(|d| format!("{}{}", topics.prefix, d.name)).collect();
    let created = create_topics(&admin, defs, &names).await?;
    let replicas = check_partitions(&admin, defs, &names)?;
    let specifiers: Vec<ResourceSpecifier> = names.iter().map(|n| ResourceSpecifier::Topic(n)).collect();
    let described = admin
        .describe_configs(
            &specifiers,
            &AdminOptions::new().request_timeout(Some(METADATA_TIMEOUT)),
        )
        .await;
    let mut reports = Vec::new();
    for (i, ((name, def), replicas)) in names.iter().zip(defs).zip(replicas).enumerate() {
        let (drift, unchecked) = match described.as_ref().map(|all| all.get(i)) {
            Ok(Some(Ok(resource))) if !resource.entries.is_empty() => {
                let actual = resource
                    .entries
                    .iter()
                    .map(|e| (e.name.clone(), e.value.clone()))
                    .collect();
                (def.drift(&actual, Some(replicas).filter(|n| *n > 0))?, None)
            }
            Ok(Some(Ok(_))) => (Vec::new(), Some("the broker described no configs".to_string())),
            Ok(Some(Err(code))) => (Vec::new(), Some(code.to_string())),
            Ok(None) => (Vec::new(), Some("no answer for this topic".to_string())),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        reports.push(TopicReport {
            name: name.clone(),
            created: created.contains(name),
            drift,
            unchecked,
        });
    }
    Ok(reports)
}

/// Creates the topics of `defs` (named `names`) that do not exist; returns those it created.
async fn create_topics(
    admin: &AdminClient<Plain>,
    defs: &[TopicDefinition],
    names: &[String],
) -> Result<HashSet<String>> {
    let configs: Vec<Vec<(&str, String)>> = defs.iter().map(TopicDefinition::configs).collect::<Result<_>>()?;
    let new_topics: Vec<NewTopic> = defs
        .iter()
        .zip(names)
        .zip(&configs)
        .map(|((def, name), configs)| {
            configs.iter().fold(
                // -1: the broker's default.replication.factor (Kafka 2.4+, KIP-464).
                NewTopic::new(
                    name,
                    def.partitions,
                    TopicReplication::Fixed(def.replication_factor.map_or(-1, i32::from)),
                ),
                |topic, (k, v)| topic.set(k, v),
            )
        })
        .collect();
    let results = admin
        .create_topics(
            &new_topics,
            &AdminOptions::new().operation_timeout(Some(METADATA_TIMEOUT)),
        )
        .await
        .context("creating topics")?;
    let mut created = HashSet::new();
    for result in results {
        match result {
            Ok(name) => {
                info!(topic = %name, "created topic");
                created.insert(name);
            }
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => info!(topic = %name, "topic exists"),
            Err((name, code)) => bail!("creating topic {name}: {code}"),
        }
    }
    Ok(created)
}

/// Fails when a topic's partition count differs from its definition's; returns each topic's
/// replica count (the largest of its partitions').
fn check_partitions(admin: &AdminClient<Plain>, defs: &[TopicDefinition], names: &[String]) -> Result<Vec<usize>> {
    let mut counts = Vec::new();
    for (name, def) in names.iter().zip(defs) {
        let replicas = replicas_per_partition(admin.inner(), name)?;
        if replicas.len() != def.partitions as usize {
            bail!(
                "topic {name} has {} partitions but topics/ declares {}: the inputs must have the same count, and partitions cannot be removed; recreate the topic or change topics/ to match",
                replicas.len(),
                def.partitions
            );
        }
        counts.push(replicas.into_iter().max().unwrap_or(0));
    }
    Ok(counts)
}

pub async fn send(
    producer: &Producer,
    topic: &str,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&str, &[u8])],
) -> Result<(PartitionId, i64), ProduceError> {
    send_to(producer, topic, None, key, value, headers).await
}

/// The client's fatal error, if it is in that state (see [`ProduceError::fatal`]).
pub fn fatal_error(producer: &Producer) -> Option<String> {
    rdkafka::producer::Producer::client(producer)
        .fatal_error()
        .map(|(code, reason)| format!("{code:?}: {reason}"))
}

/// [`send`] to an explicit partition, or by the key's hash when `partition` is `None`.
pub async fn send_to(
    producer: &Producer,
    topic: &str,
    partition: Option<PartitionId>,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&str, &[u8])],
) -> Result<(PartitionId, i64), ProduceError> {
    let mut owned = OwnedHeaders::new();
    for (k, v) in headers {
        owned = owned.insert(Header {
            key: k,
            value: Some(*v),
        });
    }
    let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).headers(owned);
    if let Some(p) = partition {
        record = record.partition(p.number());
    }
    if let Some(k) = key {
        record = record.key(k);
    }
    if let Some(v) = value {
        record = record.payload(v);
    }
    let delivery = producer
        .send(record, Duration::from_secs(30))
        .await
        .map_err(|(source, _)| ProduceError {
            topic: topic.to_string(),
            source,
            fatal: fatal_error(producer).map(String::into_boxed_str),
        })?;
    Ok((PartitionId::new(delivery.partition), delivery.offset))
}

/// Where one partition's read starts, for [`read_span`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub topic: String,
    pub partition: PartitionId,
    /// The first offset to read; below the retained range means the oldest retained record.
    pub offset: i64,
}

/// Reads every listed partition from its start to its end as of the call (the high watermark
/// first seen, or later records that a poll still returns), records in arrival order.
/// The end is confirmed by a poll that finds nothing more, because tansu 0.6 can report a
/// watermark short of the end after multi-record batches; control records of transactions
/// end a partition through the consumer's position.
pub fn read_span(consumer: &Reader, starts: &[Start]) -> Result<Vec<OwnedMessage>> {
    let read = read_assigned(consumer, starts);
    // Nothing fetched ahead for partitions no one reads until the next call: a reader kept
    // between reads (the page's recent events, the alert routes' owners) then holds no
    // broker connection open meanwhile, which it would have to sign in to again (MSK IAM)
    // without being polled for a fresh token.
    let _ = consumer.unassign();
    read
}

fn read_assigned(consumer: &Reader, starts: &[Start]) -> Result<Vec<OwnedMessage>> {
    let mut list = TopicPartitionList::new();
    let mut ends: BTreeMap<(String, PartitionId), (i64, bool)> = BTreeMap::new();
    for s in starts {
        let (low, high) = consumer
            .range(&s.topic, s.partition)
            .with_context(|| format!("reading the offsets of {}/{}", s.topic, s.partition))?;
        let start = s.offset.clamp(low, high);
        list.add_partition_offset(&s.topic, s.partition.number(), Offset::Offset(start))?;
        ends.insert((s.topic.clone(), s.partition), (high, start >= high));
    }
    consumer.assign(&list).context("assigning the partitions to read")?;
    let mut records = Vec::new();
    let mut idle = 0;
    // Nothing arriving for this long while partitions are short of their end: the rest is
    // not coming (the broker's watermark overstated it).
    const GIVE_UP: u32 = 50;
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            Some(message) => {
                idle = 0;
                let message = message.context("reading records")?;
                if let Some(end) = ends.get_mut(&(message.topic().to_string(), PartitionId::new(message.partition()))) {
                    end.1 |= message.offset() + 1 >= end.0;
                }
                records.push(message.detach());
            }
            None => {
                idle += 1;
                if let Ok(positions) = consumer.position() {
                    for e in positions.elements() {
                        if let (Offset::Offset(o), Some(end)) = (
                            e.offset(),
                            ends.get_mut(&(e.topic().to_string(), PartitionId::new(e.partition()))),
                        ) {
                            end.1 |= o >= end.0;
                        }
                    }
                }
                if ends.values().all(|(_, done)| *done) {
                    return Ok(records);
                }
                if idle >= GIVE_UP {
                    let short: Vec<String> = ends
                        .iter()
                        .filter(|(_, (_, done))| !done)
                        .map(|((t, p), (high, _))| format!("{t}/{p} (end {high})"))
                        .collect();
                    tracing::warn!(
                        "stopped reading {} short of the watermark the broker reported: nothing more arrived in 10 s",
                        short.join(", ")
                    );
                    return Ok(records);
                }
            }
        }
    }
}

/// A consumer for reading history: assigned partitions, no group offsets committed.
pub fn reader(kafka: &Connection, name: &str) -> Result<Reader> {
    Reader::create(
        kafka
            .config(Role::Consumer)
            .set("group.id", name)
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .set("isolation.level", "read_committed"),
        kafka,
    )
    .context("creating Kafka consumer")
}

/// The settings of a reader of partitions it is assigned that never commits, as opening a
/// partition reads its changelog and its inputs' ends: no group membership, no offsets
/// stored, and a start out of range an error, never a jump.
pub fn restore_reader(kafka: &Connection) -> ClientConfig {
    let mut config = kafka.config(Role::Consumer);
    config
        .set("group.id", "sluice-restore")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "error");
    config
}

/// A consumer that reads partitions' history, knowing where a partition's history starts
/// on its broker ([`Reader::range`]). It is the consumer otherwise (`Deref`).
pub struct Reader {
    consumer: BaseConsumer<Reading>,
    quirks: Quirks,
}

/// A reader's librdkafka context: errors are logged as every client's are, except a
/// partition's end. A reader that asks to be told of it (`enable.partition.eof`) gets it
/// from `poll`, and librdkafka reports it as a client error too: an ERROR line for each
/// input topic every time a partition was opened.
pub struct Reading {
    tokens: Tokens,
}

impl ClientContext for Reading {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _: Option<&str>) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        self.tokens.generate()
    }

    fn error(&self, error: KafkaError, reason: &str) {
        match error.rdkafka_error_code() {
            Some(RDKafkaErrorCode::PartitionEOF) => tracing::debug!("librdkafka: {error}: {reason}"),
            _ => tracing::error!("librdkafka: {error}: {reason}"),
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Reading {}

impl Reader {
    /// A reader made with `config`, of `kafka`'s brokers.
    pub fn create(config: &ClientConfig, kafka: &Connection) -> rdkafka::error::KafkaResult<Reader> {
        let tokens = kafka.tokens();
        let consumer: BaseConsumer<Reading> = config.create_with_context(Reading { tokens })?;
        consumer.context().tokens.sign_in(consumer.client());
        Ok(Reader {
            consumer,
            quirks: kafka.quirks(),
        })
    }

    /// Where `topic`'s partition `p` starts and where it ends: its low and high watermarks,
    /// except that on tansu it starts at 0 (see [`Quirks::Tansu`]).
    pub fn range(&self, topic: &str, p: PartitionId) -> Result<(i64, i64), KafkaError> {
        // A reader kept between reads (the page's recent events) serves no token requests
        // while idle: it gets a fresh token before it asks the brokers again.
        self.consumer.context().tokens.sign_in(self.consumer.client());
        let (low, high) = self.consumer.fetch_watermarks(topic, p.number(), METADATA_TIMEOUT)?;
        Ok((self.quirks.first_offset(low), high))
    }
}

impl Quirks {
    /// A partition's first offset, from the low watermark its broker reports.
    fn first_offset(self, low: i64) -> i64 {
        match self {
            Quirks::None => low,
            Quirks::Tansu => 0,
        }
    }
}

impl std::ops::Deref for Reader {
    type Target = BaseConsumer<Reading>;

    fn deref(&self) -> &BaseConsumer<Reading> {
        &self.consumer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader's partition end, which `poll` reports to it, is logged at debug; any other
    /// client error still at error.
    #[test]
    fn a_readers_partition_end_is_not_logged_as_an_error() {
        #[derive(Clone, Default)]
        struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            Reading {
                tokens: Tokens::default(),
            }
            .error(KafkaError::Global(RDKafkaErrorCode::PartitionEOF), "reached the end");
            Reading {
                tokens: Tokens::default(),
            }
            .error(KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "all brokers down");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_default()
                .to_string()
        };
        assert!(line("reached the end").contains("DEBUG"), "{text}");
        assert!(line("all brokers down").contains("ERROR"), "{text}");
    }

    fn props(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn tansu_workarounds_cost_kafka_nothing() {
        let kafka = Connection::plaintext("b:9092");
        let tansu = Connection::plaintext("b:9092").with_quirks(Quirks::Tansu);
        let fetch_wait = |c: &Connection| {
            input_consumer_config(c, "g")
                .get("fetch.wait.max.ms")
                .map(str::to_string)
        };
        let per_request = |c: &Connection| report_producer_config(c).get("batch.num.messages").map(str::to_string);
        // Kafka keeps librdkafka's defaults: fetches answered when records arrive, reports
        // batched.
        assert_eq!(fetch_wait(&kafka), None);
        assert_eq!(fetch_wait(&tansu).as_deref(), Some("10"));
        assert_eq!(per_request(&kafka), None);
        assert_eq!(per_request(&tansu).as_deref(), Some("1"));
        // Kafka's log start is what it reports (retention moves it); tansu's is 0.
        assert_eq!(kafka.beginning(), Offset::Beginning);
        assert_eq!(kafka.quirks().first_offset(42), 42);
        assert_eq!(tansu.beginning(), Offset::Offset(0));
        assert_eq!(tansu.quirks().first_offset(42), 0);
    }

    #[test]
    fn aws_msk_iam_is_oauthbearer_with_tokens_sluice_signs_in_the_brokers_region() {
        let msk_brokers = "b-1.orders.abc.c2.kafka.eu-west-1.amazonaws.com:9098";
        let role = "arn:aws:iam::123456789012:role/sluice";
        let kafka = Connection::new(
            msk_brokers,
            &props(&[
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanism", "AWS_MSK_IAM"),
                ("aws.msk.iam.role.arn", role),
            ]),
        )
        .unwrap();
        let config = kafka.config(Role::Consumer);
        assert_eq!(config.get("sasl.mechanism"), Some("OAUTHBEARER"));
        assert_eq!(config.get("aws.msk.iam.role.arn"), None, "not a librdkafka property");
        let msk = kafka.msk_iam.as_ref().unwrap();
        assert_eq!((msk.region.as_str(), msk.role.as_deref()), ("eu-west-1", Some(role)));
        // No credentials fetched yet: librdkafka is told why, not handed a bad token.
        let refused = kafka.tokens().generate().err().unwrap().to_string();
        assert!(refused.contains("no AWS credentials"), "{refused}");
        msk.hold(aws_credential_types::Credentials::new("AKID", "s", None, None, "test"));
        let token = kafka.tokens().generate().unwrap();
        assert_eq!(token.principal_name, "sluice");
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!(
            (token.lifetime_ms - now_ms - 900_000).abs() < 5_000,
            "{}",
            token.lifetime_ms
        );

        // A region given wins over the brokers'.
        let given = Connection::new(
            msk_brokers,
            &props(&[("sasl.mechanism", "aws_msk_iam"), ("aws.msk.iam.region", "us-east-2")]),
        )
        .unwrap();
        assert_eq!(given.msk_iam.unwrap().region, "us-east-2");
        // The last mechanism given is the one used; settings for MSK IAM without it are refused.
        let replaced = Connection::new(
            msk_brokers,
            &props(&[("sasl.mechanism", "AWS_MSK_IAM"), ("sasl.mechanism", "SCRAM-SHA-512")]),
        )
        .unwrap();
        assert!(replaced.msk_iam.is_none());
        assert_eq!(
            replaced.config(Role::Producer).get("sasl.mechanism"),
            Some("SCRAM-SHA-512")
        );
        assert!(matches!(
            Connection::new("b:9092", &props(&[("aws.msk.iam.role.arn", role)])),
            Err(ConnectionError::MskIamUnused(p)) if p == "aws.msk.iam.role.arn"
        ));
        // Other mechanisms have no token to give.
        assert!(Connection::plaintext("b:9092").tokens().generate().is_err());
    }

    #[test]
    fn each_client_gets_the_properties_of_its_kind() {
        let kafka = Connection::new(
            "b:9092",
            &props(&[
                ("session.timeout.ms", "10000"),
                ("fetch.min.bytes", "1"),
                ("linger.ms", "5"),
                ("compression.type", "zstd"),
                ("security.protocol", "SSL"),
            ]),
        )
        .unwrap();
        let names = |role| {
            let config = kafka.config(role);
            let mut names: Vec<String> = config
                .config_map()
                .keys()
                .map(|k| k.to_string())
                .filter(|k| k != "bootstrap.servers" && k != "client.id")
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            names(Role::Consumer),
            ["fetch.min.bytes", "security.protocol", "session.timeout.ms"]
        );
        assert_eq!(
            names(Role::Producer),
            ["compression.type", "linger.ms", "security.protocol"]
        );
    }

    #[test]
    fn sluice_defaults_give_way_to_the_users_properties() {
        let defaults = Connection::plaintext("b:9092").with_quirks(Quirks::Tansu);
        let yours = Connection::new(
            "b:9092",
            &props(&[
                ("fetch.wait.max.ms", "100"),
                ("batch.num.messages", "50"),
                ("linger.ms", "20"),
                ("compression.type", "zstd"),
                ("session.timeout.ms", "30000"),
            ]),
        )
        .unwrap()
        .with_quirks(Quirks::Tansu);
        let get = |c: &ClientConfig, name: &str| c.get(name).map(str::to_string);
        for (connection, want) in [
            (&defaults, [Some("10"), Some("1"), Some("0"), Some("lz4"), None]),
            (
                &yours,
                [Some("100"), Some("50"), Some("20"), Some("zstd"), Some("30000")],
            ),
        ] {
            let consumer = input_consumer_config(connection, "g");
            let reports = report_producer_config(connection);
            let have = [
                get(&consumer, "fetch.wait.max.ms"),
                get(&reports, "batch.num.messages"),
                get(&reports, "linger.ms"),
                get(&reports, "compression.type"),
                // Kafka's own default (45 s) unless told: no timeout is Sluice's choice.
                get(&consumer, "session.timeout.ms"),
            ];
            assert_eq!(have, want.map(|v| v.map(str::to_string)));
        }
        // What guarantees depend on stays Sluice's.
        let reports = report_producer_config(&yours);
        assert_eq!(reports.get("acks"), Some("all"));
        assert_eq!(reports.get("enable.idempotence"), Some("true"));
    }

    #[test]
    fn the_input_fetches_ahead_a_bounded_amount_unless_told_otherwise() {
        let queued = |c: &Connection| {
            input_consumer_config(c, "g")
                .get("queued.max.messages.kbytes")
                .map(str::to_string)
        };
        assert_eq!(queued(&Connection::plaintext("b:9092")).as_deref(), Some("16384"));
        let yours = Connection::new("b:9092", &props(&[("queued.max.messages.kbytes", "65536")])).unwrap();
        assert_eq!(queued(&yours).as_deref(), Some("65536"));
    }

    #[test]
    fn secrets_come_from_files_or_the_environment_and_never_show() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, "from-a-file\n").unwrap();
        std::env::set_var("SLUICE_TEST_KAFKA_SECRET", "from-the-env");
        let kafka = Connection::new(
            "b:9092",
            &props(&[
                ("security.protocol", "SASL_SSL"),
                ("sasl.password", &format!("${{file:{}}}", file.display())),
                ("sasl.oauthbearer.client.secret", "${env:SLUICE_TEST_KAFKA_SECRET}"),
            ]),
        )
        .unwrap();
        let config = kafka.config(Role::Consumer);
        assert_eq!(config.get("sasl.password"), Some("from-a-file"));
        assert_eq!(config.get("sasl.oauthbearer.client.secret"), Some("from-the-env"));
        assert_eq!(config.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(config.get("bootstrap.servers"), Some("b:9092"));
        let shown = format!("{kafka:?} {kafka}");
        assert!(
            !shown.contains("from-a-file") && !shown.contains("from-the-env"),
            "{shown}"
        );
        assert!(shown.contains("SASL_SSL") && shown.contains("[redacted]"), "{shown}");
    }

    fn refused() -> Result<(PartitionId, i64), ProduceError> {
        Err(ProduceError {
            topic: "t".into(),
            source: KafkaError::MessageProduction(RDKafkaErrorCode::ProducerFenced),
            fatal: None,
        })
    }

    fn unreachable_producer() -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:1");
        config
    }

    #[test]
    fn a_producer_is_replaced_once_refusals_go_on_through_retries() {
        let t0 = std::time::Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let producer = RenewableProducer::with_config(unreachable_producer(), Watch::default()).unwrap();
        let number = || producer.lock().number;
        // A whole round refused at once (a broker going down) is not enough.
        for _ in 0..10 {
            producer.note(0, &refused(), at(0));
        }
        assert_eq!(number(), 0);
        // An accepted record ends the run of refusals.
        producer.note(0, &Ok((PartitionId::new(0), 1)), at(500));
        producer.note(0, &refused(), at(600));
        producer.note(0, &refused(), at(1_200));
        assert_eq!(number(), 0, "the run began again at 600 ms");
        producer.note(0, &refused(), at(1_600));
        assert_eq!(number(), 1, "three refusals over a second: replaced");
        // The old producer's answers, still arriving, do not count against the new one.
        for ms in [1_700, 3_000, 5_000] {
            producer.note(0, &refused(), at(ms));
        }
        assert_eq!(number(), 1);
        // Other failures (an outage) are no refusal.
        let timed_out = Err(ProduceError {
            topic: "t".into(),
            source: KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut),
            fatal: None,
        });
        for ms in [6_000, 8_000, 10_000] {
            producer.note(1, &timed_out, at(ms));
        }
        assert_eq!(number(), 1);
    }

    /// A real client against a port nobody listens on: the watch hears of it while a
    /// delivery is still waiting (it would fail only after `message.timeout.ms`).
    #[tokio::test]
    async fn a_watched_producer_reports_every_broker_down_before_its_delivery_fails() {
        let down = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let heard = down.clone();
        let watch = Watch::on_brokers_down(move || {
            heard.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        let producer = RenewableProducer::with_config(unreachable_producer(), watch).unwrap();
        let delivery = producer.send("t", None, Some(b"v"), &[]);
        tokio::pin!(delivery);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while down.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no report of the brokers being down"
            );
            tokio::select! {
                result = &mut delivery => panic!("the delivery ended first: {result:?}"),
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    #[test]
    fn a_transactional_producer_is_never_replaced() {
        let t0 = std::time::Instant::now();
        let producer = RenewableProducer::fixed(create_producer(&unreachable_producer(), &Watch::default()).unwrap());
        for s in 0..10 {
            producer.note(0, &refused(), t0 + Duration::from_secs(s));
        }
        assert_eq!(producer.lock().number, 0);
    }

    /// librdkafka's own test hook puts a real client in the fatal state (no broker needed:
    /// a producer in that state refuses every record when it is enqueued).
    fn make_fatal(producer: &Producer) {
        let reason = std::ffi::CString::new("fenced in a test").unwrap();
        let client = rdkafka::producer::Producer::client(producer);
        // SAFETY: a live client handle and a NUL-terminated string that outlives the call.
        let code = unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                client.native_ptr(),
                rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR__FENCED,
                reason.as_ptr(),
            )
        };
        assert_eq!(code, rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR);
        assert!(fatal_error(producer).is_some());
    }

    /// An idempotent producer, as Sluice's are (librdkafka's fatal state is theirs: a plain
    /// producer in it still enqueues, and the record waits out `message.timeout.ms`).
    fn idempotent_unreachable_producer() -> ClientConfig {
        let mut config = unreachable_producer();
        config
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "5000");
        config
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_producer_in_a_fatal_state_is_replaced_at_once_or_stops_the_run() {
        // Idempotent: replaced on the first refusal, and the failure is an ordinary one.
        let renewable = RenewableProducer::with_config(idempotent_unreachable_producer(), Watch::default()).unwrap();
        make_fatal(&renewable.current());
        let e = renewable.send("t", None, Some(b"v"), &[]).await.unwrap_err();
        assert_eq!(renewable.lock().number, 1, "replaced: {e}");
        assert!(e.fatal.is_none() && fatal_error(&renewable.current()).is_none());
        assert!(matches!(
            crate::runtime::error::Error::from(e),
            crate::runtime::error::Error::Transient(_)
        ));

        // Transactional (never replaced): every record fails at once, and the run stops.
        let fixed =
            RenewableProducer::fixed(create_producer(&idempotent_unreachable_producer(), &Watch::default()).unwrap());
        make_fatal(&fixed.current());
        let e = fixed.send("t", None, Some(b"v"), &[]).await.unwrap_err();
        assert!(
            e.to_string().contains("fatal state") && e.to_string().contains("fenced in a test"),
            "{e}"
        );
        assert!(matches!(
            crate::runtime::error::Error::from(e),
            crate::runtime::error::Error::Fatal(crate::runtime::error::Fatal::Producer(_))
        ));
    }

    #[test]
    fn a_broker_refusing_the_producer_is_told_from_a_passing_outage() {
        let produce = |code| ProduceError {
            topic: "t".into(),
            source: KafkaError::MessageProduction(code),
            fatal: None,
        };
        assert!(produce(RDKafkaErrorCode::Unknown).refuses_producer());
        assert!(produce(RDKafkaErrorCode::ProducerFenced).refuses_producer());
        assert!(produce(RDKafkaErrorCode::OutOfOrderSequenceNumber).refuses_producer());
        assert!(!produce(RDKafkaErrorCode::MessageTimedOut).refuses_producer());
        assert!(!produce(RDKafkaErrorCode::BrokerTransportFailure).refuses_producer());
        assert!(produce(RDKafkaErrorCode::MessageSizeTooLarge).too_large());
        assert!(!produce(RDKafkaErrorCode::MessageSizeTooLarge).refuses_producer());
    }

    #[test]
    fn properties_sluice_relies_on_or_unreadable_secrets_are_refused_by_name() {
        let e = Connection::new("b", &props(&[("enable.idempotence", "false")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("enable.idempotence") && e.contains("sets it to true"), "{e}");
        let e = Connection::new("b", &props(&[("group.id", "mine")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("group.id") && e.contains("sets it itself"), "{e}");
        // Sluice's own value, as Kafka tools' files write it, is taken and left to Sluice.
        let same = [
            ("acks", "-1"),
            ("enable.idempotence", "TRUE"),
            ("isolation.level", "read_committed"),
        ];
        let kafka = Connection::new("b", &props(&[("acks", "all"), same[0], same[1], same[2]])).unwrap();
        assert!(kafka.properties.is_empty(), "{:?}", kafka.properties);
        let e = Connection::new("b", &props(&[("acks", "1")])).unwrap_err().to_string();
        assert!(e.contains("acks") && e.contains("sets it to all"), "{e}");
        let e = Connection::new("b", &props(&[("sasl.password", "${file:/nonexistent/pw}")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sasl.password") && e.contains("/nonexistent/pw"), "{e}");
        let e = Connection::new("b", &props(&[("sasl.password", "${env:SLUICE_TEST_UNSET_VAR}")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("SLUICE_TEST_UNSET_VAR is not set"), "{e}");
        let e = Connection::new("b", &props(&[("sasl.password", "${vault:x}")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither"), "{e}");
        // A value that merely contains `${` is taken as written.
        let kafka = Connection::new("b", &props(&[("client.rack", "a${b")])).unwrap();
        assert_eq!(kafka.config(Role::Producer).get("client.rack"), Some("a${b"));
    }
}

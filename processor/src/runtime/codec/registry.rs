//! A client of the schema registry REST API (the Confluent-compatible endpoints that
//! Confluent Schema Registry, Apicurio's ccompat API, Karapace and Redpanda serve): it
//! registers Sluice's schemas under the subject `<topic>-value` — or, with
//! `--schema-registry-auto-register false` (a governed registry), takes the subject's latest
//! version instead, like Confluent's serializers with `auto.register.schemas=false` and
//! `use.latest.version=true` — and fetches writer schemas by id, caching both for the life of
//! the process.
//!
//! Credentials, configured like Confluent's clients: basic auth (`USER:PASSWORD`) or a bearer
//! token, each given as is or as `${env:NAME}` / `${file:PATH}` (read as Kafka properties
//! are); user info in the URL (`https://user:password@host`) is taken as basic auth and
//! stripped from the URL. They go in the `Authorization` header only: no error, log line or
//! `Debug` output shows them, and what the registry answers is shown with them redacted.
//!
//! Errors say whose fault they are: an unknown schema id or a schema that is not Avro makes a
//! record bad input ([`RegistryError::blames_record`]); an unreachable registry, a timeout, a
//! 5xx, 408 or 429 is worth waiting out ([`RegistryError::is_transient`]): startup retries it
//! for [`STARTUP_PATIENCE`], the processor as long as it lasts.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apache_avro::schema_compatibility::{Compatibility, SchemaCompatibility};
use apache_avro::Schema;
use serde_json::{json, Value};

use super::super::kafka::{self, ConnectionError};
use super::protobuf::{self, Protobuf};

const BASIC_AUTH_FLAG: &str = "--schema-registry-basic-auth-user-info";
const BEARER_FLAG: &str = "--schema-registry-bearer-token";

/// How long one request to the registry may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The most files a Protobuf schema may reference (directly or through each other).
const MAX_REFERENCES: usize = 64;

/// How long registering (or looking up) Sluice's schemas retries a registry that is down
/// before giving up with the reason.
pub const STARTUP_PATIENCE: Duration = Duration::from_secs(60);

/// What went wrong talking to the registry, said so an operator can act on it (and never
/// with a credential in it).
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("the schema registry at {url} cannot be reached: {reason}; check --schema-registry-url")]
    Unreachable { url: String, reason: String },
    #[error(
        "the schema registry refuses Sluice's schema for subject {subject:?} as incompatible with the versions registered there: {message}. Set the subject's compatibility (e.g. BACKWARD) or register a compatible version; see schemas/README.md"
    )]
    Incompatible { subject: String, message: String },
    #[error("the schema registry rejects the schema for subject {subject:?} as invalid: {message}")]
    Invalid { subject: String, message: String },
    #[error("the schema registry has no schema with id {id}: was the record written against another registry?")]
    UnknownId { id: u32 },
    #[error("the schema registry answered {status} to {what}: {message}")]
    Failed { what: String, status: u16, message: String },
    #[error(
        "the schema registry refuses {what} ({status}: {message}): check --schema-registry-basic-auth-user-info or --schema-registry-bearer-token, and what the registry grants that user"
    )]
    Unauthorized { what: String, status: u16, message: String },
    #[error("the schema with id {id} from the registry is not valid Avro: {reason}")]
    BadSchema { id: u32, reason: String },
    #[error("the Protobuf schema with id {id} from the registry does not compile: {reason}")]
    BadProtobuf { id: u32, reason: String },
    #[error("{what} in the schema registry is a {schema_type} schema; Sluice writes Avro (it reads Avro, JSON Schema and Protobuf records)")]
    NotAvro { what: String, schema_type: String },
    #[error(
        "subject {subject:?} has no version in the schema registry ({message}); with --schema-registry-auto-register false, register Sluice's schema (schemas/*.avsc) under it first"
    )]
    NoSubject { subject: String, message: String },
    #[error(
        "the latest version of subject {subject:?} (version {version}, schema id {id}) cannot hold what Sluice writes: {reason}. With --schema-registry-auto-register false Sluice writes with the subject's latest version, which must be able to read every record of Sluice's schema (schemas/*.avsc): register a compatible version"
    )]
    LatestIncompatible {
        subject: String,
        version: i64,
        id: u32,
        reason: String,
    },
    #[error("{setting}: {reason}")]
    Credentials { setting: &'static str, reason: String },
    #[error("--schema-registry-url is not a usable URL: {reason}")]
    Url { reason: String },
    #[error("gave up on the schema registry for subject {subject:?} after {seconds} s of retries: {last}")]
    GaveUp {
        subject: String,
        seconds: u64,
        last: Box<RegistryError>,
    },
}

impl RegistryError {
    /// Worth another attempt: the registry is unreachable, timed out, or answered 5xx, 408
    /// or 429.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Unreachable { .. } => true,
            RegistryError::Failed { status, .. } => *status >= 500 || matches!(status, 408 | 429),
            _ => false,
        }
    }

    /// Whether, met while reading a record, the error is the record's fault (its schema id
    /// is unknown to the registry, or names a schema that is not Avro): anything else
    /// (an outage, refused credentials, an unexpected answer) is the registry's or the
    /// deployment's, and the record must wait rather than be rejected.
    pub fn blames_record(&self) -> bool {
        matches!(
            self,
            RegistryError::UnknownId { .. }
                | RegistryError::BadSchema { .. }
                | RegistryError::BadProtobuf { .. }
                | RegistryError::NotAvro { .. }
        )
    }
}

/// How to reach the registry (`--schema-registry-*`). Its `Debug` output shows no credential.
#[derive(Clone)]
pub struct RegistrySettings {
    /// The base URL; user info in it (`user:password@`) is taken as basic auth.
    pub url: String,
    /// `USER:PASSWORD`, or `${env:NAME}` / `${file:PATH}` holding it.
    pub basic_auth_user_info: Option<String>,
    /// A bearer token, or `${env:NAME}` / `${file:PATH}` holding it.
    pub bearer_token: Option<String>,
    /// Register Sluice's schemas (true), or use each subject's latest version (false).
    pub auto_register: bool,
}

impl RegistrySettings {
    /// `url`, no other credentials, auto-registering.
    pub fn new(url: &str) -> RegistrySettings {
        RegistrySettings {
            url: url.to_string(),
            basic_auth_user_info: None,
            bearer_token: None,
            auto_register: true,
        }
    }
}

impl std::fmt::Debug for RegistrySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |v: &Option<String>| v.as_ref().map(|_| "[redacted]");
        f.debug_struct("RegistrySettings")
            .field("url", &without_user_info(&self.url))
            .field("basic_auth_user_info", &redacted(&self.basic_auth_user_info))
            .field("bearer_token", &redacted(&self.bearer_token))
            .field("auto_register", &self.auto_register)
            .finish()
    }
}

#[derive(Clone, Default)]
enum Auth {
    #[default]
    None,
    Basic {
        user: String,
        password: String,
    },
    Bearer(String),
}

impl Auth {
    /// The one credential `settings` give (the URL's user info, taken out of `url`).
    fn of(settings: &RegistrySettings, url: &mut url::Url) -> Result<Auth, RegistryError> {
        let in_url = !url.username().is_empty() || url.password().is_some();
        let given = [
            in_url,
            settings.basic_auth_user_info.is_some(),
            settings.bearer_token.is_some(),
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(RegistryError::Credentials {
                setting: "the schema registry's credentials",
                reason: "give one of user info in --schema-registry-url, --schema-registry-basic-auth-user-info and --schema-registry-bearer-token".into(),
            });
        }
        if in_url {
            let auth = Auth::Basic {
                user: percent_decode(url.username()),
                password: url.password().map(percent_decode).unwrap_or_default(),
            };
            let stripped = url.set_username("").and_then(|()| url.set_password(None));
            stripped.map_err(|()| RegistryError::Url {
                reason: "its user info cannot be taken out".into(),
            })?;
            return Ok(auth);
        }
        if let Some(value) = &settings.basic_auth_user_info {
            let info = secret(BASIC_AUTH_FLAG, value)?;
            return match info.split_once(':') {
                Some((user, password)) if !user.is_empty() => Ok(Auth::Basic {
                    user: user.to_string(),
                    password: password.to_string(),
                }),
                _ => Err(RegistryError::Credentials {
                    setting: BASIC_AUTH_FLAG,
                    reason: "expected USER:PASSWORD (as the value, or in the variable or file it names)".into(),
                }),
            };
        }
        if let Some(value) = &settings.bearer_token {
            let token = secret(BEARER_FLAG, value)?;
            if token.trim().is_empty() {
                return Err(RegistryError::Credentials {
                    setting: BEARER_FLAG,
                    reason: "the token is empty".into(),
                });
            }
            return Ok(Auth::Bearer(token.trim().to_string()));
        }
        Ok(Auth::None)
    }

    fn kind(&self) -> &'static str {
        match self {
            Auth::None => "none",
            Auth::Basic { .. } => "basic",
            Auth::Bearer(_) => "bearer",
        }
    }

    /// What must never be shown, longest first.
    fn secrets(&self) -> Vec<String> {
        let mut secrets = match self {
            Auth::None => Vec::new(),
            // The header's form too: a registry may repeat the header it was sent.
            Auth::Basic { user, password } => vec![
                base64(format!("{user}:{password}").as_bytes()),
                format!("{user}:{password}"),
                password.clone(),
            ],
            Auth::Bearer(token) => vec![token.clone()],
        };
        secrets.retain(|s| !s.is_empty());
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets
    }
}

/// A credential's value, read from `${env:NAME}` or `${file:PATH}` when it says so (as Kafka
/// properties are); the error never repeats the value.
fn secret(setting: &'static str, value: &str) -> Result<String, RegistryError> {
    kafka::resolve(setting, value).map_err(|e| {
        let reason = match e {
            ConnectionError::Secret { source_desc, .. } => source_desc,
            other => other.to_string(),
        };
        let reason = match value.is_empty() {
            true => reason,
            false => reason.replace(value, "[redacted]"),
        };
        RegistryError::Credentials { setting, reason }
    })
}

/// The subject's writer: the schema id records are framed with, and the registered schema
/// when it is not Sluice's own (records are then resolved to it before they are written).
#[derive(Clone, Debug)]
pub struct Writer {
    pub id: u32,
    pub schema: Option<Arc<Schema>>,
}

#[derive(Clone)]
pub struct Registry {
    /// Without user info, without a trailing slash.
    url: String,
    auth: Auth,
    auto_register: bool,
    patience: Duration,
    client: reqwest::Client,
    writers: Arc<Mutex<HashMap<String, Writer>>>,
    schemas: Arc<Mutex<HashMap<u32, Arc<Schema>>>>,
    /// Ids the registry says hold JSON Schemas: records framed with one are JSON.
    json_schemas: Arc<Mutex<HashSet<u32>>>,
    /// Protobuf schemas by id, compiled.
    protobuf: Arc<Mutex<HashMap<u32, Arc<Protobuf>>>>,
}

/// What a record framed with a schema id holds after its five bytes of framing.
#[derive(Debug, Clone)]
pub enum Framed {
    /// An Avro datum written with this schema.
    Avro(Arc<Schema>),
    /// JSON text (Confluent's JSON Schema serializer): the id was checked, the text is read
    /// as any JSON record is.
    Json,
    /// Message indexes and a Protobuf message (Confluent's Protobuf serializer).
    Protobuf(Arc<Protobuf>),
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("url", &self.url)
            .field("auth", &self.auth.kind())
            .field("auto_register", &self.auto_register)
            .finish_non_exhaustive()
    }
}

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

impl Registry {
    /// The registry at `url`, auto-registering (user info in `url` is basic auth).
    pub fn new(url: &str) -> Result<Registry, RegistryError> {
        Registry::connect(&RegistrySettings::new(url))
    }

    /// The registry `settings` describe, its credentials read (from the environment or files
    /// where they say so). No request is made yet.
    pub fn connect(settings: &RegistrySettings) -> Result<Registry, RegistryError> {
        let mut url = url::Url::parse(settings.url.trim()).map_err(|e| RegistryError::Url { reason: e.to_string() })?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(RegistryError::Url {
                reason: "expected http://HOST[:PORT][/PATH] or https://...".into(),
            });
        }
        let auth = Auth::of(settings, &mut url)?;
        // TLS through ring (the build has no other provider); a no-op once installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = url.as_str().trim_end_matches('/').to_string();
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| RegistryError::Unreachable {
                url: url.clone(),
                reason: e.without_url().to_string(),
            })?;
        Ok(Registry {
            url,
            auth,
            auto_register: settings.auto_register,
            patience: STARTUP_PATIENCE,
            client,
            writers: Arc::default(),
            schemas: Arc::default(),
            json_schemas: Arc::default(),
            protobuf: Arc::default(),
        })
    }

    /// The same registry, retrying a failing registration for `patience` (rather than
    /// [`STARTUP_PATIENCE`]).
    pub fn with_patience(self, patience: Duration) -> Registry {
        Registry { patience, ..self }
    }

    /// The id records of `schema` (whose `.avsc` text is `text`, docs included) are framed
    /// with under `subject`: registering it if the registry lacks it (the registry answers
    /// with the existing id for a schema it already has), or, when not auto-registering, the
    /// subject's latest version if it can hold Sluice's records. A registry that cannot
    /// answer is retried with backoff for the patience, then the reason is returned.
    pub async fn prepare(&self, subject: &str, text: &str, schema: &Schema) -> Result<u32, RegistryError> {
        if let Some(writer) = self.writer(subject) {
            return Ok(writer.id);
        }
        let started = Instant::now();
        let mut backoff = crate::runtime::backoff::Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        loop {
            let attempt = match self.auto_register {
                true => self.register(subject, text, schema).await,
                false => self.use_latest(subject, schema).await,
            };
            match attempt {
                Err(e) if e.is_transient() => {
                    let wait = backoff.next_wait();
                    if started.elapsed() + wait > self.patience {
                        return Err(RegistryError::GaveUp {
                            subject: subject.to_string(),
                            seconds: started.elapsed().as_secs(),
                            last: Box::new(e),
                        });
                    }
                    tracing::warn!(subject, error = %e, "the schema registry cannot answer yet; retrying");
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    /// Registers `schema` under `subject`, once.
    async fn register(&self, subject: &str, text: &str, schema: &Schema) -> Result<u32, RegistryError> {
        let url = format!("{}/subjects/{}/versions", self.url, encode(subject));
        let body = json!({"schemaType": "AVRO", "schema": text});
        let request = self
            .client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .body(body.to_string());
        let (status, answer, message) = self.call(request).await?;
        let subject = subject.to_string();
        match status {
            200 => {
                let id = id_in(&answer).ok_or_else(|| RegistryError::Failed {
                    what: format!("registering subject {subject:?}"),
                    status,
                    message: "no schema id in the answer".into(),
                })?;
                self.keep(subject, id, Arc::new(schema.clone()), false);
                Ok(id)
            }
            409 => Err(RegistryError::Incompatible { subject, message }),
            422 => Err(RegistryError::Invalid { subject, message }),
            _ => Err(self.failure(format!("registering subject {subject:?}"), status, message)),
        }
    }

    /// Takes `subject`'s latest version as its writer, if it can hold Sluice's `schema`.
    async fn use_latest(&self, subject: &str, schema: &Schema) -> Result<u32, RegistryError> {
        let url = format!("{}/subjects/{}/versions/latest", self.url, encode(subject));
        let (status, answer, message) = self.call(self.client.get(&url)).await?;
        let what = format!("looking up the latest version of subject {subject:?}");
        match status {
            200 => {}
            404 => {
                return Err(RegistryError::NoSubject {
                    subject: subject.to_string(),
                    message,
                })
            }
            _ => return Err(self.failure(what, status, message)),
        }
        let id = id_in(&answer).ok_or_else(|| RegistryError::Failed {
            what: what.clone(),
            status,
            message: "no schema id in the answer".into(),
        })?;
        let version = answer["version"].as_i64().unwrap_or(0);
        check_avro(&answer, || format!("the latest version of subject {subject:?}"))?;
        let latest = parse(&answer, id).map_err(|e| RegistryError::LatestIncompatible {
            subject: subject.to_string(),
            version,
            id,
            reason: e.to_string(),
        })?;
        let resolved = if latest.canonical_form() == schema.canonical_form() {
            false
        } else {
            let reason = match SchemaCompatibility::can_read(schema, &latest) {
                Ok(Compatibility::Full) => None,
                Ok(Compatibility::Partial) => Some(
                    "only some of Sluice's records resolve to it (an enum without a symbol Sluice writes and no default, or a union without a branch Sluice writes)".to_string(),
                ),
                Err(e) => Some(e.to_string()),
            };
            if let Some(reason) = reason {
                return Err(RegistryError::LatestIncompatible {
                    subject: subject.to_string(),
                    version,
                    id,
                    reason,
                });
            }
            true
        };
        self.keep(subject.to_string(), id, Arc::new(latest), resolved);
        Ok(id)
    }

    /// Remembers `subject`'s writer and the schema with `id`.
    fn keep(&self, subject: String, id: u32, schema: Arc<Schema>, resolved: bool) {
        let writer = Writer {
            id,
            schema: resolved.then(|| schema.clone()),
        };
        self.writers.lock().expect("registry cache").insert(subject, writer);
        self.schemas.lock().expect("registry cache").insert(id, schema);
    }

    /// What a record framed with schema `id` holds: an Avro datum with its writer schema,
    /// or JSON (a JSON Schema id).
    pub async fn framed(&self, id: u32) -> Result<Framed, RegistryError> {
        if let Some(schema) = self.schemas.lock().expect("registry cache").get(&id) {
            return Ok(Framed::Avro(schema.clone()));
        }
        if self.json_schemas.lock().expect("registry cache").contains(&id) {
            return Ok(Framed::Json);
        }
        if let Some(schema) = self.protobuf.lock().expect("registry cache").get(&id) {
            return Ok(Framed::Protobuf(schema.clone()));
        }
        let url = format!("{}/schemas/ids/{id}", self.url);
        let (status, answer, message) = self.call(self.client.get(&url)).await?;
        match status {
            200 if answer["schemaType"].as_str() == Some("JSON") => {
                self.json_schemas.lock().expect("registry cache").insert(id);
                Ok(Framed::Json)
            }
            200 if answer["schemaType"].as_str() == Some("PROTOBUF") => {
                let references = self.references(&answer, id).await?;
                let text = answer["schema"].as_str().unwrap_or_default();
                let schema =
                    protobuf::compile(text, references).map_err(|reason| RegistryError::BadProtobuf { id, reason })?;
                self.protobuf.lock().expect("registry cache").insert(id, schema.clone());
                Ok(Framed::Protobuf(schema))
            }
            200 => {
                check_avro(&answer, || format!("the schema with id {id}"))?;
                let schema = Arc::new(parse(&answer, id)?);
                self.schemas.lock().expect("registry cache").insert(id, schema.clone());
                Ok(Framed::Avro(schema))
            }
            // The registry's own "not found" (error code 40403): a 404 without one is
            // something else answering (a wrong URL), not a verdict on the id.
            404 if answer.get("error_code").is_some() => Err(RegistryError::UnknownId { id }),
            _ => Err(self.failure(format!("fetching the schema with id {id}"), status, message)),
        }
    }

    /// The texts of the files a schema's `references` name (import name → text), and of
    /// theirs, each fetched once; at most [`MAX_REFERENCES`].
    async fn references(&self, answer: &Value, id: u32) -> Result<HashMap<String, String>, RegistryError> {
        let mut texts = HashMap::new();
        let mut wanted: Vec<Value> = answer["references"].as_array().cloned().unwrap_or_default();
        while let Some(reference) = wanted.pop() {
            let name = reference["name"].as_str().unwrap_or_default().to_string();
            if texts.contains_key(&name) {
                continue;
            }
            if texts.len() >= MAX_REFERENCES {
                let reason = format!("more than {MAX_REFERENCES} referenced schemas");
                return Err(RegistryError::BadProtobuf { id, reason });
            }
            let (Some(subject), Some(version)) = (reference["subject"].as_str(), reference["version"].as_i64()) else {
                let reason = format!("a reference without subject and version: {reference}");
                return Err(RegistryError::BadProtobuf { id, reason });
            };
            let url = format!("{}/subjects/{}/versions/{version}", self.url, encode(subject));
            let (status, found, message) = self.call(self.client.get(&url)).await?;
            if status != 200 {
                return Err(self.failure(
                    format!("fetching {subject} version {version}, which schema {id} references"),
                    status,
                    message,
                ));
            }
            wanted.extend(found["references"].as_array().cloned().unwrap_or_default());
            texts.insert(name, found["schema"].as_str().unwrap_or_default().to_string());
        }
        Ok(texts)
    }

    /// Whether the registry answers at all (its subject list, with the credentials): told
    /// apart from one record's schema it will not serve (403 for that id, a bare 404), which
    /// is the record's to bear, not every partition's.
    pub async fn answers(&self) -> bool {
        let url = format!("{}/subjects", self.url);
        matches!(self.call(self.client.get(&url)).await, Ok((200, _, _)))
    }

    /// `subject`'s writer, once [`Self::prepare`]d.
    pub fn writer(&self, subject: &str) -> Option<Writer> {
        self.writers.lock().expect("registry cache").get(subject).cloned()
    }

    /// Sends `request` with the credentials: the status, the answer (JSON, or null) and its
    /// message (redacted).
    async fn call(&self, request: reqwest::RequestBuilder) -> Result<(u16, Value, String), RegistryError> {
        let request = match &self.auth {
            Auth::None => request,
            Auth::Basic { user, password } => request.basic_auth(user, Some(password)),
            Auth::Bearer(token) => request.bearer_auth(token),
        };
        let response = request
            .header(reqwest::header::ACCEPT, CONTENT_TYPE)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(|e| self.unreachable(e))?;
        let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let message = match answer["message"].as_str() {
            Some(message) => message.to_string(),
            None => {
                let text = String::from_utf8_lossy(&body);
                let text = text.trim();
                match text.char_indices().nth(200) {
                    _ if text.is_empty() => "no message".to_string(),
                    Some((end, _)) => format!("{}...", &text[..end]),
                    None => text.to_string(),
                }
            }
        };
        Ok((status, answer, self.redact(&message)))
    }

    /// An answer other than the one hoped for.
    fn failure(&self, what: String, status: u16, message: String) -> RegistryError {
        match status {
            401 | 403 => RegistryError::Unauthorized { what, status, message },
            _ => RegistryError::Failed { what, status, message },
        }
    }

    fn unreachable(&self, e: reqwest::Error) -> RegistryError {
        let timeout = e.is_timeout();
        // With its causes, as `a: b: c`.
        let mut reason = format!("{:#}", anyhow::Error::new(e.without_url()));
        if timeout {
            reason.push_str(&format!(" (no answer within {} s)", TIMEOUT.as_secs()));
        }
        RegistryError::Unreachable {
            url: self.url.clone(),
            reason: self.redact(&reason),
        }
    }

    /// `text` with every credential replaced by `[redacted]`.
    fn redact(&self, text: &str) -> String {
        self.auth.secrets().iter().fold(text.to_string(), |text, secret| {
            text.replace(secret.as_str(), "[redacted]")
        })
    }
}

fn id_in(answer: &Value) -> Option<u32> {
    answer["id"].as_u64().and_then(|id| u32::try_from(id).ok())
}

/// An answer's schema is Avro (the registry leaves `schemaType` out for Avro).
fn check_avro(answer: &Value, what: impl FnOnce() -> String) -> Result<(), RegistryError> {
    match answer["schemaType"].as_str() {
        None | Some("AVRO") => Ok(()),
        Some(other) => Err(RegistryError::NotAvro {
            what: what(),
            schema_type: other.to_string(),
        }),
    }
}

fn parse(answer: &Value, id: u32) -> Result<Schema, RegistryError> {
    let text = answer["schema"].as_str().unwrap_or_default();
    Schema::parse_str(text).map_err(|e| RegistryError::BadSchema {
        id,
        reason: e.to_string(),
    })
}

fn encode(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes()).collect()
}

/// `bytes` in standard base64, as the basic auth header carries them.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            match i <= chunk.len() {
                true => out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char),
                false => out.push('='),
            }
        }
    }
    out
}

/// `%XX` escapes in a URL's user info decoded (`+` stays a plus there).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `url` without any `user:password@`, for display.
fn without_user_info(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    //! Against a real HTTP server on loopback that speaks the registry's endpoints.

    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::extract::State;
    use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
    use axum::Router;
    use rdkafka::message::{OwnedMessage, Timestamp};
    use serde_json::Value as Json;

    use super::*;
    use crate::core::lifecycle::Input;
    use crate::core::limits::Limits;
    use crate::runtime::codec::{Codec, CodecError, Family, Formats};
    use crate::runtime::input::read_input;
    use crate::runtime::topics::InputTopic;

    const PASSWORD: &str = "s3cret-pw";
    /// `Basic` and base64 of `sluice:s3cret-pw`.
    const BASIC: &str = "Basic c2x1aWNlOnMzY3JldC1wdw==";
    const TOKEN: &str = "t0ken-abc.def";

    #[derive(Clone, Default)]
    struct Fake {
        /// The `Authorization` header every request must carry (none: any will do).
        authorization: Option<String>,
        /// How many requests are answered 503 before the registry recovers.
        outage: Arc<AtomicUsize>,
        /// `METHOD /path`, in order.
        requests: Arc<Mutex<Vec<String>>>,
    }

    /// Sluice's sensor schema with one more field, with a default: it reads Sluice's records.
    fn evolved() -> String {
        let mut schema: Json = serde_json::from_str(Family::Sensors.schema_text()).unwrap();
        let field = json!({"name": "site", "type": "string", "default": "here"});
        schema["fields"].as_array_mut().unwrap().push(field);
        schema.to_string()
    }

    /// Sluice's job schema with a field Sluice never writes, without a default.
    fn narrow() -> String {
        let mut schema: Json = serde_json::from_str(Family::Jobs.schema_text()).unwrap();
        let field = json!({"name": "mandatory", "type": "string"});
        schema["fields"].as_array_mut().unwrap().push(field);
        schema.to_string()
    }

    /// A producer's own Protobuf schema for readings, as Confluent's serializer registers it.
    const PROTO: &str = "syntax = \"proto3\"; package acme; import \"google/protobuf/struct.proto\";
        message Reading { string pipeline_id = 1; string key = 2; google.protobuf.Struct data = 3; }";

    async fn answer(State(fake): State<Fake>, method: Method, uri: Uri, headers: HeaderMap) -> (StatusCode, String) {
        let path = uri.path().to_string();
        fake.requests.lock().unwrap().push(format!("{method} {path}"));
        let sent = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if fake.authorization.is_some() && sent != fake.authorization.as_deref() {
            // A careless registry that repeats the credential it expects.
            let message = format!("Unauthorized: user sluice has password {PASSWORD}, not {sent:?}");
            return (
                StatusCode::UNAUTHORIZED,
                json!({"error_code": 401, "message": message}).to_string(),
            );
        }
        let down = fake
            .outage
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if down {
            let body = json!({"error_code": 50003, "message": "Error while forwarding the request to the leader"});
            return (StatusCode::SERVICE_UNAVAILABLE, body.to_string());
        }
        let ok = |body: Json| (StatusCode::OK, body.to_string());
        let latest = |id: u32, schema: String| json!({"subject": "s", "version": 3, "id": id, "schema": schema});
        match (method.as_str(), path.as_str()) {
            ("POST", p) if p.starts_with("/subjects/") && p.ends_with("/versions") => ok(json!({"id": 1})),
            ("GET", "/subjects/t.same-value/versions/latest") => {
                ok(latest(7, Family::Events.schema_text().to_string()))
            }
            ("GET", "/subjects/t.evolved-value/versions/latest") => ok(latest(8, evolved())),
            ("GET", "/subjects/t.narrow-value/versions/latest") => ok(latest(9, narrow())),
            ("GET", "/subjects/t.proto-value/versions/latest") => ok(
                json!({"subject": "t.proto-value", "version": 1, "id": 10, "schemaType": "PROTOBUF", "schema": PROTO}),
            ),
            ("GET", "/schemas/ids/7") => ok(json!({"schema": Family::Events.schema_text()})),
            ("GET", "/schemas/ids/8") => ok(json!({"schema": evolved()})),
            ("GET", "/schemas/ids/10") => ok(json!({"schemaType": "PROTOBUF", "schema": PROTO})),
            ("GET", "/schemas/ids/11") => ok(json!({"schemaType": "JSON", "schema": r#"{"type": "object"}"#})),
            ("GET", p) if p.starts_with("/schemas/ids/") => (
                StatusCode::NOT_FOUND,
                json!({"error_code": 40403, "message": "Schema not found"}).to_string(),
            ),
            ("GET", p) if p.starts_with("/subjects/") && p.ends_with("/versions/latest") => (
                StatusCode::NOT_FOUND,
                json!({"error_code": 40401, "message": "Subject not found."}).to_string(),
            ),
            // Something other than a registry (a wrong URL): a bare 404.
            _ => (StatusCode::NOT_FOUND, "Not Found".into()),
        }
    }

    /// Serves `fake` on loopback; its base URL.
    async fn serve(fake: &Fake) -> String {
        let app = Router::new().fallback(answer).with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    fn settings(url: &str) -> RegistrySettings {
        RegistrySettings::new(url)
    }

    fn avro() -> Formats {
        Formats::parse(&["avro".into()]).unwrap()
    }

    fn sensor() -> Json {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/examples/sensor.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    /// No trace of any credential in `text`.
    fn clean(text: &str) {
        for secret in [PASSWORD, TOKEN, "c2x1aWNlOnMzY3JldC1wdw"] {
            assert!(!text.contains(secret), "{secret} shown in: {text}");
        }
    }

    #[tokio::test]
    async fn basic_auth_read_from_a_file_and_bearer_from_the_environment_are_sent() {
        let fake = Fake {
            authorization: Some(BASIC.into()),
            ..Fake::default()
        };
        let url = serve(&fake).await;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("user-info");
        std::fs::write(&file, format!("sluice:{PASSWORD}\n")).unwrap();
        let registry = Registry::connect(&RegistrySettings {
            basic_auth_user_info: Some(format!("${{file:{}}}", file.display())),
            ..settings(&url)
        })
        .unwrap();
        let schema = Family::Events.schema();
        assert_eq!(registry.prepare("a-value", "{}", schema).await.unwrap(), 1);
        clean(&format!("{registry:?}"));

        // The same credential as user info in the URL: sent as basic auth, shown nowhere.
        let with_user_info = url.replace("http://", &format!("http://sluice:{PASSWORD}@"));
        let registry = Registry::connect(&settings(&with_user_info)).unwrap();
        assert_eq!(registry.prepare("b-value", "{}", schema).await.unwrap(), 1);
        clean(&format!("{registry:?} {:?}", settings(&with_user_info)));
        let away = Registry::connect(&settings(&format!("http://sluice:{PASSWORD}@127.0.0.1:1")))
            .unwrap()
            .with_patience(Duration::ZERO);
        let e = away.prepare("c-value", "{}", schema).await.unwrap_err();
        assert!(e.to_string().contains("cannot be reached"), "{e}");
        clean(&format!("{e} {e:?}"));

        // A bearer token from the environment.
        let fake = Fake {
            authorization: Some(format!("Bearer {TOKEN}")),
            ..Fake::default()
        };
        let url = serve(&fake).await;
        std::env::set_var("SLUICE_TEST_REGISTRY_TOKEN", TOKEN);
        let registry = Registry::connect(&RegistrySettings {
            bearer_token: Some("${env:SLUICE_TEST_REGISTRY_TOKEN}".into()),
            ..settings(&url)
        })
        .unwrap();
        assert_eq!(registry.prepare("a-value", "{}", schema).await.unwrap(), 1);
        assert_eq!(fake.requests.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_refused_credential_says_so_without_echoing_it() {
        let fake = Fake {
            authorization: Some("Basic something-else".into()),
            ..Fake::default()
        };
        let url = serve(&fake).await;
        let registry = Registry::connect(&RegistrySettings {
            basic_auth_user_info: Some(format!("sluice:{PASSWORD}")),
            ..settings(&url)
        })
        .unwrap();
        let e = registry
            .prepare("a-value", "{}", Family::Events.schema())
            .await
            .unwrap_err();
        let shown = e.to_string();
        assert!(
            matches!(e, RegistryError::Unauthorized { status: 401, .. }) && !e.is_transient(),
            "{e:?}"
        );
        assert!(
            shown.contains("401") && shown.contains("[redacted]") && shown.contains(BASIC_AUTH_FLAG),
            "{shown}"
        );
        clean(&format!("{shown} {e:?}"));
        assert_eq!(
            fake.requests.lock().unwrap().len(),
            1,
            "refused credentials are not retried"
        );

        // Reading a record meanwhile: not the record's fault.
        let codec = Codec::with_registry(Formats::default(), Some(registry));
        let e = codec.decode(Family::Sensors, &[0, 0, 0, 0, 7, 0]).await.unwrap_err();
        assert!(!e.blames_record(), "{e}");
        clean(&e.to_string());
    }

    #[test]
    fn credentials_that_cannot_be_used_are_refused_without_their_value() {
        let url = "http://127.0.0.1:1";
        let bad = |settings: RegistrySettings| Registry::connect(&settings).unwrap_err().to_string();
        let e = bad(RegistrySettings {
            basic_auth_user_info: Some(PASSWORD.into()),
            ..settings(url)
        });
        assert!(e.contains(BASIC_AUTH_FLAG) && e.contains("USER:PASSWORD"), "{e}");
        clean(&e);
        let e = bad(RegistrySettings {
            basic_auth_user_info: Some("${env:SLUICE_TEST_REGISTRY_UNSET}".into()),
            ..settings(url)
        });
        assert!(e.contains("SLUICE_TEST_REGISTRY_UNSET is not set"), "{e}");
        let e = bad(RegistrySettings {
            basic_auth_user_info: Some(format!("sluice:{PASSWORD}")),
            bearer_token: Some(TOKEN.into()),
            ..settings(url)
        });
        assert!(e.contains("give one of"), "{e}");
        clean(&e);
        let e = bad(RegistrySettings {
            bearer_token: Some(TOKEN.into()),
            ..settings(&format!("http://sluice:{PASSWORD}@127.0.0.1:1"))
        });
        assert!(e.contains("give one of"), "{e}");
        clean(&e);
        let e = bad(settings(&format!("ftp://sluice:{PASSWORD}@127.0.0.1")));
        assert!(e.contains("--schema-registry-url"), "{e}");
        clean(&e);
        let shown = format!(
            "{:?}",
            RegistrySettings {
                basic_auth_user_info: Some(format!("sluice:{PASSWORD}")),
                bearer_token: Some(TOKEN.into()),
                ..settings(&format!("https://sluice:{PASSWORD}@registry:8081/x"))
            }
        );
        assert!(shown.contains("https://registry:8081/x"), "{shown}");
        clean(&shown);
        assert_eq!(percent_decode("p%40ss%2Fw+rd%"), "p@ss/w+rd%");
        assert_eq!(
            format!("Basic {}", base64(format!("sluice:{PASSWORD}").as_bytes())),
            BASIC
        );
        assert_eq!(
            ["", "a", "ab", "abc"].map(|s| base64(s.as_bytes())),
            ["", "YQ==", "YWI=", "YWJj"]
        );
    }

    #[tokio::test]
    async fn without_auto_registration_the_latest_version_is_used_if_it_holds_sluices_records() {
        let fake = Fake::default();
        let url = serve(&fake).await;
        let registry = Registry::connect(&RegistrySettings {
            auto_register: false,
            ..settings(&url)
        })
        .unwrap();
        let codec = Codec::with_registry(avro(), Some(registry.clone()));

        // The same schema (in its canonical form): written as it is, framed with its id.
        codec.prepare(&[(Family::Events, "t.same")]).await.unwrap();
        assert!(registry.writer("t.same-value").unwrap().schema.is_none());
        let event = json!({
            "eventId": "e1", "type": "JOB_TRIGGERED", "category": "execution", "pipelineId": "p",
            "timestamp": "2026-11-22T12:45:00Z", "message": "m", "detail": {}
        });
        let bytes = codec.encode(Family::Events, "t.same", &event).unwrap();
        assert_eq!(bytes[..5], [0, 0, 0, 0, 7]);

        // A later version that reads Sluice's records: they are written as that version.
        codec.prepare(&[(Family::Sensors, "t.evolved")]).await.unwrap();
        let bytes = codec.encode(Family::Sensors, "t.evolved", &sensor()).unwrap();
        assert_eq!(bytes[..5], [0, 0, 0, 0, 8]);
        let latest = Schema::parse_str(&evolved()).unwrap();
        let written = apache_avro::reader::datum::GenericDatumReader::builder(&latest)
            .build()
            .unwrap()
            .read_value(&mut &bytes[5..])
            .unwrap();
        let apache_avro::types::Value::Record(fields) = written else {
            panic!("a record")
        };
        assert!(fields.contains(&("site".into(), apache_avro::types::Value::String("here".into()))));
        // ...and read back by any reader, the writer schema fetched by id.
        let reader = Codec::new(Formats::default(), Some(&url)).unwrap();
        let back: Json = serde_json::from_slice(&reader.decode(Family::Sensors, &bytes).await.unwrap()).unwrap();
        assert_eq!(back, sensor());

        // One that cannot hold them, one that is not Avro, none at all: startup stops, naming
        // the subject.
        let e = codec
            .prepare(&[(Family::Jobs, "t.narrow")])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"t.narrow-value\"") && e.contains("version 3, schema id 9") && e.contains("mandatory"),
            "{e}"
        );
        let e = codec
            .prepare(&[(Family::Commands, "t.proto")])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("latest version of subject \"t.proto-value\"") && e.contains("PROTOBUF schema"),
            "{e}"
        );
        let e = codec
            .prepare(&[(Family::Jobs, "t.missing")])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"t.missing-value\" has no version") && e.contains("--schema-registry-auto-register false"),
            "{e}"
        );
        let requests = fake.requests.lock().unwrap().clone();
        assert!(
            requests.iter().all(|r| r.starts_with("GET")),
            "nothing registered: {requests:?}"
        );
    }

    /// A sensor reading framed for the registry with schema `id` (then `datum`), as the
    /// processor reads it.
    fn framed(id: u8, datum: &[u8]) -> OwnedMessage {
        let mut value = vec![0, 0, 0, 0, id];
        value.extend_from_slice(datum);
        OwnedMessage::new(
            Some(value),
            Some(b"p".to_vec()),
            "t.sensors".into(),
            Timestamp::NotAvailable,
            0,
            42,
            None,
        )
    }

    #[tokio::test]
    async fn a_schema_that_is_not_avro_or_unknown_makes_bad_input_and_an_outage_does_not() {
        let fake = Fake::default();
        let url = serve(&fake).await;
        let codec = Codec::new(Formats::default(), Some(&url)).unwrap();
        let read = |codec: &Codec, message: OwnedMessage| {
            let codec = codec.clone();
            async move { read_input(&codec, InputTopic::Sensors, &message, 1, &Limits::default()).await }
        };
        let rejected = |read: Result<(crate::core::ids::PipelineId, Input), CodecError>| match read {
            Ok((_, Input::Rejected { reason, .. })) => reason,
            other => panic!("not rejected: {other:?}"),
        };
        // Confluent's Protobuf serializer: message indexes, then the message. Read as the
        // reading it is; bytes that are no such message are bad input naming why.
        let schema = protobuf::compile(PROTO, HashMap::new()).unwrap();
        let reading = r#"{"pipelineId": "p", "key": "rows", "data": {"count": 7}}"#;
        let datum = protobuf::frame(&schema, &[], reading).unwrap();
        let (pipeline, input) = read(&codec, framed(10, &datum)).await.unwrap();
        let Input::SensorReceived(reading) = input else {
            panic!("{input:?}")
        };
        assert_eq!(
            (pipeline.as_str(), reading.key.as_str(), &reading.data["count"]),
            ("p", "rows", &json!(7.0))
        );
        let reason = rejected(read(&codec, framed(10, &[0, 0x0a, 0xff])).await);
        assert!(reason.contains("undecodable Protobuf (schema id 10)"), "{reason}");
        let reason = rejected(read(&codec, framed(99, &[0; 8])).await);
        assert!(reason.contains("no schema with id 99"), "{reason}");

        // Confluent's JSON Schema serializer: a registered JSON Schema id, then JSON. Read as
        // the reading it is; the id is asked of the registry once. Framed with an id the
        // registry lacks, the same JSON is bad input.
        let json_reading = br#"{"pipelineId": "p", "key": "rows", "data": {"count": 7}}"#;
        for _ in 0..2 {
            let (pipeline, input) = read(&codec, framed(11, json_reading)).await.unwrap();
            assert_eq!(pipeline, "p");
            let Input::SensorReceived(reading) = input else {
                panic!("{input:?}")
            };
            assert_eq!(reading.data["count"], json!(7));
        }
        let asked = fake
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.contains("/schemas/ids/11"))
            .count();
        assert_eq!(asked, 1, "the id's type is kept");
        let reason = rejected(read(&codec, framed(98, json_reading)).await);
        assert!(reason.contains("no schema with id 98"), "{reason}");
        let reason = rejected(read(&codec, framed(11, b"not json")).await);
        assert!(!reason.is_empty());

        // A valid reading written with schema 8; the registry goes down before it is read:
        // not the record's fault, so no rejection, until the registry is back.
        let writer = Registry::connect(&RegistrySettings {
            auto_register: false,
            ..settings(&url)
        })
        .unwrap();
        let writer = Codec::with_registry(avro(), Some(writer));
        writer.prepare(&[(Family::Sensors, "t.evolved")]).await.unwrap();
        let mut reading = sensor();
        reading["pipelineId"] = json!("p");
        let bytes = writer.encode(Family::Sensors, "t.evolved", &reading).unwrap();
        fake.outage.store(2, Ordering::SeqCst);
        for _ in 0..2 {
            let e = read(&codec, framed(8, &bytes[5..])).await.unwrap_err();
            assert!(!e.blames_record(), "{e}");
            assert!(e.to_string().contains("503"), "{e}");
        }
        let (pipeline, input) = read(&codec, framed(8, &bytes[5..])).await.unwrap();
        assert_eq!(pipeline, "p");
        assert!(matches!(input, Input::SensorReceived(_)), "{input:?}");

        // A URL that is no registry answers a bare 404: not a verdict on the id either.
        let wrong = Codec::new(Formats::default(), Some(&format!("{url}/not-here"))).unwrap();
        let e = read(&wrong, framed(99, &[0; 8])).await.unwrap_err();
        assert!(!e.blames_record() && e.to_string().contains("404"), "{e}");
    }

    #[tokio::test]
    async fn registration_waits_out_an_outage_for_a_while_then_says_why() {
        let fake = Fake::default();
        fake.outage.store(2, Ordering::SeqCst);
        let url = serve(&fake).await;
        let codec = Codec::new(avro(), Some(&url)).unwrap();
        codec.prepare(&[(Family::Events, "t.events")]).await.unwrap();
        assert_eq!(fake.requests.lock().unwrap().len(), 3, "two 503s, then registered");

        fake.outage.store(usize::MAX, Ordering::SeqCst);
        let registry = Registry::new(&url).unwrap().with_patience(Duration::from_millis(700));
        let started = Instant::now();
        let e = registry
            .prepare("t.jobs-value", Family::Jobs.schema_text(), Family::Jobs.schema())
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
        let e = e.to_string();
        assert!(
            e.contains("gave up") && e.contains("\"t.jobs-value\"") && e.contains("503") && e.contains("forwarding"),
            "{e}"
        );
    }
}

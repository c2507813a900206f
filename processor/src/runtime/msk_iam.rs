//! AWS MSK IAM authentication (`sasl.mechanism=AWS_MSK_IAM`): the token every Kafka client
//! presents over SASL/OAUTHBEARER, made as AWS's own signers (`aws-msk-iam-sasl-signer-*`)
//! make it: the URL `https://kafka.REGION.amazonaws.com/?Action=kafka-cluster:Connect`,
//! SigV4-presigned for the service `kafka-cluster` for 15 minutes (the hash of an empty
//! payload, only `host` signed), with a `User-Agent` parameter added after signing, then
//! base64url-encoded without padding.
//!
//! The credentials are the AWS jobs' ([`credentials`]: the SDKs' default provider chain,
//! or a role assumed from it), kept fresh by a task of their own: librdkafka asks for a
//! token from a thread that must not wait on the network, so a token is signed from the
//! credentials already held, which is pure and fast.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings};
use aws_sigv4::sign::v4;
use base64::Engine;

use crate::runtime::jobs::aws::credentials::credentials;

/// How long a token is good for: what AWS's signers use, and the most MSK accepts.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(900);
/// How often the held credentials are checked at most: they are fetched again only in the
/// last five minutes before they expire ([`credentials`] keeps them), so this is cheap.
/// Credentials that expire sooner are checked at half their remaining life, at least
/// every [`CHECK_AT_LEAST`].
const CHECK_EVERY: Duration = Duration::from_secs(60);
const CHECK_AT_LEAST: Duration = Duration::from_secs(1);
const SIGNING_NAME: &str = "kafka-cluster";

/// The machine's time, not the processor's (`--clock-offset`): AWS judges a signature's
/// time, and credentials' expiry, by its own.
fn machine_now() -> SystemTime {
    SystemTime::now()
}

/// A signed token, and when it stops being good (librdkafka asks again before then).
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub value: String,
    pub expires: SystemTime,
}

/// Makes the tokens of one connection: its region, the role it assumes if any, and the
/// credentials last fetched.
#[derive(Debug)]
pub struct MskIam {
    pub region: String,
    pub role: Option<String>,
    held: RwLock<Option<Credentials>>,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("AWS MSK IAM: no AWS credentials fetched yet")]
    NoCredentials,
    #[error("AWS MSK IAM: the AWS credentials held expired and none could be fetched since")]
    Expired,
    #[error("AWS MSK IAM: cannot sign the token: {0}")]
    Unsignable(String),
}

impl MskIam {
    pub fn new(region: String, role: Option<String>) -> MskIam {
        MskIam {
            region,
            role,
            held: RwLock::new(None),
        }
    }

    /// Fetches the credentials once (an error names what the chain found missing), then
    /// keeps them fresh from a task that ends when the connection is gone. A later failed
    /// fetch is logged and the held credentials are signed with until they expire.
    pub async fn start(self: &Arc<Self>) -> Result<(), String> {
        self.fetch().await?;
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let wait = match weak.upgrade() {
                    Some(this) => this.next_check(machine_now()),
                    None => return,
                };
                tokio::time::sleep(wait).await;
                let Some(this) = weak.upgrade() else { return };
                if let Err(e) = this.fetch().await {
                    tracing::warn!(error = %e, "AWS MSK IAM: could not refresh the AWS credentials; signing with those held until they expire");
                }
            }
        });
        Ok(())
    }

    async fn fetch(&self) -> Result<(), String> {
        let fetched = credentials(self.role.as_deref(), &self.region)
            .await
            .map_err(|e| format!("AWS MSK IAM: {e}"))?;
        self.hold(fetched);
        Ok(())
    }

    /// How long after `now` the held credentials are to be checked again: every
    /// [`CHECK_EVERY`], or at half their remaining life if that is sooner, so that
    /// short-lived credentials are replaced before they expire.
    fn next_check(&self, now: SystemTime) -> Duration {
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        let remaining = held
            .as_ref()
            .and_then(Credentials::expiry)
            .map(|at| at.duration_since(now).unwrap_or_default());
        match remaining {
            Some(left) => (left / 2).clamp(CHECK_AT_LEAST, CHECK_EVERY),
            None => CHECK_EVERY,
        }
    }

    /// Holds `credentials` to sign with (what a fetch does; tests give their own).
    pub fn hold(&self, credentials: Credentials) {
        *self.held.write().unwrap_or_else(|e| e.into_inner()) = Some(credentials);
    }

    /// A token signed now ([`machine_now`]).
    pub fn token_now(&self) -> Result<Token, TokenError> {
        self.token(machine_now())
    }

    /// A token signed at `now` with the held credentials.
    pub fn token(&self, now: SystemTime) -> Result<Token, TokenError> {
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        let credentials = held.as_ref().ok_or(TokenError::NoCredentials)?;
        sign_token(credentials, &self.region, now)
    }
}

/// The token for `credentials` in `region` at `now`. It expires with the signature, or with
/// the credentials if they expire first (a session token past its expiry signs nothing).
pub fn sign_token(credentials: &Credentials, region: &str, now: SystemTime) -> Result<Token, TokenError> {
    if credentials.expiry().is_some_and(|at| at <= now) {
        return Err(TokenError::Expired);
    }
    let unsignable = |e: &dyn std::fmt::Display| TokenError::Unsignable(e.to_string());
    let url = format!("https://kafka.{region}.amazonaws.com/?Action=kafka-cluster%3AConnect");
    let identity = credentials.clone().into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(TOKEN_LIFETIME);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SIGNING_NAME)
        .time(now)
        .settings(settings)
        .build()
        .map_err(|e| unsignable(&e))?
        .into();
    let request =
        SignableRequest::new("GET", &url, std::iter::empty(), SignableBody::Bytes(&[])).map_err(|e| unsignable(&e))?;
    let (instructions, _) = sign(request, &params).map_err(|e| unsignable(&e))?.into_parts();
    let mut signed = url::Url::parse(&url).map_err(|e| unsignable(&e))?;
    {
        let mut query = signed.query_pairs_mut();
        for (name, value) in instructions.params() {
            query.append_pair(name, value);
        }
        query.append_pair("User-Agent", concat!("sluice/", env!("CARGO_PKG_VERSION")));
    }
    let signature_ends = now + TOKEN_LIFETIME;
    let expires = credentials.expiry().map_or(signature_ends, |at| at.min(signature_ends));
    Ok(Token {
        value: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signed.as_str()),
        expires,
    })
}

/// The region of MSK brokers from their host names (`b-1.c.x.c2.kafka.REGION.amazonaws.com`,
/// `boot-x.c1.kafka-serverless.REGION.amazonaws.com`), when every one names the same.
pub fn region_of(brokers: &str) -> Option<String> {
    let mut found: Option<String> = None;
    for broker in brokers.split(',') {
        let host = broker.trim().rsplit_once(':').map_or(broker.trim(), |(host, _)| host);
        let labels: Vec<&str> = host.split('.').collect();
        let region = labels
            .windows(3)
            .find(|w| matches!(w[0], "kafka" | "kafka-serverless") && w[2] == "amazonaws")
            .map(|w| w[1].to_string())?;
        match &found {
            Some(seen) if *seen != region => return None,
            _ => found = Some(region),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn decoded(token: &Token) -> url::Url {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&token.value)
            .expect("base64url without padding");
        url::Url::parse(&String::from_utf8(bytes).unwrap()).unwrap()
    }

    fn param(url: &url::Url, name: &str) -> Option<String> {
        url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
    }

    #[test]
    fn a_token_is_the_presigned_connect_url_as_awss_signers_make_it() {
        // 2026-11-27T10:00:00Z
        let now = at(1_795_773_600);
        let credentials = Credentials::new("AKIDEXAMPLE", "secret", Some("session/token+1=".into()), None, "test");
        let token = sign_token(&credentials, "eu-west-1", now).unwrap();
        assert!(
            !token.value.contains(['=', '+', '/']),
            "base64url, unpadded: {}",
            token.value
        );
        let url = decoded(&token);
        assert_eq!(url.host_str(), Some("kafka.eu-west-1.amazonaws.com"));
        assert_eq!(url.path(), "/");
        assert_eq!(param(&url, "Action").as_deref(), Some("kafka-cluster:Connect"));
        assert_eq!(param(&url, "X-Amz-Algorithm").as_deref(), Some("AWS4-HMAC-SHA256"));
        assert_eq!(
            param(&url, "X-Amz-Credential").as_deref(),
            Some("AKIDEXAMPLE/20261127/eu-west-1/kafka-cluster/aws4_request")
        );
        assert_eq!(param(&url, "X-Amz-Date").as_deref(), Some("20261127T100000Z"));
        assert_eq!(param(&url, "X-Amz-Expires").as_deref(), Some("900"));
        assert_eq!(param(&url, "X-Amz-SignedHeaders").as_deref(), Some("host"));
        assert_eq!(param(&url, "X-Amz-Security-Token").as_deref(), Some("session/token+1="));
        assert!(param(&url, "User-Agent").is_some_and(|ua| ua.starts_with("sluice/")));
        let signature = param(&url, "X-Amz-Signature").unwrap();
        assert_eq!(signature.len(), 64, "{signature}");
        assert_eq!(token.expires, now + TOKEN_LIFETIME);
        // Signed again at the same time: the same token; a second later: another.
        assert_eq!(sign_token(&credentials, "eu-west-1", now).unwrap(), token);
        let later = sign_token(&credentials, "eu-west-1", now + Duration::from_secs(1)).unwrap();
        assert_ne!(param(&decoded(&later), "X-Amz-Signature").unwrap(), signature);
        assert!(!token.value.contains("secret") && !decoded(&token).as_str().contains("secret"));
    }

    #[test]
    fn a_token_expires_with_the_credentials_when_they_expire_first() {
        let now = at(1_795_773_600);
        let soon = now + Duration::from_secs(400);
        let credentials = Credentials::new("AKID", "s", Some("t".into()), Some(soon), "test");
        assert_eq!(sign_token(&credentials, "us-east-1", now).unwrap().expires, soon);
        let long = Credentials::new("AKID", "s", None, Some(now + Duration::from_secs(3600)), "test");
        let token = sign_token(&long, "us-east-1", now).unwrap();
        assert_eq!(token.expires, now + TOKEN_LIFETIME);
        assert_eq!(param(&decoded(&token), "X-Amz-Security-Token"), None);
    }

    #[test]
    fn short_lived_credentials_are_checked_before_they_expire_and_expired_ones_sign_nothing() {
        let now = at(1_795_773_600);
        let msk = MskIam::new("us-east-1".into(), None);
        assert_eq!(msk.next_check(now), CHECK_EVERY, "nothing held yet");
        let expiring = |secs| {
            Credentials::new(
                "AKID",
                "s",
                Some("t".into()),
                Some(now + Duration::from_secs(secs)),
                "test",
            )
        };
        msk.hold(expiring(3600));
        assert_eq!(msk.next_check(now), CHECK_EVERY);
        msk.hold(expiring(40));
        assert_eq!(
            msk.next_check(now),
            Duration::from_secs(20),
            "half their remaining life"
        );
        msk.hold(expiring(1));
        assert_eq!(msk.next_check(now), CHECK_AT_LEAST);
        msk.hold(Credentials::new("AKID", "s", None, None, "test"));
        assert_eq!(msk.next_check(now), CHECK_EVERY, "permanent keys");
        // A token is never signed with expired credentials (librdkafka would refuse it).
        msk.hold(expiring(1));
        assert!(msk.token(now).is_ok());
        assert!(matches!(
            msk.token(now + Duration::from_secs(1)),
            Err(TokenError::Expired)
        ));
    }

    #[test]
    fn no_token_before_credentials_are_held() {
        let msk = MskIam::new("us-east-1".into(), None);
        assert!(matches!(msk.token(at(0)), Err(TokenError::NoCredentials)));
        msk.hold(Credentials::new("AKID", "s", None, None, "test"));
        assert!(msk.token(at(1_795_773_600)).is_ok());
    }

    #[test]
    fn the_region_is_read_from_msk_broker_names() {
        assert_eq!(
            region_of("b-1.orders.abc123.c2.kafka.eu-central-1.amazonaws.com:9098,b-2.orders.abc123.c2.kafka.eu-central-1.amazonaws.com:9098")
                .as_deref(),
            Some("eu-central-1")
        );
        assert_eq!(
            region_of("boot-x7.c1.kafka-serverless.us-west-2.amazonaws.com:9098").as_deref(),
            Some("us-west-2")
        );
        assert_eq!(
            region_of("b-1.x.kafka.cn-north-1.amazonaws.com.cn:9098").as_deref(),
            Some("cn-north-1")
        );
        assert_eq!(region_of("localhost:9092"), None);
        assert_eq!(
            region_of("b-1.x.kafka.us-east-1.amazonaws.com:9098,localhost:9092"),
            None
        );
        assert_eq!(
            region_of("b-1.x.kafka.us-east-1.amazonaws.com:9098,b-1.y.kafka.us-west-2.amazonaws.com:9098"),
            None,
            "brokers in two regions name none"
        );
    }
}

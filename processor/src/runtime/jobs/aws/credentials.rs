//! Where the AWS jobs' credentials come from: the default provider chain the AWS SDKs use
//! (`aws-config`), in its order: the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), the shared config and credentials files
//! (profiles, SSO, `credential_process`, profiles that assume a role), web identity (EKS
//! IRSA: `AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN`), EKS Pod Identity and ECS
//! container credentials, then EC2 instance metadata (IMDSv2).
//!
//! Temporary credentials are kept until five minutes before they expire, then fetched
//! again, so a long-lived processor never signs with expired ones. A job may name a role of
//! its own (`job.config.roleArn`): it is assumed with STS from the chain's credentials, per
//! role and region, and kept the same way.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{future, ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use tokio::sync::{Mutex, OnceCell};

use crate::runtime::jobs::CallError;

/// How long before they expire credentials are fetched again: the AWS SDKs' own margin.
const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// Credentials from a provider, kept until [`REFRESH_BEFORE`] their expiry. One fetch at a
/// time: callers that find them stale together wait for the same fetch.
#[derive(Debug)]
pub(crate) struct Kept {
    provider: SharedCredentialsProvider,
    current: Mutex<Option<Credentials>>,
}

impl Kept {
    pub fn new(provider: impl ProvideCredentials + 'static) -> Kept {
        Kept {
            provider: SharedCredentialsProvider::new(provider),
            current: Mutex::new(None),
        }
    }

    /// The kept credentials, or new ones if they expire within the margin at `now`.
    pub async fn get(&self, now: SystemTime) -> Result<Credentials, CredentialsError> {
        let mut current = self.current.lock().await;
        if let Some(kept) = current.as_ref().filter(|c| fresh(c, now)) {
            return Ok(kept.clone());
        }
        let fetched = self.provider.provide_credentials().await?;
        *current = Some(fetched.clone());
        Ok(fetched)
    }
}

/// The machine's time, not the processor's (`--clock-offset`): AWS judges an expiry by its
/// own clock, as it does a signature's time.
fn machine_now() -> SystemTime {
    SystemTime::now()
}

/// Whether `credentials` can still be used at `now` (permanent ones always can).
fn fresh(credentials: &Credentials, now: SystemTime) -> bool {
    credentials.expiry().is_none_or(|at| at > now + REFRESH_BEFORE)
}

/// A role's STS client asks its base credentials of this on every AssumeRole: kept, they
/// are fetched only as they expire.
impl ProvideCredentials for Kept {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.get(machine_now()))
    }
}

/// The process's chain, made on first use: the environment is read then.
struct Chain {
    config: SdkConfig,
    base: Arc<Kept>,
    /// Per (role ARN, region).
    roles: Mutex<HashMap<(String, String), Arc<Kept>>>,
}

static CHAIN: OnceCell<Chain> = OnceCell::const_new();

async fn chain() -> &'static Chain {
    CHAIN
        .get_or_init(|| async {
            // rustls with ring, as every other client of Sluice's (no second TLS stack).
            let http = aws_smithy_http_client::Builder::new()
                .tls_provider(Provider::Rustls(CryptoMode::Ring))
                .build_https();
            let config = aws_config::defaults(BehaviorVersion::latest())
                .http_client(http)
                .load()
                .await;
            let base = match config.credentials_provider() {
                Some(provider) => Kept::new(provider),
                None => Kept::new(SharedCredentialsProvider::new(NoChain)),
            };
            Chain {
                config,
                base: Arc::new(base),
                roles: Mutex::new(HashMap::new()),
            }
        })
        .await
}

/// Stands in for a chain `aws-config` did not make (it always makes one): says so.
#[derive(Debug)]
struct NoChain;

impl ProvideCredentials for NoChain {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::ready(Err(CredentialsError::not_loaded(
            "no credentials provider was configured",
        )))
    }
}

impl Chain {
    async fn role(&'static self, arn: &str, region: &str) -> Arc<Kept> {
        let mut roles = self.roles.lock().await;
        let key = (arn.to_string(), region.to_string());
        if let Some(kept) = roles.get(&key) {
            return kept.clone();
        }
        let base: Arc<dyn ProvideCredentials> = self.base.clone();
        let provider = aws_config::sts::AssumeRoleProvider::builder(arn)
            .configure(&self.config)
            .region(Region::new(region.to_string()))
            .session_name("sluice")
            .build_from_provider(base)
            .await;
        let kept = Arc::new(Kept::new(provider));
        roles.insert(key, kept.clone());
        kept
    }
}

/// The credentials to sign a job's calls to `region` with: the chain's, or those of `role`
/// assumed from them.
pub(crate) async fn credentials(role: Option<&str>, region: &str) -> Result<Credentials, CallError> {
    let chain = chain().await;
    let now = machine_now();
    let found = match role {
        None => chain.base.get(now).await,
        Some(arn) => chain.role(arn, region).await.get(now).await,
    };
    found.map_err(|e| refusal(e, role))
}

/// A provider's failure as a call's: none found or misconfigured is the deployment's to fix
/// (permanent); a provider that failed or timed out (the metadata endpoint, STS) may answer
/// on a later try. Provider errors name no secret.
fn refusal(e: CredentialsError, role: Option<&str>) -> CallError {
    let role = role.map(|arn| format!(" (to assume {arn})")).unwrap_or_default();
    let (none, misconfigured) = (
        matches!(e, CredentialsError::CredentialsNotLoaded(_)),
        matches!(e, CredentialsError::InvalidConfiguration(_)),
    );
    // With its causes, as `a: b: c`.
    let cause = format!("{:#}", anyhow::Error::new(e));
    match (none, misconfigured) {
        (true, _) => CallError::Permanent(format!(
            "no AWS credentials{role}: the default chain found none (the environment's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
             the shared config and credentials files, web identity (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN), \
             EKS Pod Identity or ECS container credentials, EC2 instance metadata): {cause}"
        )),
        (_, true) => CallError::Permanent(format!("the AWS credentials are misconfigured{role}: {cause}")),
        _ => CallError::Infra(format!("could not get AWS credentials{role}: {cause}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Hands out credentials numbered by fetch, each expiring `lifetime` after `issued`.
    #[derive(Debug)]
    struct Issuer {
        fetches: AtomicU32,
        issued: SystemTime,
        lifetime: Option<Duration>,
    }

    impl ProvideCredentials for Issuer {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let n = self.fetches.fetch_add(1, Ordering::SeqCst);
            let expiry = self.lifetime.map(|l| self.issued + l * (n + 1));
            future::ProvideCredentials::ready(Ok(Credentials::new(format!("AKID{n}"), "s", None, expiry, "test")))
        }
    }

    fn issuer(lifetime: Option<Duration>) -> (Arc<Issuer>, SystemTime) {
        let issued = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let issuer = Arc::new(Issuer {
            fetches: AtomicU32::new(0),
            issued,
            lifetime,
        });
        (issuer, issued)
    }

    #[tokio::test]
    async fn temporary_credentials_are_kept_until_five_minutes_before_they_expire() {
        let hour = Duration::from_secs(3600);
        let (issuer, t0) = issuer(Some(hour));
        let kept = Kept::new(issuer.clone() as Arc<dyn ProvideCredentials>);
        let key = |c: Credentials| c.access_key_id().to_string();
        assert_eq!(key(kept.get(t0).await.unwrap()), "AKID0");
        assert_eq!(key(kept.get(t0 + Duration::from_secs(54 * 60)).await.unwrap()), "AKID0");
        assert_eq!(issuer.fetches.load(Ordering::SeqCst), 1, "kept, not fetched again");
        // Inside the margin: fetched again before they expire.
        assert_eq!(
            key(kept.get(t0 + Duration::from_secs(55 * 60 + 1)).await.unwrap()),
            "AKID1"
        );
        assert_eq!(
            key(kept.get(t0 + hour).await.unwrap()),
            "AKID1",
            "the new ones last to 2 h"
        );
        assert_eq!(issuer.fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn credentials_without_an_expiry_are_fetched_once() {
        let (issuer, t0) = issuer(None);
        let kept = Kept::new(issuer.clone() as Arc<dyn ProvideCredentials>);
        for days in [0, 1, 400] {
            kept.get(t0 + Duration::from_secs(days * 86_400)).await.unwrap();
        }
        assert_eq!(issuer.fetches.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn no_credentials_is_the_deployments_to_fix_and_a_failing_provider_may_recover() {
        let none = refusal(CredentialsError::not_loaded("nothing"), None);
        assert!(
            matches!(&none, CallError::Permanent(m) if m.contains("AWS_WEB_IDENTITY_TOKEN_FILE") && m.contains("instance metadata")),
            "{none:?}"
        );
        let role = refusal(
            CredentialsError::provider_error("AccessDenied"),
            Some("arn:aws:iam::1:role/r"),
        );
        assert!(
            matches!(&role, CallError::Infra(m) if m.contains("arn:aws:iam::1:role/r") && m.contains("AccessDenied")),
            "{role:?}"
        );
        let bad = refusal(CredentialsError::invalid_configuration("bad profile"), None);
        assert!(matches!(bad, CallError::Permanent(_)));
    }
}

//! AWS job types: `glue`, `emr`, `emr-serverless`, `step-function` and `lambda`, as
//! SigV4-signed calls to each service's documented HTTP API through the guarded client. No
//! AWS SDK: the `aws-sigv4` crate signs, and each module speaks its service's protocol
//! (JSON 1.0 / 1.1 with `X-Amz-Target`, or REST-JSON).
//!
//! Settings every AWS job takes (`job.config`):
//! - `region`: else `AWS_REGION`, else `AWS_DEFAULT_REGION` from the processor's
//!   environment; one of them is required.
//! - `endpointUrl`: else `AWS_ENDPOINT_URL_<SERVICE>` (`GLUE`, `EMR`, `EMR_SERVERLESS`,
//!   `SFN`, `LAMBDA`), else `AWS_ENDPOINT_URL`, else the service's public endpoint
//!   `https://{prefix}.{region}.amazonaws.com` (`.amazonaws.com.cn` in China regions). A
//!   loopback or link-local endpoint (moto, LocalStack) must be allowed with `--allow-target`.
//! - `timeout`: the per-request HTTP timeout in seconds, as for every job type.
//!
//! - `roleArn`: a role to assume (with STS) for this job's calls, from the processor's own
//!   credentials.
//!
//! Credentials come from the AWS SDKs' default provider chain ([`credentials`]: the
//! environment, profiles and SSO, web identity / IRSA, EKS Pod Identity, ECS and instance
//! metadata), refreshed before they expire. Credentials never appear in a handle or a
//! message: answers are scrubbed of them before they are quoted.
//!
//! Errors: transport failures, 5xx, 408, 429 and the throttling / capacity error codes in
//! [`RETRYABLE_CODES`] are [`CallError::Infra`] (retried with backoff); every other error
//! answer (validation, not found, access denied) is [`CallError::Permanent`]. Messages name
//! the service, the operation, the HTTP status and the AWS error type and message.

pub(crate) mod credentials;
mod emr;
mod emr_serverless;
mod glue;
mod lambda;
mod step_function;

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value};

use super::{guard, join_url, tail, usable, Call, CallError, Outcome, MESSAGE_LIMIT};
use crate::core::config::{AwsEndpoint, JobConfig, JobKind, JobSettings};

/// Starts the run of an AWS job, whichever service it names.
pub async fn trigger(call: &Call<'_>) -> Result<Outcome, CallError> {
    match call.config.settings() {
        JobSettings::Glue(job) => glue::trigger(call, job).await,
        JobSettings::Emr(job) => emr::trigger(call, job).await,
        JobSettings::EmrServerless(job) => emr_serverless::trigger(call, job).await,
        JobSettings::StepFunction(job) => step_function::trigger(call, job).await,
        JobSettings::Lambda(job) => lambda::trigger(call, job).await,
        other => Err(not_aws(other.kind())),
    }
}

/// One status check of a running AWS job; `handle` is what [`trigger`] answered.
pub async fn status(call: &Call<'_>, handle: &Value) -> Result<Outcome, CallError> {
    match call.config.settings() {
        JobSettings::Glue(job) => glue::status(call, job, handle).await,
        JobSettings::Emr(job) => emr::status(call, job, handle).await,
        JobSettings::EmrServerless(job) => emr_serverless::status(call, job, handle).await,
        JobSettings::StepFunction(job) => step_function::status(call, job, handle).await,
        JobSettings::Lambda(_) => Err(CallError::Permanent("lambda runs have no status check".into())),
        other => Err(not_aws(other.kind())),
    }
}

/// The AWS resource a job's calls go to, as `kind:region:resource` (e.g.
/// `glue:us-east-1:nightly-load`), for per-target concurrency bounds and circuit breaking.
pub fn target(config: &JobConfig) -> String {
    let resource = match config.settings() {
        JobSettings::Glue(job) => job.job_name.as_str(),
        JobSettings::Emr(job) => job.cluster_id.as_str(),
        JobSettings::EmrServerless(job) => job.application_id.as_str(),
        JobSettings::StepFunction(job) => job.state_machine_arn.as_str(),
        JobSettings::Lambda(job) => job.function_name.as_str(),
        _ => "",
    };
    let region = config
        .settings()
        .aws()
        .and_then(|aws| region(aws, &process_env).ok())
        .unwrap_or_default();
    format!("{}:{region}:{resource}", config.kind().name())
}

fn not_aws(kind: JobKind) -> CallError {
    CallError::Permanent(format!("{} is not an AWS job type", kind.name()))
}

/// How to reach and sign for one AWS service.
#[derive(Debug)]
pub(crate) struct Service {
    /// For messages: "Glue", "Step Functions".
    name: &'static str,
    /// The public endpoint's host prefix: `{prefix}.{region}.amazonaws.com`.
    prefix: &'static str,
    /// The service name in the SigV4 credential scope.
    signing_name: &'static str,
    /// The service's `AWS_ENDPOINT_URL_<ID>` variable suffix, as the AWS SDKs read it.
    env_id: &'static str,
}

/// Error codes worth retrying whatever their HTTP status: throttling, concurrency and
/// capacity limits that clear by themselves, and server-side failures.
pub const RETRYABLE_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    // Glue: the job's MaxConcurrentRuns, or the account's concurrent job-run quota.
    "ConcurrentRunsExceededException",
    "ResourceNumberLimitExceededException",
    // EMR Serverless: the application's or account's capacity quota.
    "ServiceQuotaExceededException",
    // Step Functions: too many open executions.
    "ExecutionLimitExceeded",
    // Lambda: the function is still being created or updated.
    "ResourceNotReadyException",
    "ResourceConflictException",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "ServiceException",
    "InternalServerError",
    "InternalServerException",
    "InternalServiceException",
    "InternalFailure",
    "InternalError",
    "RequestTimeout",
    "RequestTimeoutException",
];

/// An error answer from an AWS service: its HTTP status, error type and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AwsError {
    pub status: StatusCode,
    pub code: Option<String>,
    pub message: Option<String>,
    /// The answer's body, quoted when it carries neither a code nor a message.
    pub body: String,
}

impl AwsError {
    /// Reads an error answer: the type from the `x-amzn-ErrorType` header (REST protocols)
    /// or the body's `__type` / `code` (JSON protocols), without the namespace
    /// (`com.amazonaws.glue#`) or the trailing `:http://internal...` AWS adds; the message
    /// from `message` / `Message` / `errorMessage`.
    pub fn parse(status: StatusCode, headers: &HeaderMap, body: &str) -> Self {
        let json: Option<Map<String, Value>> = serde_json::from_str(body).ok();
        let field = |names: &[&str]| {
            json.as_ref().and_then(|map| {
                names
                    .iter()
                    .find_map(|name| map.get(*name).and_then(Value::as_str).map(str::to_string))
            })
        };
        let code = headers
            .get("x-amzn-errortype")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| field(&["__type", "code", "Code"]))
            .map(|code| clean_code(&code))
            .filter(|code| !code.is_empty());
        let message = field(&["message", "Message", "errorMessage"]).filter(|m| !m.trim().is_empty());
        AwsError {
            status,
            code,
            message,
            body: body.to_string(),
        }
    }

    pub fn is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }

    pub fn retryable(&self) -> bool {
        let status = self.status.as_u16();
        self.status.is_server_error()
            || status == 408
            || status == 429
            || self.code.as_deref().is_some_and(|c| RETRYABLE_CODES.contains(&c))
    }

    /// `"{what} answered 400 Bad Request: EntityNotFoundException: Job x not found."`
    pub fn describe(&self, what: &str) -> String {
        let mut message = format!("{what} answered {}", self.status);
        match (&self.code, &self.message) {
            (Some(code), Some(text)) => message.push_str(&format!(": {code}: {}", head(text))),
            (Some(code), None) => message.push_str(&format!(": {code}")),
            (None, Some(text)) => message.push_str(&format!(": {}", head(text))),
            (None, None) => {
                let body = tail(&self.body);
                if !body.is_empty() {
                    message.push_str(": ");
                    message.push_str(&body);
                }
            }
        }
        message
    }

    pub fn into_call_error(self, what: &str) -> CallError {
        let message = self.describe(what);
        if self.retryable() {
            CallError::Infra(message)
        } else {
            CallError::Permanent(message)
        }
    }
}

fn clean_code(code: &str) -> String {
    let code = code.split(':').next().unwrap_or("");
    let code = code.rsplit('#').next().unwrap_or("");
    code.trim().to_string()
}

/// The first [`MESSAGE_LIMIT`] bytes of a text, cut on a character boundary: AWS messages
/// say what matters first.
fn head(text: &str) -> String {
    let text = text.trim();
    if text.len() <= MESSAGE_LIMIT {
        return text.to_string();
    }
    let end = (0..=MESSAGE_LIMIT)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{}...", &text[..end])
}

/// An answer from AWS, whatever its status.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    /// The error the answer carries, `None` for a 2xx.
    pub fn error(&self) -> Option<AwsError> {
        (!self.status.is_success()).then(|| AwsError::parse(self.status, &self.headers, &self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The credentials requests are signed with.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(redacted)")
    }
}

impl From<&Credentials> for Keys {
    fn from(c: &Credentials) -> Keys {
        Keys {
            access_key_id: c.access_key_id().to_string(),
            secret_access_key: c.secret_access_key().to_string(),
            session_token: c.session_token().map(str::to_string),
        }
    }
}

impl Keys {
    /// Replaces every credential in `text` (an answer about to be quoted) by `[redacted]`.
    fn redact(&self, text: &str) -> String {
        let mut text = text.to_string();
        let secrets = [
            Some(&self.secret_access_key),
            self.session_token.as_ref(),
            Some(&self.access_key_id),
        ];
        for secret in secrets.into_iter().flatten() {
            if !secret.is_empty() {
                text = text.replace(secret.as_str(), "[redacted]");
            }
        }
        text
    }
}

/// A variable from the processor's environment; empty counts as unset.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

type Env<'e> = &'e dyn Fn(&str) -> Option<String>;

/// `job.config.region`, else `AWS_REGION`, else `AWS_DEFAULT_REGION`.
fn region(aws: &AwsEndpoint, env: Env<'_>) -> Result<String, CallError> {
    let region = match usable(&aws.region)? {
        Some(region) => region.trim().to_string(),
        None => env("AWS_REGION")
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .map(|r| r.trim().to_string())
            .ok_or_else(|| {
                CallError::Permanent(
                    "no AWS region: set job.config.region, or AWS_REGION in the processor's environment".into(),
                )
            })?,
    };
    let valid = !region.is_empty()
        && region.len() <= 50
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        return Err(CallError::Permanent(format!("{region:?} is not an AWS region")));
    }
    Ok(region)
}

/// Where a service's requests go: `job.config.endpointUrl`, `AWS_ENDPOINT_URL_<SERVICE>`,
/// `AWS_ENDPOINT_URL`, else the public endpoint.
fn endpoint(service: &Service, region: &str, aws: &AwsEndpoint, env: Env<'_>) -> Result<String, CallError> {
    if let Some(url) = usable(&aws.endpoint_url)? {
        return Ok(url.trim().to_string());
    }
    if let Some(url) = env(&format!("AWS_ENDPOINT_URL_{}", service.env_id)).or_else(|| env("AWS_ENDPOINT_URL")) {
        return Ok(url.trim().to_string());
    }
    Ok(public_endpoint(service, region))
}

fn public_endpoint(service: &Service, region: &str) -> String {
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://{}.{region}.{suffix}", service.prefix)
}

/// The SigV4 headers (`authorization`, `x-amz-date`, `x-amz-security-token`) for a request
/// whose other signed headers are `headers`. The host is signed from the URL, as the
/// client sends it.
#[allow(clippy::too_many_arguments)]
fn signature(
    keys: &Keys,
    region: &str,
    signing_name: &str,
    method: &str,
    url: &str,
    headers: &[(&str, String)],
    body: &[u8],
    time: SystemTime,
) -> Result<Vec<(&'static str, String)>, CallError> {
    let unsignable = |e: &dyn std::fmt::Display| CallError::Permanent(format!("cannot sign the AWS request: {e}"));
    let identity = Credentials::new(
        keys.access_key_id.clone(),
        keys.secret_access_key.clone(),
        keys.session_token.clone(),
        None,
        "environment",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(signing_name)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| unsignable(&e))?
        .into();
    let request = SignableRequest::new(
        method,
        url,
        headers.iter().map(|(name, value)| (*name, value.as_str())),
        SignableBody::Bytes(body),
    )
    .map_err(|e| unsignable(&e))?;
    let (instructions, _) = sign(request, &params).map_err(|e| unsignable(&e))?.into_parts();
    let (signed, _) = instructions.into_parts();
    Ok(signed.into_iter().map(|h| (h.name(), h.value().to_string())).collect())
}

/// Percent-encodes one path segment (a function name, an application id) as the AWS SDKs
/// do: everything but RFC 3986's unreserved characters, so `:` in an ARN becomes `%3A`.
fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Signed calls to one service for one job.
pub(crate) struct Api<'c, 'a> {
    call: &'c Call<'a>,
    service: &'static Service,
    region: String,
    endpoint: String,
    keys: Keys,
}

impl<'c, 'a> Api<'c, 'a> {
    pub async fn new(call: &'c Call<'a>, aws: &AwsEndpoint, service: &'static Service) -> Result<Self, CallError> {
        let region = region(aws, &process_env)?;
        let endpoint = endpoint(service, &region, aws, &process_env)?;
        let role = usable(&aws.role_arn)?.as_deref();
        let keys = Keys::from(&credentials::credentials(role, &region).await?);
        Ok(Api {
            call,
            service,
            region,
            endpoint,
            keys,
        })
    }

    /// `"Glue StartJobRun"`: how messages name a call.
    pub fn what(&self, operation: &str) -> String {
        format!("{} {operation}", self.service.name)
    }

    /// A text from an answer, scrubbed of the credentials, ready to be quoted.
    pub fn redact(&self, text: &str) -> String {
        self.keys.redact(text)
    }

    /// Sends one signed request. A transport failure is [`CallError::Infra`]; every HTTP
    /// answer comes back, error or not. `timeout` overrides the job's per-request timeout.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&'static str, String)],
        body: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Answer, CallError> {
        let url = join_url(&self.endpoint, path);
        let signed = signature(
            &self.keys,
            &self.region,
            self.service.signing_name,
            method.as_str(),
            &url,
            headers,
            &body,
            // AWS checks a signature's time against its own (within 5 minutes): this is the
            // protocol's time, the machine's, never the processor's (`--clock-offset`).
            SystemTime::now(),
        )?;
        let mut request = self.call.request(method, &url)?;
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        for (name, value) in headers.iter().map(|(n, v)| (*n, v.clone())).chain(signed) {
            request = request.header(name, value);
        }
        let name = self.service.name;
        let response = request.body(body).send().await.map_err(|e| {
            if let Some(refused) = guard::refusal(&e) {
                return CallError::Permanent(refused);
            }
            let what = if e.is_timeout() { "timed out" } else { "failed" };
            CallError::Infra(format!("the {name} request {what}: {}", e.without_url()))
        })?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .text()
            .await
            .map_err(|e| CallError::Infra(format!("reading {name}'s answer failed: {}", e.without_url())))?;
        Ok(Answer {
            status,
            headers,
            body: self.redact(&body),
        })
    }

    /// One operation of a JSON-protocol service (`X-Amz-Target: {target}`), any answer.
    pub async fn json_call(&self, version: &str, target: &str, input: &Value) -> Result<Answer, CallError> {
        let headers = [
            ("content-type", format!("application/x-amz-json-{version}")),
            ("x-amz-target", target.to_string()),
        ];
        self.send(Method::POST, "/", &headers, input.to_string().into_bytes(), None)
            .await
    }

    /// One operation of a JSON-protocol service, its 2xx answer parsed.
    pub async fn json(&self, version: &str, target: &str, input: &Value) -> Result<Value, CallError> {
        let operation = target.rsplit('.').next().unwrap_or(target);
        let answer = self.json_call(version, target, input).await?;
        self.parse(operation, answer)
    }

    /// One REST-JSON request, its 2xx answer parsed.
    pub async fn rest(
        &self,
        operation: &str,
        method: Method,
        path: &str,
        input: Option<&Value>,
    ) -> Result<Value, CallError> {
        let (headers, body) = match input {
            Some(input) => (
                vec![("content-type", "application/json".to_string())],
                input.to_string().into_bytes(),
            ),
            None => (vec![], vec![]),
        };
        let answer = self.send(method, path, &headers, body, None).await?;
        self.parse(operation, answer)
    }

    /// An error answer as a [`CallError`], a 2xx one as JSON (`null` when empty).
    pub fn parse(&self, operation: &str, answer: Answer) -> Result<Value, CallError> {
        if let Some(error) = answer.error() {
            return Err(error.into_call_error(&self.what(operation)));
        }
        if answer.body.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&answer.body).map_err(|e| {
            CallError::Infra(format!(
                "{} answered {} with a body that is not JSON: {e}",
                self.what(operation),
                answer.status
            ))
        })
    }

    /// A PERMANENT error for a 2xx answer that lacks what the operation promises.
    pub fn unexpected(&self, operation: &str, missing: &str, answer: &Value) -> CallError {
        CallError::Permanent(format!(
            "{} answered without {missing}: {}",
            self.what(operation),
            tail(&answer.to_string())
        ))
    }
}

/// A string field of a run's handle, or a PERMANENT error naming it.
fn handle_field<'h>(handle: &'h Value, field: &str) -> Result<&'h str, CallError> {
    handle.get(field).and_then(Value::as_str).ok_or_else(|| {
        CallError::Permanent(format!(
            "the run's handle has no {field}: {}",
            tail(&handle.to_string())
        ))
    })
}

/// `text` cut to `limit` bytes, or, when it had to change, cut shorter and followed by a
/// hash of the original, so distinct inputs stay distinct.
fn fit(text: &str, cleaned: String, limit: usize) -> String {
    use sha2::{Digest, Sha256};
    if cleaned == text && cleaned.len() <= limit {
        return cleaned;
    }
    let digest = Sha256::digest(text.as_bytes());
    let hash: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    let keep = limit.saturating_sub(hash.len() + 1);
    let mut end = keep.min(cleaned.len());
    while !cleaned.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{hash}", &cleaned[..end])
}

/// A [`Call`] for unit tests, and what it borrows.
#[cfg(test)]
pub(crate) mod testing {
    use serde_json::{json, Value};

    use crate::core::config::{JobConfig, JobKind, JobSettings};
    use crate::core::lifecycle::TriggerRequest;
    use crate::runtime::jobs::{Call, Client, Guard, Redactor};

    pub struct Parts {
        pub request: TriggerRequest,
        pub client: Client,
    }

    impl Parts {
        /// Run `pipe-1.daily.2026-11-22.1` of a `kind` job with `config`. The strings a job
        /// cannot do without are filled in where a test leaves them out to test others.
        pub fn new(kind: JobKind, mut config: Value) -> Self {
            for (key, value) in essentials(kind) {
                if config.get(key).is_none() {
                    config[key] = value;
                }
            }
            let config = JobConfig::from_json(kind, &config).unwrap();
            Parts {
                request: TriggerRequest::new("pipe-1", &crate::core::execution::id("daily", "2026-11-22"), 1, config),
                client: Client::new(Guard::default(), None).unwrap(),
            }
        }

        pub fn settings(&self) -> &JobSettings {
            self.request.config.settings()
        }

        pub fn call(&self) -> Call<'_> {
            Call {
                request: &self.request,
                config: &self.request.config,
                client: &self.client,
                producer: None,
                redactor: Redactor::none(),
            }
        }
    }

    /// A placeholder for each setting a `kind` job cannot do without.
    fn essentials(kind: JobKind) -> Vec<(&'static str, Value)> {
        match kind {
            JobKind::Http => vec![("url", json!("https://job.example/run"))],
            JobKind::Command => vec![("command", json!("true"))],
            JobKind::Airflow => vec![("url", json!("https://airflow.example")), ("dagId", json!("dag"))],
            JobKind::Databricks => vec![("host", json!("https://dbc.example")), ("jobId", json!(1))],
            JobKind::Glue => vec![("jobName", json!("job"))],
            JobKind::Emr => vec![("clusterId", json!("j-1")), ("step", json!({"args": ["true"]}))],
            JobKind::EmrServerless => vec![
                ("applicationId", json!("00f")),
                ("executionRoleArn", json!("arn:aws:iam::1:role/r")),
                ("jobDriver", json!({"sparkSubmit": {"entryPoint": "s3://b/x.py"}})),
            ],
            JobKind::StepFunction => vec![("stateMachineArn", json!("arn:aws:states:us-east-1:1:stateMachine:m"))],
            JobKind::Lambda => vec![("functionName", json!("f"))],
            JobKind::Kafka => vec![("topic", json!("jobs"))],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;
    use serde_json::json;
    use std::collections::HashMap;

    const GLUE: Service = Service {
        name: "Glue",
        prefix: "glue",
        signing_name: "glue",
        env_id: "GLUE",
    };

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| map.get(name).cloned()
    }

    /// The region and endpoint settings of a job with `config`.
    fn aws(config: Value) -> AwsEndpoint {
        testing::Parts::new(JobKind::Glue, config)
            .settings()
            .aws()
            .unwrap()
            .clone()
    }

    fn job(kind: JobKind, config: Value) -> JobConfig {
        testing::Parts::new(kind, config).request.config
    }

    #[test]
    fn json_protocol_errors_name_their_type_without_the_namespace() {
        let body = r#"{"__type":"com.amazonaws.glue#EntityNotFoundException","message":"Job nope not found."}"#;
        let e = AwsError::parse(StatusCode::BAD_REQUEST, &HeaderMap::new(), body);
        assert_eq!(e.code.as_deref(), Some("EntityNotFoundException"));
        assert!(!e.retryable());
        assert_eq!(
            e.clone().into_call_error("Glue StartJobRun"),
            CallError::Permanent(
                "Glue StartJobRun answered 400 Bad Request: EntityNotFoundException: Job nope not found.".into()
            )
        );
        // JSON 1.0 (Step Functions) spells it Message.
        let body = r#"{"__type":"StateMachineDoesNotExist","Message":"State Machine Does Not Exist"}"#;
        let e = AwsError::parse(StatusCode::BAD_REQUEST, &HeaderMap::new(), body);
        assert_eq!(
            e.describe("Step Functions StartExecution"),
            "Step Functions StartExecution answered 400 Bad Request: StateMachineDoesNotExist: State Machine Does Not Exist"
        );
    }

    #[test]
    fn rest_protocol_errors_take_their_type_from_the_header() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-amzn-ErrorType",
            HeaderValue::from_static("ResourceNotFoundException:http://internal.amazon.com/coral/com.amazon.emr/"),
        );
        let e = AwsError::parse(
            StatusCode::BAD_REQUEST,
            &headers,
            r#"{"message":"Application nope does not exist"}"#,
        );
        assert_eq!(e.code.as_deref(), Some("ResourceNotFoundException"));
        assert_eq!(e.message.as_deref(), Some("Application nope does not exist"));
        assert!(matches!(e.into_call_error("x"), CallError::Permanent(_)));
    }

    #[test]
    fn throttling_and_server_errors_are_retried() {
        // Captured answers: Glue throttling (400), Lambda's concurrency limit (429), a 503
        // without a body, Glue's per-job concurrency limit, an HTML 500 from a proxy.
        let cases: [(u16, &str); 6] = [
            (400, r#"{"__type":"ThrottlingException","message":"Rate exceeded"}"#),
            (
                429,
                r#"{"Type":"User","message":"Rate Exceeded.","Reason":"ConcurrentInvocationLimitExceeded"}"#,
            ),
            (503, ""),
            (
                400,
                r#"{"__type":"ConcurrentRunsExceededException","message":"Concurrent runs exceeded for nightly"}"#,
            ),
            (500, "<!doctype html><title>500 Internal Server Error</title>"),
            (
                400,
                r#"{"__type":"com.amazon.coral.availability#ThrottlingException","message":"Rate exceeded"}"#,
            ),
        ];
        for (status, body) in cases {
            let e = AwsError::parse(StatusCode::from_u16(status).unwrap(), &HeaderMap::new(), body);
            assert!(
                matches!(e.clone().into_call_error("x"), CallError::Infra(_)),
                "{status} {body}"
            );
        }
        let mut headers = HeaderMap::new();
        headers.insert("x-amzn-errortype", HeaderValue::from_static("TooManyRequestsException"));
        let e = AwsError::parse(StatusCode::BAD_REQUEST, &headers, "{}");
        assert!(e.retryable());
        let html = AwsError::parse(StatusCode::INTERNAL_SERVER_ERROR, &HeaderMap::new(), "<h1>oops</h1>");
        assert_eq!(
            html.describe("EMR AddJobFlowSteps"),
            "EMR AddJobFlowSteps answered 500 Internal Server Error: <h1>oops</h1>"
        );
    }

    #[test]
    fn access_denied_and_validation_are_permanent() {
        for body in [
            r#"{"__type":"AccessDeniedException","Message":"User is not authorized"}"#,
            r#"{"__type":"ValidationException","message":"1 validation error"}"#,
            r#"{"__type":"InvalidRequestException","Message":"Cluster id 'j-x' is not valid."}"#,
            r#"{"__type":"UnrecognizedClientException","message":"The security token included in the request is invalid."}"#,
        ] {
            let e = AwsError::parse(StatusCode::BAD_REQUEST, &HeaderMap::new(), body);
            assert!(matches!(e.into_call_error("x"), CallError::Permanent(_)), "{body}");
        }
    }

    #[test]
    fn long_messages_keep_their_beginning() {
        let long = "x".repeat(2 * MESSAGE_LIMIT);
        let body = json!({"__type": "ValidationException", "message": long}).to_string();
        let e = AwsError::parse(StatusCode::BAD_REQUEST, &HeaderMap::new(), &body);
        let text = e.describe("Glue StartJobRun");
        assert!(text.starts_with("Glue StartJobRun answered 400 Bad Request: ValidationException: xxx"));
        assert!(text.len() < MESSAGE_LIMIT + 100, "{}", text.len());
    }

    #[test]
    fn credentials_are_scrubbed_from_quoted_answers() {
        let keys = Keys {
            access_key_id: "AKIAEXAMPLEKEY".into(),
            secret_access_key: "s3cr3t/KEY+value".into(),
            session_token: Some("token-value-123".into()),
        };
        let text = "Credential=AKIAEXAMPLEKEY/x x-amz-security-token:token-value-123 s3cr3t/KEY+value";
        assert_eq!(
            keys.redact(text),
            "Credential=[redacted]/x x-amz-security-token:[redacted] [redacted]"
        );
        assert_eq!(format!("{keys:?}"), "Keys(redacted)");
    }

    #[test]
    fn region_comes_from_config_then_the_environment() {
        let env = env_of(&[("AWS_REGION", "eu-west-1"), ("AWS_DEFAULT_REGION", "us-east-2")]);
        assert_eq!(region(&aws(json!({"region": "us-west-2"})), &env).unwrap(), "us-west-2");
        assert_eq!(region(&aws(json!({})), &env).unwrap(), "eu-west-1");
        let env = env_of(&[("AWS_DEFAULT_REGION", "us-east-2")]);
        assert_eq!(region(&aws(json!({})), &env).unwrap(), "us-east-2");
        let none = env_of(&[]);
        let e = region(&aws(json!({})), &none).unwrap_err();
        assert!(
            matches!(&e, CallError::Permanent(m) if m.contains("AWS_REGION")),
            "{e:?}"
        );
        // A region is part of a host name: nothing else may hide in it.
        for bad in ["evil.com/x", "US-EAST-1", "", "us east"] {
            assert!(region(&aws(json!({ "region": bad })), &none).is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoints_come_from_config_then_the_environment_then_aws() {
        let none = env_of(&[]);
        let empty = aws(json!({}));
        assert_eq!(
            endpoint(&GLUE, "us-east-1", &empty, &none).unwrap(),
            "https://glue.us-east-1.amazonaws.com"
        );
        assert_eq!(
            endpoint(&GLUE, "cn-north-1", &empty, &none).unwrap(),
            "https://glue.cn-north-1.amazonaws.com.cn"
        );
        let env = env_of(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")]);
        assert_eq!(
            endpoint(&GLUE, "us-east-1", &empty, &env).unwrap(),
            "http://127.0.0.1:5000"
        );
        let env = env_of(&[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000"),
            ("AWS_ENDPOINT_URL_GLUE", "http://127.0.0.1:6000"),
        ]);
        assert_eq!(
            endpoint(&GLUE, "us-east-1", &empty, &env).unwrap(),
            "http://127.0.0.1:6000"
        );
        let configured = aws(json!({"endpointUrl": "http://localhost:4566"}));
        assert_eq!(
            endpoint(&GLUE, "us-east-1", &configured, &env).unwrap(),
            "http://localhost:4566"
        );
        assert!(endpoint(&GLUE, "us-east-1", &aws(json!({"endpointUrl": 5})), &env).is_err());
    }

    #[test]
    fn signs_as_botocore_does() {
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
        let find =
            |signed: &[(&str, String)], name: &str| signed.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());

        let keys = Keys {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: secret.into(),
            session_token: Some("session-token-example".into()),
        };
        let headers = [
            ("content-type", "application/x-amz-json-1.1".to_string()),
            ("x-amz-target", "AWSGlue.StartJobRun".to_string()),
        ];
        let url = "https://glue.us-east-1.amazonaws.com/";
        let body = br#"{"JobName":"nightly"}"#;
        let signed = signature(&keys, "us-east-1", "glue", "POST", url, &headers, body, time).unwrap();
        assert_eq!(find(&signed, "x-amz-date").as_deref(), Some("20261118T110640Z"));
        assert_eq!(
            find(&signed, "x-amz-security-token").as_deref(),
            Some("session-token-example")
        );
        assert_eq!(
            find(&signed, "authorization").as_deref(),
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261118/us-east-1/glue/aws4_request, \
                 SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target, \
                 Signature=aba3f79861d8a0cc8827e1bbb417aacc04904119b6b5ee54a766ff17c297a60a"
            )
        );

        let keys = Keys {
            session_token: None,
            ..keys
        };
        let headers = [
            ("content-type", "application/json".to_string()),
            ("x-amz-invocation-type", "Event".to_string()),
        ];
        let url = format!(
            "http://127.0.0.1:5000/2015-03-31/functions/{}/invocations",
            label("arn:aws:lambda:us-east-1:123456789012:function:f")
        );
        let signed = signature(&keys, "us-east-1", "lambda", "POST", &url, &headers, b"{}", time).unwrap();
        assert_eq!(find(&signed, "x-amz-security-token"), None);
        assert_eq!(
            find(&signed, "authorization").as_deref(),
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261118/us-east-1/lambda/aws4_request, \
                 SignedHeaders=content-type;host;x-amz-date;x-amz-invocation-type, \
                 Signature=54cf6afa7aa14bf1dab0687a48fb9b33cae7135c3b6ecb952c0b825104b14d34"
            )
        );
    }

    #[test]
    fn labels_are_percent_encoded_like_the_sdks_do() {
        assert_eq!(label("my-function_1.v2~x"), "my-function_1.v2~x");
        assert_eq!(
            label("arn:aws:lambda:us-east-1:123456789012:function:f"),
            "arn%3Aaws%3Alambda%3Aus-east-1%3A123456789012%3Afunction%3Af"
        );
        assert_eq!(label("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn targets_name_kind_region_and_resource() {
        let c = job(JobKind::Glue, json!({"region": "us-east-1", "jobName": "nightly"}));
        assert_eq!(target(&c), "glue:us-east-1:nightly");
        let c = job(JobKind::Emr, json!({"region": "eu-west-1", "clusterId": "j-123"}));
        assert_eq!(target(&c), "emr:eu-west-1:j-123");
        let c = job(
            JobKind::EmrServerless,
            json!({"region": "eu-west-1", "applicationId": "00f"}),
        );
        assert_eq!(target(&c), "emr-serverless:eu-west-1:00f");
        let arn = "arn:aws:states:eu-west-1:123456789012:stateMachine:load";
        let c = job(
            JobKind::StepFunction,
            json!({"region": "eu-west-1", "stateMachineArn": arn}),
        );
        assert_eq!(target(&c), format!("step-function:eu-west-1:{arn}"));
        let c = job(JobKind::Lambda, json!({"region": "eu-west-1", "functionName": "f"}));
        assert_eq!(target(&c), "lambda:eu-west-1:f");
    }

    #[test]
    fn fitted_names_stay_distinct_and_within_their_limit() {
        assert_eq!(fit("abc", "abc".into(), 10), "abc");
        let a = fit("a.b", "a_b".into(), 80);
        let b = fit("a_b", "a_b".into(), 80);
        assert_ne!(a, b);
        assert_eq!(b, "a_b");
        assert!(a.starts_with("a_b-") && a.len() == 3 + 1 + 12, "{a}");
        let long = "x".repeat(200);
        let fitted = fit(&long, long.clone(), 80);
        assert_eq!(fitted.len(), 80);
        assert_ne!(fitted, fit(&"x".repeat(201), "x".repeat(201), 80));
    }
}

//! `job.config` typed per job type: one struct per type, holding the settings its client
//! reads. Strings stay as written, since templates render them at trigger time; what a
//! client sends on as it is (a DAG run's `conf`, a Lambda `payload`) stays JSON.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{JobKind, Setting, Unusable};

/// `headers`: header values by name, sent on every request of the job.
pub type Headers = BTreeMap<String, String>;

/// The settings of one job, by job type.
#[derive(Debug, Clone, PartialEq)]
pub enum JobSettings {
    Http(HttpJob),
    Command(CommandJob),
    Airflow(AirflowJob),
    Databricks(DatabricksJob),
    Glue(GlueJob),
    Emr(EmrJob),
    EmrServerless(EmrServerlessJob),
    StepFunction(StepFunctionJob),
    Lambda(LambdaJob),
    Kafka(KafkaJob),
}

/// `http`: one request; then nothing more, a status URL to poll, or the runner's report.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpJob {
    pub url: String,
    /// Default POST.
    pub method: Setting<HttpMethod>,
    pub headers: Setting<Headers>,
    /// Sent as it is when a string, as JSON text otherwise; `None` (or null): the run's date
    /// arguments.
    pub body: Option<Value>,
    pub status_url: Option<String>,
    /// Where the state is in the status answer (dotted path; default `status`).
    pub status_field: Option<String>,
    pub await_report: bool,
}

/// The methods an `http` job may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpMethod {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl HttpMethod {
    const ALL: [HttpMethod; 5] = [
        HttpMethod::Get,
        HttpMethod::Post,
        HttpMethod::Put,
        HttpMethod::Patch,
        HttpMethod::Delete,
    ];

    /// A method name in any case.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str().eq_ignore_ascii_case(text))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Delete => "DELETE",
        }
    }
}

/// `command`: `sh -c <command>` on the processor's host.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandJob {
    pub command: String,
    /// `env`: the variables the command gets beyond its run's identity and `PATH`, `HOME`
    /// and `LANG` (values may hold `${env:NAME}` secrets); it inherits nothing else.
    pub env: Setting<Environment>,
}

/// `env`: variable values by name.
pub type Environment = BTreeMap<String, String>;

/// `airflow`: a DAG run through Airflow's REST API.
#[derive(Debug, Clone, PartialEq)]
pub struct AirflowJob {
    pub url: String,
    pub dag_id: String,
    pub version: AirflowVersion,
    /// The DAG run's conf, sent as it is (`{}` when absent).
    pub conf: Option<Value>,
    pub logical_date: Option<String>,
    pub token: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    pub headers: Setting<Headers>,
}

/// Which Airflow API a job speaks: `/api/v1` (Airflow 2) or `/api/v2` (Airflow 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AirflowVersion {
    V2,
    V3,
}

impl AirflowVersion {
    /// `version` as written: 2 or 3, a number or a string.
    pub fn read(value: &Value) -> Option<Self> {
        match value.to_string().trim_matches('"') {
            "2" => Some(AirflowVersion::V2),
            "3" => Some(AirflowVersion::V3),
            _ => None,
        }
    }
}

/// `databricks`: a run of a job through the Jobs API.
#[derive(Debug, Clone, PartialEq)]
pub struct DatabricksJob {
    pub host: String,
    pub job_id: JobId,
    /// May be left out when `headers` carries an `Authorization`.
    pub token: Option<String>,
    /// Sent as the run's `job_parameters`, as written.
    pub job_parameters: Option<Value>,
    /// Sent as the run's `notebook_params`, as written.
    pub notebook_params: Option<Value>,
    pub headers: Setting<Headers>,
}

/// A Databricks job id: a number, or a string that holds one once its templates are rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobId {
    Number(u64),
    Text(String),
}

/// `glue`: a run of a Glue job.
#[derive(Debug, Clone, PartialEq)]
pub struct GlueJob {
    pub job_name: String,
    /// The run's `Arguments`; values are sent as strings.
    pub arguments: Setting<Option<Map<String, Value>>>,
    pub worker_type: Setting<Option<String>>,
    pub number_of_workers: Setting<Option<u64>>,
    /// Glue's own run timeout (`timeout` stays the per-request one).
    pub job_timeout_minutes: Setting<Option<u64>>,
    pub aws: AwsEndpoint,
}

/// `emr`: a step on a running EMR cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct EmrJob {
    pub cluster_id: String,
    pub step: Setting<EmrStep>,
    pub aws: AwsEndpoint,
}

/// `job.config.step`, each part as written; the client fills in the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct EmrStep {
    /// Default: the run id, which lets a trigger requested again find the step it added.
    pub name: Option<String>,
    pub jar: Option<String>,
    pub args: Vec<String>,
    pub action_on_failure: Option<String>,
    pub main_class: Option<String>,
}

/// `emr-serverless`: a job run on an EMR Serverless application.
#[derive(Debug, Clone, PartialEq)]
pub struct EmrServerlessJob {
    pub application_id: String,
    pub execution_role_arn: String,
    /// The API's `jobDriver` object, sent as it is.
    pub job_driver: Map<String, Value>,
    pub name: Setting<Option<String>>,
    pub configuration_overrides: Setting<Option<Map<String, Value>>>,
    /// The run's `executionTimeoutMinutes`.
    pub job_timeout_minutes: Setting<Option<u64>>,
    pub aws: AwsEndpoint,
}

/// `step-function`: an execution of a state machine.
#[derive(Debug, Clone, PartialEq)]
pub struct StepFunctionJob {
    pub state_machine_arn: String,
    /// A string is sent as it is, another value as JSON text; `None` (or null): `{}`.
    pub input: Option<Value>,
    pub aws: AwsEndpoint,
}

/// `lambda`: one invocation of a function.
#[derive(Debug, Clone, PartialEq)]
pub struct LambdaJob {
    pub function_name: String,
    /// A string is sent as it is, another value (null too) as JSON text; `None`: the run's
    /// identity.
    pub payload: Option<Value>,
    pub invocation_type: Setting<InvocationType>,
    pub aws: AwsEndpoint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvocationType {
    /// Wait for the function: its answer is the run's outcome.
    RequestResponse,
    /// Queue the invocation.
    Event,
}

impl InvocationType {
    pub fn as_str(self) -> &'static str {
        match self {
            InvocationType::RequestResponse => "RequestResponse",
            InvocationType::Event => "Event",
        }
    }
}

/// `kafka`: a job request on a topic, for a runner that reports by itself.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaJob {
    /// Refused when it is one of Sluice's own (see [`reserved_topic`]).
    pub topic: Setting<String>,
    /// The request's `payload`, as written (null when absent).
    pub payload: Option<Value>,
    pub headers: Setting<Headers>,
}

/// Where an AWS job's calls go.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsEndpoint {
    /// `None`: the processor's environment names the region.
    pub region: Setting<Option<String>>,
    /// `None`: the environment's endpoint, else the service's public one.
    pub endpoint_url: Setting<Option<String>>,
    /// `roleArn`: a role the calls assume. `None`: the processor's own credentials.
    pub role_arn: Setting<Option<String>>,
}

impl JobSettings {
    pub fn kind(&self) -> JobKind {
        match self {
            JobSettings::Http(_) => JobKind::Http,
            JobSettings::Command(_) => JobKind::Command,
            JobSettings::Airflow(_) => JobKind::Airflow,
            JobSettings::Databricks(_) => JobKind::Databricks,
            JobSettings::Glue(_) => JobKind::Glue,
            JobSettings::Emr(_) => JobKind::Emr,
            JobSettings::EmrServerless(_) => JobKind::EmrServerless,
            JobSettings::StepFunction(_) => JobKind::StepFunction,
            JobSettings::Lambda(_) => JobKind::Lambda,
            JobSettings::Kafka(_) => JobKind::Kafka,
        }
    }

    /// `headers`, for the job types that send them.
    pub fn headers(&self) -> Option<&Setting<Headers>> {
        match self {
            JobSettings::Http(job) => Some(&job.headers),
            JobSettings::Airflow(job) => Some(&job.headers),
            JobSettings::Databricks(job) => Some(&job.headers),
            JobSettings::Kafka(job) => Some(&job.headers),
            _ => None,
        }
    }

    /// Region and endpoint, for the AWS job types.
    pub fn aws(&self) -> Option<&AwsEndpoint> {
        match self {
            JobSettings::Glue(job) => Some(&job.aws),
            JobSettings::Emr(job) => Some(&job.aws),
            JobSettings::EmrServerless(job) => Some(&job.aws),
            JobSettings::StepFunction(job) => Some(&job.aws),
            JobSettings::Lambda(job) => Some(&job.aws),
            _ => None,
        }
    }

    /// Every setting no trigger can use, in the order a trigger comes to them.
    pub fn unusable(&self) -> Vec<&Unusable> {
        let mut found = match self {
            JobSettings::Http(job) => vec![job.method.as_ref().err()],
            JobSettings::Glue(job) => vec![
                job.arguments.as_ref().err(),
                job.worker_type.as_ref().err(),
                job.number_of_workers.as_ref().err(),
                job.job_timeout_minutes.as_ref().err(),
            ],
            JobSettings::Emr(job) => vec![job.step.as_ref().err()],
            JobSettings::EmrServerless(job) => vec![
                job.name.as_ref().err(),
                job.configuration_overrides.as_ref().err(),
                job.job_timeout_minutes.as_ref().err(),
            ],
            JobSettings::Lambda(job) => vec![job.invocation_type.as_ref().err()],
            JobSettings::Kafka(job) => vec![job.topic.as_ref().err()],
            _ => vec![],
        };
        found.push(self.headers().and_then(|h| h.as_ref().err()));
        if let Some(aws) = self.aws() {
            found.extend([
                aws.region.as_ref().err(),
                aws.endpoint_url.as_ref().err(),
                aws.role_arn.as_ref().err(),
            ]);
        }
        found.into_iter().flatten().collect()
    }
}

/// Why a `kafka` job may not publish to `topic`, read without the deployment's prefix:
/// Sluice's own topics under the default prefix (`sluice.`) and the broker's internal ones
/// (`__consumer_offsets`). A record there written by a config author's job would be read
/// as Sluice's own (a forged changelog batch rolls a partition back). The runtime refuses
/// its actual topics under any prefix again at call time.
pub fn reserved_topic(topic: &str) -> Option<String> {
    let lower = topic.to_ascii_lowercase();
    if lower.starts_with("sluice.") || lower.starts_with("__") {
        return Some(format!(
            "{topic:?} is a topic of Sluice's or the broker's own: a job may not write it"
        ));
    }
    None
}

/// Why a `kafka` job may not set the header `name`: `sluice.*` and `sluice-*` are Sluice's
/// own (`sluice.batch` attributes changelog writes, `sluice-run-id` the request's run).
pub fn reserved_header(name: &str) -> Option<String> {
    name.to_ascii_lowercase()
        .starts_with("sluice")
        .then(|| format!("{name:?}: header names beginning with \"sluice\" are Sluice's own"))
}

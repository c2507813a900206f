//! Reads `job.config` (canonical spellings) into the settings of its job type.
//!
//! Two strictnesses, on purpose. A setting a job cannot run without (a URL, a job name, an
//! EMR step) must be there: without it there are no settings at all, and the config reader
//! has reported it as a problem first. Any other setting of the wrong type reads as
//! [`Unusable`]: configs were accepted with such settings before job configs were typed,
//! and only their triggers failed; stored configs may hold them and must keep loading, so
//! the reader warns and the trigger still fails, with the message it always gave.
//!
//! Strings are taken as written (a blank one too), as the clients always took them.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::settings::{
    reserved_header, reserved_topic, AirflowJob, AirflowVersion, AwsEndpoint, CommandJob, DatabricksJob, EmrJob,
    EmrServerlessJob, EmrStep, GlueJob, Headers, HttpJob, HttpMethod, InvocationType, JobId, JobSettings, KafkaJob,
    LambdaJob, StepFunctionJob,
};
use super::{JobKind, Setting, Unusable};

/// The settings of a `kind` job, or the first setting it cannot do without that is missing.
pub(super) fn settings(kind: JobKind, json: &Map<String, Value>) -> Result<JobSettings, Unusable> {
    let f = Fields(json);
    Ok(match kind {
        JobKind::Http => JobSettings::Http(http(&f)?),
        JobKind::Command => JobSettings::Command(CommandJob {
            command: f.essential("command")?,
            env: f.strings("env", "variable names"),
        }),
        JobKind::Airflow => JobSettings::Airflow(airflow(&f)?),
        JobKind::Databricks => JobSettings::Databricks(databricks(&f)?),
        JobKind::Glue => JobSettings::Glue(GlueJob {
            job_name: f.essential("jobName")?,
            arguments: f.object("arguments"),
            worker_type: f.string("workerType"),
            number_of_workers: f.whole("numberOfWorkers"),
            job_timeout_minutes: f.whole("jobTimeoutMinutes"),
            aws: f.aws(),
        }),
        JobKind::Emr => JobSettings::Emr(EmrJob {
            cluster_id: f.essential("clusterId")?,
            step: emr_step(json.get("step"))?,
            aws: f.aws(),
        }),
        JobKind::EmrServerless => JobSettings::EmrServerless(emr_serverless(&f)?),
        JobKind::StepFunction => JobSettings::StepFunction(StepFunctionJob {
            state_machine_arn: f.essential("stateMachineArn")?,
            input: f.value("input").filter(|v| !v.is_null()),
            aws: f.aws(),
        }),
        JobKind::Lambda => JobSettings::Lambda(LambdaJob {
            function_name: f.essential("functionName")?,
            payload: f.value("payload"),
            invocation_type: invocation_type(&f),
            aws: f.aws(),
        }),
        JobKind::Kafka => {
            let topic = f.essential("topic")?;
            let topic = match reserved_topic(&topic) {
                Some(why) => Err(Unusable::of("topic", &why)),
                None => Ok(topic),
            };
            let headers = f
                .headers()
                .and_then(|headers| match headers.keys().find_map(|name| reserved_header(name)) {
                    Some(why) => Err(Unusable::of("headers", &why)),
                    None => Ok(headers),
                });
            JobSettings::Kafka(KafkaJob {
                topic,
                payload: f.value("payload"),
                headers,
            })
        }
    })
}

fn http(f: &Fields<'_>) -> Result<HttpJob, Unusable> {
    // Anything but a string never was a method: the default.
    let method = match f.text("method") {
        None => Ok(HttpMethod::Post),
        Some(text) => HttpMethod::parse(&text).ok_or_else(|| Unusable {
            path: "job.config.method".into(),
            message: format!("{:?} is not an HTTP method", text.to_ascii_uppercase()),
        }),
    };
    Ok(HttpJob {
        url: f.essential("url")?,
        method,
        headers: f.headers(),
        body: f.value("body").filter(|v| !v.is_null()),
        status_url: f.text("statusUrl"),
        status_field: f.text("statusField"),
        await_report: f.0.get("awaitReport").and_then(Value::as_bool) == Some(true),
    })
}

fn airflow(f: &Fields<'_>) -> Result<AirflowJob, Unusable> {
    let version = match f.0.get("version") {
        None => AirflowVersion::V2,
        Some(v) => AirflowVersion::read(v)
            .ok_or_else(|| Unusable::of("version", &format!("{} is not 2 or 3", v.to_string().trim_matches('"'))))?,
    };
    Ok(AirflowJob {
        url: f.essential("url")?,
        dag_id: f.essential("dagId")?,
        version,
        conf: f.value("conf"),
        logical_date: f.text("logicalDate"),
        token: f.text("token"),
        username: f.text("username"),
        password: f.text("password"),
        headers: f.headers(),
    })
}

fn databricks(f: &Fields<'_>) -> Result<DatabricksJob, Unusable> {
    let job_id = match f.0.get("jobId") {
        Some(Value::Number(n)) => n.as_u64().map(JobId::Number),
        Some(Value::String(s)) => Some(JobId::Text(s.clone())),
        _ => None,
    }
    .ok_or_else(|| Unusable::of("jobId", "must be a Databricks job id (a number)"))?;
    Ok(DatabricksJob {
        host: f.essential("host")?,
        job_id,
        token: f.text("token"),
        job_parameters: f.value("jobParameters"),
        notebook_params: f.value("notebookParams"),
        headers: f.headers(),
    })
}

fn emr_serverless(f: &Fields<'_>) -> Result<EmrServerlessJob, Unusable> {
    let application_id = f.essential("applicationId")?;
    let execution_role_arn = f.essential("executionRoleArn")?;
    let Some(job_driver) = f.object("jobDriver")? else {
        return Err(Unusable::of(
            "jobDriver",
            "is missing (e.g. {\"sparkSubmit\": {\"entryPoint\": \"s3://...\"}})",
        ));
    };
    Ok(EmrServerlessJob {
        application_id,
        execution_role_arn,
        job_driver,
        name: f.string("name"),
        configuration_overrides: f.object("configurationOverrides"),
        job_timeout_minutes: f.whole("jobTimeoutMinutes"),
        aws: f.aws(),
    })
}

/// `step`: a mapping is required; its parts, each of the wrong type, make it unusable.
fn emr_step(step: Option<&Value>) -> Result<Setting<EmrStep>, Unusable> {
    let step = match step {
        Some(Value::Object(step)) => step,
        Some(_) => return Err(Unusable::of("step", "must be an object")),
        None => {
            return Err(Unusable::of(
                "step",
                "is missing (an object with args, and optionally name, jar, mainClass, actionOnFailure)",
            ))
        }
    };
    Ok(emr_step_parts(step))
}

/// The parts of `step`: the first of the wrong type makes it unusable.
fn emr_step_parts(step: &Map<String, Value>) -> Setting<EmrStep> {
    let text = |field: &str| match step.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(Unusable::of(&format!("step.{field}"), "must be a string")),
    };
    Ok(EmrStep {
        name: text("name")?,
        jar: text("jar")?,
        args: emr_args(step.get("args"))?,
        action_on_failure: text("actionOnFailure")?,
        main_class: text("mainClass")?,
    })
}

/// `step.args`: strings, numbers and booleans, each sent as a string.
fn emr_args(args: Option<&Value>) -> Setting<Vec<String>> {
    match args {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(args)) => args
            .iter()
            .map(|a| match a {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                Value::Bool(b) => Ok(b.to_string()),
                _ => Err(Unusable::of("step.args", "must hold strings")),
            })
            .collect(),
        Some(_) => Err(Unusable::of("step.args", "must be an array of strings")),
    }
}

fn invocation_type(f: &Fields<'_>) -> Setting<InvocationType> {
    match f.string("invocationType")? {
        None => Ok(InvocationType::RequestResponse),
        Some(kind) if kind.eq_ignore_ascii_case("RequestResponse") => Ok(InvocationType::RequestResponse),
        Some(kind) if kind.eq_ignore_ascii_case("Event") => Ok(InvocationType::Event),
        Some(other) => Err(Unusable::of(
            "invocationType",
            &format!("must be RequestResponse or Event, not {other:?}"),
        )),
    }
}

/// One job config's fields.
struct Fields<'j>(&'j Map<String, Value>);

impl Fields<'_> {
    /// A string the job cannot run without.
    fn essential(&self, key: &str) -> Result<String, Unusable> {
        self.text(key).ok_or_else(|| Unusable::of(key, "is missing"))
    }

    /// A string; a value of another type counts as absent.
    fn text(&self, key: &str) -> Option<String> {
        self.0.get(key).and_then(Value::as_str).map(str::to_string)
    }

    /// A value as written, null included.
    fn value(&self, key: &str) -> Option<Value> {
        self.0.get(key).cloned()
    }

    fn string(&self, key: &str) -> Setting<Option<String>> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(Unusable::of(key, "must be a string")),
        }
    }

    fn whole(&self, key: &str) -> Setting<Option<u64>> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value
                .as_u64()
                .map(Some)
                .ok_or_else(|| Unusable::of(key, "must be a whole number")),
        }
    }

    fn object(&self, key: &str) -> Setting<Option<Map<String, Value>>> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map.clone())),
            Some(_) => Err(Unusable::of(key, "must be an object")),
        }
    }

    /// `headers`: a mapping of string values.
    fn headers(&self) -> Setting<Headers> {
        self.strings("headers", "header names")
    }

    /// A mapping of `names` to string values; absent, an empty one.
    fn strings(&self, key: &str, names: &str) -> Setting<BTreeMap<String, String>> {
        let map = match self.0.get(key) {
            None | Some(Value::Null) => return Ok(BTreeMap::new()),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(Unusable::of(key, &format!("must map {names} to string values"))),
        };
        map.iter()
            .map(|(name, value)| match value {
                Value::String(value) => Ok((name.clone(), value.clone())),
                _ => Err(Unusable::of(&format!("{key}.{name}"), "must be a string")),
            })
            .collect()
    }

    /// `region` (null is not a region), `endpointUrl` (a blank one is not a URL) and
    /// `roleArn` (an IAM role's ARN).
    fn aws(&self) -> AwsEndpoint {
        let region = match self.0.get("region") {
            None => Ok(None),
            Some(Value::String(region)) => Ok(Some(region.clone())),
            Some(_) => Err(Unusable::of("region", "must be a string")),
        };
        let endpoint_url = match self.0.get("endpointUrl") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(url)) if !url.trim().is_empty() => Ok(Some(url.clone())),
            Some(_) => Err(Unusable::of("endpointUrl", "must be a URL")),
        };
        let role_arn = match self.0.get("roleArn") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(arn)) if is_role_arn(arn) => Ok(Some(arn.clone())),
            Some(_) => Err(Unusable::of("roleArn", NOT_A_ROLE_ARN)),
        };
        AwsEndpoint {
            region,
            endpoint_url,
            role_arn,
        }
    }
}

/// What a `roleArn` that [`is_role_arn`] refuses is told.
pub(crate) const NOT_A_ROLE_ARN: &str = "must be an IAM role's ARN (arn:aws:iam::ACCOUNT:role/NAME)";

/// `arn:PARTITION:iam::ACCOUNT:role/NAME`, bounded as IAM bounds it (2,048 characters).
pub(crate) fn is_role_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    matches!(parts[..], ["arn", partition, "iam", "", account, resource]
        if partition.starts_with("aws")
            && account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())
            && resource.strip_prefix("role/").is_some_and(|name| !name.is_empty()))
        && arn.len() <= 2048
        && !arn.contains(char::is_whitespace)
}

//! Pipeline configuration: the YAML of the earlier design, parsed once into types.
//!
//! [`model`] holds what a pipeline config says, as types; [`job`] the job it triggers, with
//! `job.config` typed per job type; [`reader`] turns the JSON (or YAML) into them. They are
//! apart because the rest of Sluice only reads the model, while the reader is where every
//! spelling of the earlier design and every problem message lives.

mod job;
mod model;
mod reader;
mod unlike_interlock;
pub mod yaml;

pub use job::{
    reserved_header, reserved_topic, AirflowJob, AirflowVersion, AwsEndpoint, CommandJob, DatabricksJob, EmrJob,
    EmrServerlessJob, EmrStep, Environment, GlueJob, Headers, HttpJob, HttpMethod, InvocationType, Job, JobConfig,
    JobId, JobKind, JobSettings, KafkaJob, LambdaJob, RenderError, RetryPolicy, Setting, StepFunctionJob, Unusable,
    DEFAULT_TRY_TIMEOUT, LAMBDA_SYNC_TRY_TIMEOUT,
};
pub use model::{
    AgeBound, Anomalies, Calendar, Check, ClockTime, Comparison, Deadline, DeadlineDay, Dependency, Evaluation,
    Evaluator, ExcludeBy, Exclusions, Flapping, Mode, PipelineConfig, PostRun, Rule, Schedule, Severity, Sla, SlaTime,
    UndatedReadings, Validation, INCLUSION_LOOKBACK_DAYS, SCHEDULE_IDS,
};
pub use reader::{parse, yaml_to_json, ConfigError, Parsed, Problem, Variables, MAX_PIPELINE_ID_LEN};
pub use unlike_interlock::{days_skipped_unlike_interlock, runs_unlike_interlock};

#[cfg(test)]
mod tests;

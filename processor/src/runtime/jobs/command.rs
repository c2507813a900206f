//! `command` jobs: `sh -c <command>` on the processor's host, with the run's identity in the
//! environment (`SLUICE_RUN_ID`, ...). Exit 0 succeeds, anything else fails; the timeout
//! (`job.config.timeout`, default 300 s) kills it. The tails of stdout and stderr go into
//! the report, secrets redacted, so a failure explains itself.
//!
//! The command inherits none of the processor's environment (its Kafka, registry, cloud
//! and Slack credentials live there) but `PATH`, `HOME` and `LANG`; what else it needs, the
//! config names in `env` (whose values may read allowed `${env:NAME}` secrets).

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::process::Child;

use super::{tail, usable, Call, CallError, Outcome};
use crate::core::config::{JobKind, JobSettings};
use crate::core::records::{FailureCategory, JobStatus};

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The processor's variables a command gets: enough for `sh` to find programs and for them
/// to find a home and a locale; none holds a credential.
const INHERITED: [&str; 3] = ["PATH", "HOME", "LANG"];
/// `PATH` when the processor has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Starts the command; the caller reports it running, then [`wait`]s.
pub fn start(call: &Call<'_>) -> Result<Child, CallError> {
    shell(call)?
        .spawn()
        .map_err(|e| CallError::Permanent(format!("could not start the command: {e}")))
}

/// The command, ready to spawn: `sh -c`, an environment of `PATH`, `HOME`, `LANG`, the
/// run's identity and the config's `env`, no input, its output captured, killed when
/// dropped.
pub fn shell(call: &Call<'_>) -> Result<tokio::process::Command, CallError> {
    let JobSettings::Command(job) = call.config.settings() else {
        return Err(call.not_for(JobKind::Command));
    };
    let command = &job.command;
    let r = call.request;
    let mut shell = tokio::process::Command::new("sh");
    shell.env_clear();
    for name in INHERITED {
        if let Some(value) = std::env::var_os(name) {
            shell.env(name, value);
        }
    }
    if std::env::var_os("PATH").is_none() {
        shell.env("PATH", DEFAULT_PATH);
    }
    // The config's own variables may not pose as the run's identity: those come last.
    shell.envs(usable(&job.env)?);
    shell
        .arg("-c")
        .arg(command)
        .env("SLUICE_PIPELINE_ID", &r.pipeline_id)
        .env("SLUICE_SCHEDULE_ID", r.execution.schedule())
        .env("SLUICE_DATE", r.execution.date_text())
        .env("SLUICE_RUN_ID", &r.run_id)
        .env("SLUICE_ATTEMPT", r.attempt.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    Ok(shell)
}

/// Waits for the command (killing it at the timeout) and says how it ended.
pub async fn wait(call: &Call<'_>, child: Child) -> Outcome {
    let timeout = call.timeout_or(DEFAULT_TIMEOUT);
    // Dropping the child at the timeout kills it (`kill_on_drop`).
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Err(_) => return Outcome::timed_out(format!("command timed out after {}s and was killed", timeout.as_secs())),
        Ok(Err(e)) => return Outcome::failed(None, format!("waiting for the command failed: {e}")),
        Ok(Ok(output)) => output,
    };
    // Redacted before the tail is cut, so no secret is left half shown at its start.
    let stdout = tail(&call.redactor.redact(&String::from_utf8_lossy(&output.stdout)));
    let stderr = tail(&call.redactor.redact(&String::from_utf8_lossy(&output.stderr)));
    let code = output.status.code();
    let mut outcome = match code {
        Some(0) => Outcome::succeeded("command exited 0"),
        Some(c) => Outcome::failed(None, format!("command exited {c}")),
        None => Outcome::failed(None, "command was killed by a signal"),
    };
    if outcome.status == JobStatus::Failed && !stderr.is_empty() {
        let message = outcome.message.take().unwrap_or_default();
        outcome.message = Some(format!("{message}: {stderr}"));
    }
    // 126/127: the shell could not run it at all; retrying will not help.
    if matches!(code, Some(126) | Some(127)) {
        outcome.category = Some(FailureCategory::Permanent);
    }
    outcome = outcome.with("exitCode", json!(code));
    if !stdout.is_empty() {
        outcome = outcome.with("stdout", json!(stdout));
    }
    if !stderr.is_empty() {
        outcome = outcome.with("stderr", json!(stderr));
    }
    outcome
}

//! `command` jobs: `sh -c <command>` on the processor's host, with the run's identity in the
//! environment (`SLUICE_RUN_ID`, ...). Exit 0 succeeds, anything else fails; the timeout
//! (`job.config.timeout`, default 300 s) kills it. The tails of stdout and stderr go into
//! the report, secrets redacted, so a failure explains itself.
//!
//! The command inherits none of the processor's environment (its Kafka, registry, cloud
//! and Slack credentials live there) but `PATH`, `HOME` and `LANG`; what else it needs, the
//! config names in `env` (whose values may read allowed `${env:NAME}` secrets).
//!
//! Clearing the environment alone would hide nothing: a command running as the processor's
//! user could read `/proc/$PPID/environ`. So the processor makes itself non-dumpable when it
//! starts ([`hide_processor`]), which refuses that read to any process without
//! `CAP_SYS_PTRACE` (and, on recent kernels, `CAP_SYS_ADMIN` and `CAP_PERFMON`), and every
//! command starts with those dropped from its bounding set, so not even a command of a
//! processor running as root can read it.

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

/// Makes the processor non-dumpable: its `/proc/<pid>/environ`, `mem` and the like are then
/// readable only with `CAP_SYS_PTRACE`, which no command has. Also stops core dumps (which
/// would hold the same credentials) and debuggers of the same user. Linux only.
pub fn hide_processor() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only changes this process's flag.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The capabilities that let a process read a non-dumpable one's memory and environment
/// (Linux's numbers; the libc crate has no constants for them): `CAP_SYS_PTRACE`, and on
/// recent kernels `CAP_SYS_ADMIN` and `CAP_PERFMON` too (found by trial: a root child that
/// kept either still read `/proc/<processor>/environ`).
const READS_OTHERS_MEMORY: [libc::c_ulong; 3] = [19, 21, 38];

/// In the forked child before `exec`: drops [`READS_OTHERS_MEMORY`] from the bounding set,
/// so the command (and all it starts, setuid programs included) can never read a
/// non-dumpable process's memory or environment, even as root. Without `CAP_SETPCAP` (an
/// unprivileged processor) there is nothing to drop: such a command never had them.
fn drop_memory_readers() -> std::io::Result<()> {
    for capability in READS_OTHERS_MEMORY {
        // SAFETY: prctl is async-signal-safe and touches only the child's own capability sets.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) } != 0 {
            let error = std::io::Error::last_os_error();
            // EPERM: no CAP_SETPCAP, so the bounding set is not ours to change; an
            // unprivileged child cannot gain the capability either, but root without
            // CAP_SETPCAP might hold it, so a root child is not started. EINVAL: a kernel
            // without this capability (CAP_PERFMON came with Linux 5.8).
            // SAFETY: geteuid is async-signal-safe.
            let root = unsafe { libc::geteuid() } == 0;
            let harmless = match error.raw_os_error() {
                Some(libc::EPERM) => !root,
                Some(libc::EINVAL) => true,
                _ => false,
            };
            if !harmless {
                return Err(error);
            }
        }
    }
    Ok(())
}

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
        .env("SLUICE_PIPELINE_ID", r.pipeline_id.as_str())
        .env("SLUICE_SCHEDULE_ID", r.execution.schedule())
        .env("SLUICE_DATE", r.execution.date_text())
        .env("SLUICE_RUN_ID", r.run_id.as_str())
        .env("SLUICE_ATTEMPT", r.attempt.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        // A group of its own, so that killing it kills all it started too (`sh -c "a; b"`
        // runs `a` as a child of its own).
        .process_group(0);
    // SAFETY: the closure makes one async-signal-safe syscall and allocates nothing on the
    // success path.
    unsafe { shell.pre_exec(drop_memory_readers) };
    Ok(shell)
}

/// Kills the command's process group: the shell and everything it started.
pub fn kill(child: &Child) {
    if let Some(pid) = child.id() {
        // SAFETY: a signal to the group the command leads (see `process_group(0)`).
        unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
    }
}

/// Waits for the command (killing it, with all it started, at the timeout) and says how it
/// ended.
pub async fn wait(call: &Call<'_>, child: Child) -> Outcome {
    let timeout = call.timeout_or(DEFAULT_TIMEOUT);
    let group = child.id();
    // Dropping the child at the timeout kills the shell (`kill_on_drop`); the group goes too.
    let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Err(_) => {
            if let Some(pid) = group {
                // SAFETY: as in [`kill`].
                unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
            }
            return Outcome::timed_out(format!("command timed out after {}s and was killed", timeout.as_secs()));
        }
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

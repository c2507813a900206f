//! What the on-call person should do next about an event: `detail.actionHint`.
//!
//! The earlier design put an `actionHint` into a few events' detail (interlock
//! `internal/lambda/sla/alert.go`, `internal/lambda/watchdog/*.go`) and its dispatcher
//! appended it to alerts (`internal/lambda/alert/format.go`). Sluice derives one for every
//! event where there is something to do, from the event alone, names its own commands, and
//! puts it in the event's detail when the event is made (any consumer of `sluice.events` sees
//! it); `sluice alerts` shows it, deriving it for events written before it was carried.

use serde_json::Value;

use super::events::{Event, EventType};

/// The detail field that carries the hint.
pub const ACTION_HINT: &str = "actionHint";

/// `event` with its hint in `detail.actionHint`, when it has one.
pub fn with_action_hint(mut event: Event) -> Event {
    if let Some(hint) = action_hint(&event) {
        event.detail.entry(ACTION_HINT).or_insert(Value::String(hint));
    }
    event
}

/// The hint `event` carries, or the one derived for it (an event written before hints were
/// carried).
pub fn hint_of(event: &Event) -> Option<String> {
    match event.detail.get(ACTION_HINT).and_then(Value::as_str) {
        Some(hint) => Some(hint.to_string()),
        None => action_hint(event),
    }
}

/// What to check about an SLA_AT_RISK: what the date waits for (and which upstream is late)
/// before its job runs, the job itself once it does.
fn at_risk_hint(event: &Event, status: &str) -> String {
    let list = |name: &str| {
        (event.detail.get(name).and_then(Value::as_array))
            .map(|items| items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
            .filter(|items| !items.is_empty())
    };
    let usual = event
        .detail
        .get("usualTriggerAt")
        .and_then(Value::as_str)
        .unwrap_or("its usual time");
    match event.detail.get("basis").and_then(Value::as_str) {
        Some("running") => {
            "the job is slower than 9 in 10 past runs that got this far: check it in its orchestrator".into()
        }
        _ => match (list("upstreams"), list("waitingFor")) {
            (Some(upstreams), _) => format!(
                "waiting for upstream {upstreams} (it usually starts by {usual}): check why it is late ({status})"
            ),
            (None, Some(keys)) => format!(
                "waiting for {keys} (it usually starts by {usual}): check the producer of that sensor data ({status})"
            ),
            (None, None) => format!("not started yet (it usually starts by {usual}): check its trigger ({status})"),
        },
    }
}

/// `word` as one shell word: as it is when it needs no quoting, else single-quoted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/' | '+'));
    match plain {
        true => word.to_string(),
        false => format!("'{}'", word.replace('\'', r"'\''")),
    }
}

/// `PIPELINE DATE` of `event`'s execution for `sluice rerun|cancel` (the pipeline's own
/// schedule is the one its events name), `DATE` when the event has none.
fn execution_args(event: &Event) -> String {
    let date = event.date.as_deref().map(shell_word);
    format!(
        "{} {}",
        shell_word(&event.pipeline_id),
        date.as_deref().unwrap_or("DATE")
    )
}

/// What the on-call person should do next about `event`, if anything; Slack shows it as
/// `→ hint`. The earlier design put an `actionHint` into a few events' detail (interlock
/// `internal/lambda/sla/alert.go`, `internal/lambda/watchdog/*.go`) and its dispatcher
/// appended it (`internal/lambda/alert/format.go`); here it is derived from the event and
/// names Sluice's commands. Reruns are suggested where `sluice rerun` accepts them: after a
/// failure, exhaustion or stale run, a closed trigger window, or once the run's input
/// sensors changed.
pub fn action_hint(event: &Event) -> Option<String> {
    use EventType::*;
    let text = |name: &str| event.detail.get(name).and_then(Value::as_str);
    let flag = |name: &str| event.detail.get(name).and_then(Value::as_bool);
    let status = format!("`sluice status {}`", shell_word(&event.pipeline_id));
    let execution = execution_args(event);
    let rerun = format!("`sluice rerun {execution}`");
    let date = event.date.as_deref().unwrap_or("the date");
    let hint = match event.kind {
        SLA_WARNING | SLA_BREACH => {
            let breach = event.kind == SLA_BREACH;
            match text("phase") {
                Some("notStarted") if breach => {
                    format!("not started: investigate the trigger — did its sensor arrive? ({status})")
                }
                Some("notStarted") => format!("not started: check the sensor data its trigger waits for ({status})"),
                Some("awaitingRules") => {
                    format!("waiting for its validation rules: check the sensor data they read ({status})")
                }
                Some("awaitingTrigger" | "awaitingJob") if breach => {
                    "the job is still running and will finish late: check it is not stuck in its orchestrator".into()
                }
                Some("awaitingTrigger" | "awaitingJob") => "the job is running and may still finish in time".into(),
                Some("failed" | "validationExhausted" | "stale") => {
                    format!("the run ended without success (see this thread): fix the cause, then rerun: {rerun}")
                }
                Some("skipped") => format!("nothing ran for this date (see this thread); to run it now: {rerun}"),
                _ => format!("see where the run is: {status}"),
            }
        }
        SLA_AT_RISK => at_risk_hint(event, &status),
        VALIDATION_WARNED => "a rule of severity warn failed; the run goes on: check that data before its output is used".into(),
        POST_RUN_WARNED => format!(
            "the run's output passed its post-run checks but a rule of severity warn failed: check the data; if it needs fixing, rerun: {rerun}"
        ),
        SENSOR_FLAPPING => {
            let sensor = text("key").unwrap_or("the sensor");
            let held = match event.detail.get("holdForSeconds").and_then(Value::as_i64) {
                Some(s) => format!("; the trigger waits until it keeps still for {s} s"),
                None => String::new(),
            };
            format!(
                "{sensor} keeps changing between passing and failing: check its producer for two writers or a value hovering at the rule's threshold{held}"
            )
        }
        UNKNOWN_SENSOR => {
            let sensor = text("key").unwrap_or("this key");
            match text("didYouMean") {
                Some(meant) => format!(
                    "nothing reads {sensor}: if it is a misspelling of {meant}, fix the producer's key (or the rule's)"
                ),
                None => format!(
                    "nothing reads {sensor}: a producer publishing for the wrong pipeline, or a rule that should read it; list it in `anomalies.expectedSensors` (`*` matches any run of characters), or `anomalies.unknownSensors: false` silences this"
                ),
            }
        }
        STALE_SENSOR_WARNING => {
            let sensor = text("key").unwrap_or("a sensor");
            let usual = event.detail.get("usualIntervalSeconds").and_then(Value::as_f64).unwrap_or(0.0);
            let closes = text("windowClosesAt").unwrap_or("its end");
            format!(
                "{sensor} usually arrives every {usual} s and has gone quiet: check its producer before the evaluation window closes at {closes} ({status})"
            )
        }
        EVALUATION_SLA_WARNING | EVALUATION_SLA_BREACH => {
            format!("not ready yet: check the sensor data its validation rules wait for ({status})")
        }
        RELATIVE_SLA_WARNING => {
            format!("close to maxDuration since its first sensor: check the run is progressing ({status})")
        }
        RELATIVE_SLA_BREACH => format!(
            "past maxDuration since its first sensor arrived: find what holds it, failing rules or a slow job ({status})"
        ),
        SCHEDULE_MISSED if flag("started") == Some(true) => {
            "started late, now: check why Sluice was not running when it was due".into()
        }
        SCHEDULE_MISSED => format!(
            "nothing started {date}: check the upstream that publishes the trigger sensor; the run starts when it arrives"
        ),
        IRREGULAR_SCHEDULE_MISSED => format!(
            "inclusion date {date} has no trigger: check the upstream that publishes the trigger sensor; the run starts when it arrives"
        ),
        SENSOR_DEADLINE_EXPIRED => format!(
            "trigger window closed: no sensor starts {date} any more; once its data is ready, rerun: {rerun}"
        ),
        VALIDATION_EXHAUSTED => format!(
            "the validation rules did not pass in the window: check the failing sensors ({status}), then rerun: {rerun}"
        ),
        JOB_FAILED if flag("willRetry") == Some(true) => {
            "Sluice retries it: check the job's logs if the next attempt fails too".into()
        }
        JOB_TIMEOUT if flag("willRetry") == Some(true) => {
            "Sluice retries it: check why the job is slow or stuck if the next attempt times out too".into()
        }
        JOB_FAILED | JOB_TIMEOUT | RETRY_EXHAUSTED => {
            format!("check the job's logs and fix the cause, then rerun: {rerun}")
        }
        JOB_POLL_EXHAUSTED => "no outcome within the poll window: check the job in its orchestrator".into(),
        JOB_STATUS_UNKNOWN if flag("actionNeeded") == Some(true) => {
            "the job system refused Sluice's status check: give Sluice's identity access to the run's status (Glue: glue:GetJobRun) or check the run still exists there; the run is checked again until its poll window closes, and no second copy starts".into()
        }
        JOB_STATUS_UNKNOWN => {
            "nothing to do unless it persists: the job system's status API did not answer; the run is checked again, backing off, and no second copy starts".into()
        }
        INFRA_FAILURE => format!(
            "the job's target could not be reached or refused the call: check it and Sluice's access to it, then rerun: {rerun}"
        ),
        STALE_RUN => format!(
            "no progress, and Sluice no longer watches it: check whether the job still runs in its orchestrator before a rerun: {rerun}"
        ),
        RERUN_REJECTED => {
            let rejection = text("rejection").unwrap_or("see the message");
            let next = if rejection.contains("still in progress") {
                format!(": wait for it to end, or `sluice cancel {execution}` it first")
            } else if rejection.contains("maxManualReruns") {
                ": raise job.maxManualReruns in the config to allow more".into()
            } else if rejection.contains("no sensor data changed") {
                ": publish the corrected sensor data first; the same inputs give the same result".into()
            } else {
                String::new()
            };
            format!("nothing was started — {rejection}{next}")
        }
        POST_RUN_SENSOR_MISSING => {
            let sensors = event
                .detail
                .get("sensors")
                .and_then(Value::as_array)
                .map(|keys| keys.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .filter(|keys| !keys.is_empty())
                .unwrap_or_else(|| "the post-run sensors".into());
            format!("post-run data has not arrived in time, so the run is unchecked: check the upstream that publishes {sensors}")
        }
        POST_RUN_FAILED => format!(
            "the run's output failed its post-run rules: check the data; once its inputs are corrected, rerun: {rerun}"
        ),
        POST_RUN_DRIFT if flag("rerun") == Some(true) => {
            "Sluice reruns it on the changed data: its outcome follows in this thread".into()
        }
        POST_RUN_DRIFT => format!(
            "maxDriftReruns is spent: check the upstream data; {rerun} reruns it if its input sensors changed"
        ),
        POST_RUN_DRIFT_INFLIGHT => "the data moved while the run is in progress: check its result when it ends".into(),
        LATE_DATA_ARRIVAL => format!("to use the new data, rerun: {rerun}"),
        TRIGGER_RECOVERED => {
            "nothing to do: its start was missed, and Sluice started it from the trigger that had arrived".into()
        }
        CONFIG_REJECTED => {
            let kept = match flag("previousConfigKept") {
                Some(true) => "; the previous config stays in force",
                Some(false) => "; the pipeline has no config in force",
                None => "",
            };
            format!("fix the YAML (`sluice config validate DIR`) and publish it again (`sluice config apply DIR`){kept}")
        }
        _ => return None,
    };
    Some(hint)
}

/// Events to try hints (and alerts) on: `gold`'s daily run of 2026-11-21, attempt 2.
#[cfg(test)]
pub(crate) mod samples {
    use chrono::{TimeZone, Utc};
    use serde_json::Value;

    use crate::core::events::{Event, EventType};

    pub(crate) fn event(kind: EventType) -> Event {
        Event {
            event_id: "e1".into(),
            kind,
            category: kind.category(),
            pipeline_id: "gold".into(),
            schedule_id: Some("daily".into()),
            date: Some("2026-11-21".into()),
            run_id: Some("gold.daily.2026-11-21.2".into()),
            attempt: Some(2),
            timestamp: Utc.with_ymd_and_hms(2026, 11, 21, 6, 0, 0).unwrap(),
            message: "past the deadline".into(),
            detail: Default::default(),
        }
    }

    /// [`event`] with `detail`.
    pub(crate) fn with(kind: EventType, detail: Value) -> Event {
        Event {
            detail: detail.as_object().unwrap().clone(),
            ..event(kind)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::samples::{event, with};
    use super::*;

    fn hint(kind: EventType, detail: Value) -> String {
        action_hint(&with(kind, detail)).unwrap_or_default()
    }

    #[test]
    fn a_carried_hint_is_used_as_it_is_and_older_events_get_one_derived() {
        let carried = with(EventType::RETRY_EXHAUSTED, json!({"actionHint": "call the data team"}));
        assert_eq!(hint_of(&carried).as_deref(), Some("call the data team"));
        let older = event(EventType::RETRY_EXHAUSTED);
        assert_eq!(hint_of(&older), action_hint(&older));
        assert!(hint_of(&older).is_some());
        assert_eq!(hint_of(&event(EventType::JOB_COMPLETED)), None);
    }

    #[test]
    fn sla_hints_depend_on_how_far_the_run_got() {
        use EventType::*;
        let not_started = json!({"phase": "notStarted"});
        assert!(hint(SLA_WARNING, not_started.clone()).starts_with("not started: check the sensor data"));
        let breach = hint(SLA_BREACH, not_started);
        assert!(breach.starts_with("not started: investigate the trigger"), "{breach}");
        assert!(breach.contains("`sluice status gold`"), "{breach}");
        assert_eq!(
            hint(SLA_WARNING, json!({"phase": "awaitingJob"})),
            "the job is running and may still finish in time"
        );
        assert!(hint(SLA_BREACH, json!({"phase": "awaitingTrigger"})).contains("finish late"));
        assert!(hint(SLA_WARNING, json!({"phase": "awaitingRules"})).contains("validation rules"));
        assert!(hint(SLA_BREACH, json!({"phase": "failed"})).ends_with("`sluice rerun gold 2026-11-21`"));
        assert!(hint(SLA_BREACH, json!({"phase": "skipped"})).ends_with("`sluice rerun gold 2026-11-21`"));
        assert!(!hint(SLA_WARNING, json!({"phase": "awaitingJob"})).contains("rerun"));
        assert!(hint(RELATIVE_SLA_BREACH, json!({})).contains("maxDuration since its first sensor"));
        assert_eq!(action_hint(&event(SLA_MET)), None);
    }

    #[test]
    fn sla_at_risk_hints_name_the_late_upstream_or_sensor_or_the_job() {
        use EventType::*;
        let usual = "2026-11-21T07:10:00Z";
        let upstream = hint(
            SLA_AT_RISK,
            json!({"basis": "usualTrigger", "usualTriggerAt": usual,
                   "waitingFor": ["upstream:silver", "upstream:bronze"], "upstreams": ["silver", "bronze"]}),
        );
        assert!(
            upstream.starts_with("waiting for upstream silver, bronze"),
            "{upstream}"
        );
        assert!(
            upstream.contains(usual) && upstream.contains("`sluice status gold`"),
            "{upstream}"
        );
        let sensor = hint(
            SLA_AT_RISK,
            json!({"basis": "usualTrigger", "usualTriggerAt": usual, "waitingFor": ["row-count"], "upstreams": []}),
        );
        assert!(
            sensor.starts_with("waiting for row-count") && sensor.contains("producer"),
            "{sensor}"
        );
        let running = hint(
            SLA_AT_RISK,
            json!({"basis": "running", "waitingFor": [], "upstreams": []}),
        );
        assert!(running.contains("orchestrator"), "{running}");
        assert_eq!(action_hint(&event(SLA_RECOVERED)), None);
    }

    #[test]
    fn sensor_anomaly_hints_say_what_to_check() {
        use EventType::*;
        let typo = hint(UNKNOWN_SENSOR, json!({"key": "row_count", "didYouMean": "row-count"}));
        assert!(typo.contains("misspelling of row-count"), "{typo}");
        let phantom = hint(UNKNOWN_SENSOR, json!({"key": "heartbeat", "didYouMean": null}));
        assert!(phantom.contains("anomalies.unknownSensors: false"), "{phantom}");
        let flapping = hint(SENSOR_FLAPPING, json!({"key": "upstream", "holdForSeconds": 600}));
        assert!(
            flapping.starts_with("upstream keeps changing") && flapping.ends_with("600 s"),
            "{flapping}"
        );
        assert!(!hint(SENSOR_FLAPPING, json!({"key": "upstream", "holdForSeconds": null})).contains("waits"));
        let stale = hint(
            STALE_SENSOR_WARNING,
            json!({"key": "row-count", "usualIntervalSeconds": 300.0, "windowClosesAt": "2026-11-22T09:00:00Z"}),
        );
        assert!(
            stale.contains("every 300 s") && stale.contains("2026-11-22T09:00:00Z"),
            "{stale}"
        );
        assert!(hint(VALIDATION_WARNED, json!({})).contains("the run goes on"));
        assert!(hint(POST_RUN_WARNED, json!({})).ends_with("`sluice rerun gold 2026-11-21`"));
    }

    #[test]
    fn hints_give_the_rerun_command_where_a_rerun_is_what_to_do() {
        use EventType::*;
        let rerun = "`sluice rerun gold 2026-11-21`";
        for kind in [
            VALIDATION_EXHAUSTED,
            RETRY_EXHAUSTED,
            INFRA_FAILURE,
            STALE_RUN,
            LATE_DATA_ARRIVAL,
        ] {
            assert!(
                hint(kind, json!({})).contains(rerun),
                "{kind:?}: {}",
                hint(kind, json!({}))
            );
        }
        let failed = hint(JOB_FAILED, json!({"willRetry": false}));
        assert!(failed.contains("job's logs") && failed.contains(rerun), "{failed}");
        let retried = hint(JOB_FAILED, json!({"willRetry": true}));
        assert!(retried.contains("retries") && !retried.contains("rerun"), "{retried}");
        assert_eq!(
            hint(SENSOR_DEADLINE_EXPIRED, json!({})),
            format!(
                "trigger window closed: no sensor starts 2026-11-21 any more; once its data is ready, rerun: {rerun}"
            )
        );
        // A run still to come, or already running: no rerun to suggest.
        let missed = hint(SCHEDULE_MISSED, json!({"expectedDate": "2026-11-21"}));
        assert!(missed.contains("trigger sensor") && !missed.contains(rerun), "{missed}");
        assert!(hint(SCHEDULE_MISSED, json!({"started": true})).starts_with("started late"));
        assert!(hint(IRREGULAR_SCHEDULE_MISSED, json!({})).contains("inclusion date 2026-11-21"));
        assert!(hint(POST_RUN_DRIFT, json!({"rerun": true})).contains("Sluice reruns it"));
        assert!(hint(POST_RUN_DRIFT, json!({"rerun": false})).contains(rerun));
        assert!(hint(POST_RUN_SENSOR_MISSING, json!({"sensors": ["audit"]})).ends_with("publishes audit"));
        assert!(hint(TRIGGER_RECOVERED, json!({})).starts_with("nothing to do"));
        // An hourly execution, and ids that need quoting for a shell.
        let hourly = Event {
            date: Some("2026-11-21T05".into()),
            pipeline_id: "it's".into(),
            ..event(LATE_DATA_ARRIVAL)
        };
        assert_eq!(
            action_hint(&hourly).unwrap(),
            r"to use the new data, rerun: `sluice rerun 'it'\''s' 2026-11-21T05`"
        );
    }

    #[test]
    fn a_rejected_rerun_says_why_and_what_next() {
        use EventType::*;
        let busy = hint(
            RERUN_REJECTED,
            json!({"rejection": "execution daily/2026-11-21 is still in progress (awaitingJob)"}),
        );
        assert!(
            busy.contains("still in progress") && busy.contains("`sluice cancel gold 2026-11-21`"),
            "{busy}"
        );
        let spent = hint(
            RERUN_REJECTED,
            json!({"rejection": "maxManualReruns (3) is spent for daily/2026-11-21"}),
        );
        assert!(
            spent.ends_with("raise job.maxManualReruns in the config to allow more"),
            "{spent}"
        );
        let same = hint(
            RERUN_REJECTED,
            json!({"rejection": "no sensor data changed since daily/2026-11-21 completed"}),
        );
        assert!(same.contains("publish the corrected sensor data"), "{same}");
        assert_eq!(
            hint(
                RERUN_REJECTED,
                json!({"rejection": "no execution daily/2026-11-21 to rerun"})
            ),
            "nothing was started — no execution daily/2026-11-21 to rerun"
        );
    }
}

//! The earlier AWS variant's trait format (interlock before a38a018, and the AWS example's
//! `pipelines/*.yaml` and `archetypes/*.yaml` that its seed registered), read as Sluice
//! pipelines by `config validate` and `apply`, so the processor only sees its own form.
//!
//! - An archetype with `requiredTraits` / `optionalTraits` / `readinessRule` names the checks
//!   a pipeline must pass, each a trait with defaults (`defaultConfig`, `defaultTtl`,
//!   `defaultTimeout`). A trait becomes a validation rule on the sensor key of its type:
//!   `status` equals `PASS` (what the variant's evaluators answered), `severity: warn` for an
//!   optional one. `all-required-pass` is `ALL`; `majority-pass` is `MAJORITY` (or `ALL` /
//!   `ANY` for a threshold of every trait / one).
//! - A pipeline (`id` or `name`, `archetype`, `traits`, `trigger`, `schedules`, `sla`,
//!   `exclusions`, `retry`) gets its traits resolved as the variant's `ResolveTraits` did:
//!   every required trait, an optional one only when the pipeline configures it, the
//!   pipeline's evaluator, config keys, ttl and timeout over the archetype's. Each trait's
//!   evaluator is asked with the variant's input, `{pipelineId, traitType, config}`: POSTed
//!   to a URL (a relative path joins `${EVALUATOR_BASE_URL}`, the variant's environment
//!   variable, given to `config apply --var`), or on the stdin of a file path.
//! - A pipeline in Sluice's form naming such an archetype must have a rule for each required
//!   trait: the gate holds or the config is refused.
//!
//! This is file handling, so it lives outside [`crate::core`].

use serde_json::{json, Map, Value};

use crate::core::config::Problem;

/// The fields of an archetype that make it one of the trait form.
const ARCHETYPE_FIELDS: [&str; 3] = ["requiredTraits", "optionalTraits", "readinessRule"];

/// The fields of a trait-format pipeline that Sluice reads; the rest it names as unread.
const PIPELINE_FIELDS: [&str; 10] = [
    "id",
    "name",
    "description",
    "archetype",
    "traits",
    "trigger",
    "schedules",
    "sla",
    "exclusions",
    "retry",
];

/// The variant's fields with no counterpart here: said, not silently dropped.
const UNREAD: [(&str, &str); 4] = [
    ("tier", "a label the variant did not act on"),
    ("watch", "Sluice evaluates on its own timers (schedule.evaluation)"),
    ("cascade", "downstream notices are dependsOn, published at once"),
    ("quarantine", "not carried over"),
];

/// The seed's schedules for a pipeline file that names none: 24 hourly windows, each from
/// HH:10 to HH:50 UTC (interlock-aws-example `cmd/seed`).
const SEED_MINUTE: u32 = 10;
const SEED_WINDOW_MINUTES: u32 = 40;

/// Whether an archetype file is in the trait form.
pub fn is_trait_archetype(archetype: &Value) -> bool {
    ARCHETYPE_FIELDS.iter().any(|k| archetype.get(k).is_some())
}

/// Whether a pipeline file is in the trait form: no `pipeline` section, and the variant's
/// identity or traits.
pub fn is_trait_pipeline(pipeline: &Value) -> bool {
    pipeline.get("pipeline").is_none() && ["id", "name", "traits"].iter().any(|k| pipeline.get(k).is_some())
}

/// One trait as an archetype defines it or a pipeline configures it.
#[derive(Debug, Clone, Default)]
struct Trait {
    kind: String,
    evaluator: Option<String>,
    config: Map<String, Value>,
    ttl: Option<u64>,
    timeout: Option<u64>,
}

/// A trait archetype, checked as the variant's `ValidateArchetype` did.
#[derive(Debug)]
struct TraitArchetype {
    required: Vec<Trait>,
    optional: Vec<Trait>,
    /// `majority-pass`, with its threshold when one is given; `None`: `all-required-pass`.
    majority: Option<Option<u64>>,
}

/// Why a trait archetype cannot be used, if it cannot.
pub fn check_archetype(archetype: &Value) -> Result<(), String> {
    read_archetype(archetype).map(|_| ())
}

fn read_archetype(archetype: &Value) -> Result<TraitArchetype, String> {
    let list = |field: &str| -> Result<Vec<Trait>, String> {
        match archetype.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| read_trait(item, true).map_err(|e| format!("{field}[{i}]: {e}")))
                .collect(),
            Some(_) => Err(format!("{field}: must be a list of traits")),
        }
    };
    let required = list("requiredTraits")?;
    let optional = list("optionalTraits")?;
    if required.is_empty() {
        return Err("requiredTraits: at least one required trait is needed".into());
    }
    let mut seen = Vec::new();
    for t in required.iter().chain(&optional) {
        if seen.contains(&&t.kind) {
            return Err(format!("trait {:?} is defined twice", t.kind));
        }
        seen.push(&t.kind);
    }
    let rule = archetype.get("readinessRule").and_then(Value::as_object);
    let majority = match rule.and_then(|r| r.get("type")).and_then(Value::as_str) {
        Some("all-required-pass") => None,
        Some("majority-pass") => {
            let threshold = rule.and_then(|r| r.get("parameters")).and_then(|p| p.get("threshold"));
            match threshold {
                None | Some(Value::Null) => Some(None),
                Some(t) => Some(Some(
                    t.as_u64()
                        .ok_or("readinessRule.parameters.threshold: must be a whole number")?,
                )),
            }
        }
        Some(other) => {
            return Err(format!(
                "readinessRule.type: unsupported readiness rule {other:?} (all-required-pass, majority-pass)"
            ))
        }
        None => return Err("readinessRule.type: is required (all-required-pass or majority-pass)".into()),
    };
    Ok(TraitArchetype {
        required,
        optional,
        majority,
    })
}

/// A trait: an archetype's definition (`defaults`: `defaultConfig`, `defaultTtl`,
/// `defaultTimeout`) or a pipeline's setting (`evaluator`, `config`, `ttl`, `timeout`).
fn read_trait(item: &Value, defaults: bool) -> Result<Trait, String> {
    let map = item.as_object().ok_or("must be a mapping")?;
    let kind = match map.get("type").and_then(Value::as_str) {
        Some(kind) if !kind.trim().is_empty() => kind.to_string(),
        _ => return Err("type: is required".into()),
    };
    read_setting(kind, map, defaults)
}

fn read_setting(kind: String, map: &Map<String, Value>, defaults: bool) -> Result<Trait, String> {
    let (config, ttl, timeout) = match defaults {
        true => ("defaultConfig", "defaultTtl", "defaultTimeout"),
        false => ("config", "ttl", "timeout"),
    };
    let seconds = |field: &str| match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|s| (s > 0).then_some(s))
            .ok_or_else(|| format!("{field}: must be a whole number of seconds")),
    };
    let config = match map.get(config) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(c)) => c.clone(),
        Some(_) => return Err(format!("{config}: must be a mapping")),
    };
    let evaluator = match map.get("evaluator") {
        None | Some(Value::Null) => None,
        Some(Value::String(e)) if !e.trim().is_empty() => Some(e.trim().to_string()),
        Some(_) => return Err("evaluator: must be a path or URL".into()),
    };
    Ok(Trait {
        kind,
        evaluator,
        config,
        ttl: seconds(ttl)?,
        timeout: seconds(timeout)?,
    })
}

/// The pipeline's own trait settings: a list (`[{type, evaluator, config}]`, the AWS
/// example) or a mapping by type (`{freshness: {evaluator, ...}}`, interlock's own).
fn pipeline_traits(traits: Option<&Value>) -> Result<Vec<Trait>, Problem> {
    let wrong = |reason: String| Problem {
        path: "traits".into(),
        reason,
    };
    match traits {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => (items.iter().enumerate())
            .map(|(i, item)| read_trait(item, false).map_err(|e| wrong(format!("[{i}]: {e}"))))
            .collect(),
        Some(Value::Object(by_type)) => (by_type.iter())
            .map(|(kind, v)| {
                let map = v
                    .as_object()
                    .ok_or_else(|| wrong(format!("{kind}: must be a mapping")))?;
                read_setting(kind.clone(), map, false).map_err(|e| wrong(format!("{kind}: {e}")))
            })
            .collect(),
        Some(_) => Err(wrong("must be a list of traits or a mapping by trait type".into())),
    }
}

/// A trait-format pipeline read as Sluice's: the config, what is worth a warning, and what
/// stops it.
#[derive(Debug, Default)]
pub struct Translated {
    pub config: Value,
    /// The fields the archetype gave (its traits' rules, the readiness rule).
    pub inherited: Vec<String>,
    pub warnings: Vec<Problem>,
    pub problems: Vec<Problem>,
}

impl Translated {
    fn warn(&mut self, path: &str, reason: impl Into<String>) {
        self.warnings.push(Problem {
            path: path.into(),
            reason: reason.into(),
        });
    }

    fn problem(&mut self, path: &str, reason: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            reason: reason.into(),
        });
    }
}

/// Reads the trait-format pipeline `raw`; `archetype` is the archetype it names (its name and
/// file), when it names one.
pub fn translate(raw: &Value, archetype: Option<(&str, &Value)>) -> Translated {
    let mut out = Translated::default();
    let Some(map) = raw.as_object() else {
        out.problem("", "must be a mapping");
        return out;
    };
    for key in map.keys().filter(|k| !PIPELINE_FIELDS.contains(&k.as_str())) {
        match UNREAD.iter().find(|(k, _)| k == key) {
            Some((_, why)) => out.warn(key, format!("is not read: {why}")),
            None => out.warn(key, "unknown field of the trait format: not read"),
        }
    }
    let text = |k: &str| map.get(k).and_then(Value::as_str).map(str::to_string);
    let (id, name, description) = (text("id"), text("name"), text("description"));
    let Some(pipeline_id) = id.clone().or(name.clone()) else {
        out.problem("id", "is required (the pipeline's `id`, or its `name`)");
        return out;
    };
    let description = description.or(name.filter(|n| id.is_some() && *n != pipeline_id));
    let mut config = json!({"pipeline": {"id": pipeline_id}});
    if let Some(description) = description {
        config["pipeline"]["description"] = json!(description);
    }
    let own = match pipeline_traits(map.get("traits")) {
        Ok(own) => own,
        Err(problem) => {
            out.problems.push(problem);
            return out;
        }
    };
    let (traits, majority) = match archetype {
        Some((name, archetype)) => match read_archetype(archetype) {
            Ok(archetype) => {
                config["archetype"] = json!({"name": name});
                out.inherited.push("validation.trigger".into());
                (resolve(&archetype, &own, name, &mut out), archetype.majority)
            }
            Err(reason) => {
                out.problem("archetype", format!("archetype {name:?}: {reason}"));
                return out;
            }
        },
        // Without an archetype, every trait the pipeline configures is one it must pass.
        None => (own.into_iter().map(|t| (t, true)).collect(), None),
    };
    let required = traits.iter().filter(|(_, required)| *required).count() as u64;
    config["validation"] = json!({"trigger": mode(majority, required, &mut out), "rules": []});
    if archetype.is_some() {
        (out.inherited).extend(traits.iter().map(|(t, _)| format!("validation.rules[{}]", t.kind)));
    }
    for (t, required) in &traits {
        match rule(t, *required) {
            Ok(rule) => config["validation"]["rules"].as_array_mut().unwrap().push(rule),
            Err(reason) => out.problem(&format!("traits.{}", t.kind), reason),
        }
    }
    match schedule(map.get("schedules"), &mut out) {
        Some(schedule) => config["schedule"] = schedule,
        None => return out,
    }
    match job(map.get("trigger"), map.get("retry"), &mut out) {
        Some(job) => config["job"] = job,
        None => return out,
    }
    for field in ["sla", "exclusions"] {
        if let Some(v) = map.get(field).filter(|v| !v.is_null()) {
            config[field] = v.clone();
        }
    }
    out.config = config;
    out
}

/// The traits a pipeline is checked on, as the variant's `ResolveTraits` chose them: every
/// required trait, an optional one the pipeline configures, its settings over the
/// archetype's defaults. `true`: required.
fn resolve(archetype: &TraitArchetype, own: &[Trait], name: &str, out: &mut Translated) -> Vec<(Trait, bool)> {
    let mut traits = Vec::new();
    let with_own = |base: &Trait| {
        let mut t = base.clone();
        if let Some(o) = own.iter().find(|o| o.kind == base.kind) {
            t.evaluator = o.evaluator.clone().or(t.evaluator);
            t.config.extend(o.config.clone());
            t.ttl = o.ttl.or(t.ttl);
            t.timeout = o.timeout.or(t.timeout);
        }
        t
    };
    for base in &archetype.required {
        traits.push((with_own(base), true));
    }
    for base in archetype
        .optional
        .iter()
        .filter(|b| own.iter().any(|o| o.kind == b.kind))
    {
        traits.push((with_own(base), false));
    }
    let defined = |o: &&Trait| {
        archetype
            .required
            .iter()
            .chain(&archetype.optional)
            .any(|b| b.kind == o.kind)
    };
    for o in own.iter().filter(|o| !defined(o)) {
        out.warn(
            &format!("traits.{}", o.kind),
            format!("archetype {name:?} does not define this trait: not checked, as the earlier design ignored it"),
        );
    }
    traits
}

/// `validation.trigger` for the archetype's readiness rule over `required` traits.
fn mode(majority: Option<Option<u64>>, required: u64, out: &mut Translated) -> &'static str {
    match majority {
        None => "ALL",
        Some(None) => "MAJORITY",
        Some(Some(t)) if t >= required => "ALL",
        Some(Some(t)) if t <= 1 => "ANY",
        Some(Some(t)) if t == required.div_ceil(2) => "MAJORITY",
        Some(Some(t)) => {
            out.problem(
                "archetype",
                format!("a majority-pass threshold of {t} of {required} traits has no counterpart (ALL, ANY, or half rounded up: MAJORITY)"),
            );
            "ALL"
        }
    }
}

/// A trait's rule: its evaluator's answer must say `status: PASS`.
fn rule(t: &Trait, required: bool) -> Result<Value, String> {
    let path = t
        .evaluator
        .as_deref()
        .ok_or("has no evaluator: give the trait's `evaluator`")?;
    let input = json!({"pipelineId": "${PIPELINE}", "traitType": t.kind, "config": t.config});
    let mut evaluator = if path.starts_with('/') || path.starts_with("./") || path.starts_with("../") {
        // A file the variant ran with its input on stdin.
        let command = format!("{} <<'INTERLOCK_INPUT'\n{input}\nINTERLOCK_INPUT", quoted(path));
        json!({"type": "command", "command": command})
    } else {
        let url = match path.starts_with("http://") || path.starts_with("https://") {
            true => path.to_string(),
            false => format!("${{EVALUATOR_BASE_URL}}/{}", path.trim_start_matches('/')),
        };
        json!({"type": "http", "method": "POST", "url": url, "body": input.to_string()})
    };
    if let Some(timeout) = t.timeout {
        evaluator["timeout"] = json!(timeout);
    }
    if let Some(ttl) = t.ttl {
        evaluator["ttl"] = json!(format!("{ttl}s"));
    }
    let mut rule =
        json!({"key": t.kind, "check": "equals", "field": "status", "value": "PASS", "evaluator": evaluator});
    if !required {
        rule["severity"] = json!("warn");
    }
    Ok(rule)
}

/// `path` as one word for `sh`.
fn quoted(path: &str) -> String {
    format!("'{}'", path.replace('\'', r"'\''"))
}

/// `schedules` as a cron: one daily window, or 24 hourly windows at one minute; none is the
/// seed's hourly windows.
fn schedule(schedules: Option<&Value>, out: &mut Translated) -> Option<Value> {
    let windows = match schedules {
        None | Some(Value::Null) => {
            out.warn(
                "schedules",
                format!("none given: hourly from HH:{SEED_MINUTE:02} to HH:{:02} UTC, the windows the earlier variant's seed registered every pipeline with", SEED_MINUTE + SEED_WINDOW_MINUTES),
            );
            return Some(hourly(SEED_MINUTE, SEED_WINDOW_MINUTES, "UTC"));
        }
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(_) => {
            out.problem("schedules", "must be a list of {name, after, deadline, timezone}");
            return None;
        }
    };
    let mut parsed = Vec::new();
    for (i, w) in windows.iter().enumerate() {
        let clock = |field: &str| {
            let text = w.get(field).and_then(Value::as_str)?;
            let (h, m) = text.split_once(':')?;
            Some((
                h.parse::<u32>().ok().filter(|h| *h < 24)?,
                m.parse::<u32>().ok().filter(|m| *m < 60)?,
            ))
        };
        let Some(after) = clock("after") else {
            out.problem(
                &format!("schedules[{i}].after"),
                "must be HH:MM (when the window opens)",
            );
            return None;
        };
        let zone = w.get("timezone").and_then(Value::as_str).unwrap_or("UTC").to_string();
        parsed.push((after, clock("deadline"), zone));
    }
    // Minutes from `after` to `deadline` (the next day's, if earlier).
    let span = |(ah, am): (u32, u32), deadline: Option<(u32, u32)>| {
        deadline.map(|(dh, dm)| ((dh * 60 + dm) + 24 * 60 - (ah * 60 + am)) % (24 * 60))
    };
    let ((hour, minute), deadline, zone) = parsed[0].clone();
    if parsed.len() == 1 {
        let mut schedule = json!({"cron": format!("{minute} {hour} * * *"), "timezone": zone});
        if let Some(window) = span((hour, minute), deadline).filter(|m| *m > 0) {
            schedule["evaluation"] = json!({"window": format!("{window}m")});
        }
        return Some(schedule);
    }
    let window = span((hour, minute), deadline);
    let hourly_windows = parsed.len() == 24
        && (parsed.iter().zip(0..24))
            .all(|(((ah, am), d, z), h)| *ah == h && *am == minute && *z == zone && span((*ah, *am), *d) == window);
    if !hourly_windows {
        out.problem(
            "schedules",
            "only one daily window, or 24 hourly windows opening at one minute, read as a cron: write schedule.cron for others",
        );
        return None;
    }
    // Without a deadline, a window lasts until the next one opens.
    Some(hourly(
        minute,
        window.filter(|m| (1..=60).contains(m)).unwrap_or(60),
        &zone,
    ))
}

fn hourly(minute: u32, window: u32, zone: &str) -> Value {
    json!({"cron": format!("{minute} * * * *"), "timezone": zone, "evaluation": {"window": format!("{window}m")}})
}

/// `trigger` as the job: its `type`, and its settings (flat beside `type`, as the AWS example
/// wrote them, or under the type's own key, as interlock's types did). The variant's
/// `${date}` / `${hour}` are the run's `${DATE}` / `${HOUR}`.
fn job(trigger: Option<&Value>, retry: Option<&Value>, out: &mut Translated) -> Option<Value> {
    let Some(trigger) = trigger.and_then(Value::as_object) else {
        out.problem("trigger", "is required: the job to start ({type: glue, jobName: ...})");
        return None;
    };
    let Some(kind) = trigger.get("type").and_then(Value::as_str) else {
        out.problem("trigger.type", "is required");
        return None;
    };
    let mut config = match trigger.get(kind) {
        Some(Value::Object(nested)) => nested.clone(),
        _ => trigger.clone(),
    };
    config.remove("type");
    if config.remove("pollInterval").is_some() {
        out.warn(
            "trigger.pollInterval",
            "is not read: status checks use job.pollInterval",
        );
    }
    let mut config = Value::Object(config);
    if run_variables(&mut config) {
        out.warn(
            "trigger",
            "`${date}` and `${hour}` are read as the run's `${DATE}` and `${HOUR}`",
        );
    }
    let mut job = json!({"type": kind, "config": config});
    if let Some(attempts) = retry.and_then(|r| r.get("maxAttempts")).and_then(Value::as_u64) {
        job["maxRetries"] = json!(attempts.saturating_sub(1));
        out.warn(
            "retry",
            format!(
                "maxAttempts {attempts} is read as job.maxRetries {}; backoff follows job.triggerRetry",
                attempts.saturating_sub(1)
            ),
        );
    }
    Some(job)
}

/// Replaces `${date}` / `${hour}` in every string of `value`; whether any was.
fn run_variables(value: &mut Value) -> bool {
    match value {
        Value::String(s) if s.contains("${date}") || s.contains("${hour}") => {
            *s = s.replace("${date}", "${DATE}").replace("${hour}", "${HOUR}");
            true
        }
        Value::Array(items) => items.iter_mut().fold(false, |any, v| run_variables(v) | any),
        Value::Object(map) => map.values_mut().fold(false, |any, v| run_variables(v) | any),
        _ => false,
    }
}

/// A pipeline in Sluice's form that names the trait archetype `name`: each required trait
/// must be one of its rules (by sensor key), and the readiness rule is its
/// `validation.trigger` unless it sets one. Returns the fields the archetype gave.
pub fn gate(pipeline: &mut Value, name: &str, archetype: &Value) -> Result<Vec<String>, Problem> {
    let problem = |reason: String| Problem {
        path: "archetype".into(),
        reason,
    };
    let archetype = read_archetype(archetype).map_err(|e| problem(format!("archetype {name:?}: {e}")))?;
    let rules = pipeline.pointer("/validation/rules").and_then(Value::as_array);
    let has_rule =
        |kind: &str| rules.is_some_and(|r| r.iter().any(|r| r.get("key").and_then(Value::as_str) == Some(kind)));
    let missing: Vec<&str> = (archetype.required.iter())
        .map(|t| t.kind.as_str())
        .filter(|k| !has_rule(k))
        .collect();
    if !missing.is_empty() {
        return Err(problem(format!(
            "archetype {name:?} requires the traits {}: give a validation rule (with its evaluator) for each of these keys",
            missing.join(", ")
        )));
    }
    let mut inherited = Vec::new();
    if pipeline.pointer("/validation/trigger").is_none_or(Value::is_null) {
        let mut out = Translated::default();
        let trigger = mode(archetype.majority, archetype.required.len() as u64, &mut out);
        if let Some(p) = out.problems.pop() {
            return Err(p);
        }
        if !pipeline.get("validation").is_some_and(Value::is_object) {
            pipeline["validation"] = json!({});
        }
        pipeline["validation"]["trigger"] = json!(trigger);
        inherited.push("validation.trigger".to_string());
    }
    pipeline["archetype"] = json!({"name": name});
    Ok(inherited)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{self, Mode, Variables};

    fn yaml(text: &str) -> Value {
        config::yaml_to_json(text).unwrap()
    }

    /// interlock-aws-example's `archetypes/gold-etl.yaml`, with an optional trait added.
    const GOLD_ETL: &str = r#"
name: gold-etl
requiredTraits:
  - type: upstream-dependency
    defaultConfig: {tableName: "${TABLE_NAME}"}
    defaultTimeout: 30
    defaultTtl: 300
  - type: record-count
    defaultConfig: {bucket: "${BUCKET_NAME}", prefix: "silver/${SOURCE}/", minObjects: 1}
    defaultTimeout: 30
    defaultTtl: 300
optionalTraits:
  - type: schema-contract
readinessRule: {type: all-required-pass}
"#;

    /// Its `pipelines/openmeteo-gold.yaml`, as the seed read it.
    const OPENMETEO_GOLD: &str = r#"
id: openmeteo-gold
name: Open-Meteo Gold ETL
archetype: gold-etl
tier: 2
traits:
  - type: upstream-dependency
    evaluator: evaluate/upstream-dependency
    config: {upstreamPipeline: openmeteo-silver}
  - type: record-count
    evaluator: https://eval.example/record-count
    config: {prefix: "silver/openmeteo/", dateOnly: true}
    ttl: 60
trigger:
  type: glue
  jobName: medallion-gold-openmeteo
  arguments: {"--date": "${date}", "--hour": "${hour}"}
sla: {evaluationDeadline: "+40m", timezone: UTC}
"#;

    fn rule<'a>(config: &'a Value, key: &str) -> &'a Value {
        (config["validation"]["rules"].as_array().unwrap().iter())
            .find(|r| r["key"] == json!(key))
            .unwrap_or(&Value::Null)
    }

    #[test]
    fn the_aws_variants_pipelines_load_with_their_archetypes_required_traits_as_rules() {
        let archetype = yaml(GOLD_ETL);
        check_archetype(&archetype).unwrap();
        let out = translate(&yaml(OPENMETEO_GOLD), Some(("gold-etl", &archetype)));
        assert!(out.problems.is_empty(), "{:?}", out.problems);
        let c = &out.config;
        assert_eq!(
            c["pipeline"],
            json!({"id": "openmeteo-gold", "description": "Open-Meteo Gold ETL"})
        );
        assert_eq!(c["validation"]["trigger"], json!("ALL"));
        // Both required traits, each its evaluator's `status: PASS`; the optional one the
        // pipeline does not configure is not checked.
        assert_eq!(c["validation"]["rules"].as_array().unwrap().len(), 2);
        let upstream = rule(c, "upstream-dependency");
        assert_eq!(
            (&upstream["field"], &upstream["value"]),
            (&json!("status"), &json!("PASS"))
        );
        let evaluator = &upstream["evaluator"];
        assert_eq!(
            evaluator["url"],
            json!("${EVALUATOR_BASE_URL}/evaluate/upstream-dependency")
        );
        assert_eq!((&evaluator["timeout"], &evaluator["ttl"]), (&json!(30), &json!("300s")));
        // The variant's input, the pipeline's config keys over the archetype's.
        let input: Value = serde_json::from_str(evaluator["body"].as_str().unwrap()).unwrap();
        assert_eq!(
            input,
            json!({"pipelineId": "${PIPELINE}", "traitType": "upstream-dependency",
                   "config": {"tableName": "${TABLE_NAME}", "upstreamPipeline": "openmeteo-silver"}})
        );
        let count = &rule(c, "record-count")["evaluator"];
        assert_eq!(
            (&count["url"], &count["ttl"]),
            (&json!("https://eval.example/record-count"), &json!("60s"))
        );
        let input: Value = serde_json::from_str(count["body"].as_str().unwrap()).unwrap();
        assert_eq!(input["config"]["prefix"], json!("silver/openmeteo/"));
        assert_eq!(input["config"]["bucket"], json!("${BUCKET_NAME}"));
        // The seed's hourly windows, the trigger as the job, the SLA as written.
        assert_eq!(
            c["schedule"],
            json!({"cron": "10 * * * *", "timezone": "UTC", "evaluation": {"window": "40m"}})
        );
        assert_eq!(c["job"]["type"], json!("glue"));
        assert_eq!(c["job"]["config"]["arguments"]["--date"], json!("${DATE}"));
        assert_eq!(c["sla"]["evaluationDeadline"], json!("+40m"));
        assert_eq!(c["archetype"], json!({"name": "gold-etl"}));
        let said: Vec<_> = out.warnings.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(said, ["tier", "schedules", "trigger"]);
        // The processor reads the result (deployment variables left for `apply`).
        let parsed = config::parse(c, Variables::MayBeUnresolved).unwrap();
        assert_eq!(parsed.config.validation.rules.len(), 2);
        assert!(parsed.config.schedule.cron.is_some());
    }

    #[test]
    fn interlocks_own_trait_pipelines_run_their_evaluator_files_and_need_every_required_trait() {
        // interlock's testdata: traits by type, the trigger's settings under its type, and an
        // archetype whose second required trait the pipeline gives no evaluator.
        let archetype = yaml(
            "name: test-archetype\nrequiredTraits:\n  - {type: freshness, defaultConfig: {maxLagSeconds: 60}, defaultTtl: 120, defaultTimeout: 10}\n  - {type: availability, defaultTtl: 60}\noptionalTraits:\n  - {type: quality}\nreadinessRule: {type: all-required-pass}\n",
        );
        let pipeline = yaml(
            "name: test-pipeline\narchetype: test-archetype\ntraits:\n  freshness: {evaluator: ./evaluators/pass, config: {maxLagSeconds: 30}, timeout: 5}\n  quality: {evaluator: /opt/it's/quality}\nschedules: [{name: daily, after: '06:30', deadline: '08:00', timezone: Europe/Berlin}]\ntrigger: {type: command, command: {command: echo test-complete}}\n",
        );
        let out = translate(&pipeline, Some(("test-archetype", &archetype)));
        let problems: Vec<String> = out.problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            problems,
            ["traits.availability: has no evaluator: give the trait's `evaluator`"]
        );
        let c = &out.config;
        assert_eq!(c["pipeline"]["id"], json!("test-pipeline"));
        let command = rule(c, "freshness")["evaluator"]["command"].as_str().unwrap();
        assert!(
            command.starts_with("'./evaluators/pass' <<'INTERLOCK_INPUT'\n{")
                && command.ends_with("}\nINTERLOCK_INPUT"),
            "{command}"
        );
        assert!(command.contains(r#""config":{"maxLagSeconds":30}"#), "{command}");
        let quality = rule(c, "quality");
        assert_eq!(quality["severity"], json!("warn"), "an optional trait decides nothing");
        assert!(quality["evaluator"]["command"]
            .as_str()
            .unwrap()
            .starts_with(r"'/opt/it'\''s/quality'"));
        assert_eq!(
            c["schedule"],
            json!({"cron": "30 6 * * *", "timezone": "Europe/Berlin", "evaluation": {"window": "90m"}})
        );
        assert_eq!(
            c["job"],
            json!({"type": "command", "config": {"command": "echo test-complete"}})
        );
    }

    #[test]
    fn readiness_rules_and_schedules_that_have_a_counterpart_are_read_and_others_refused() {
        let archetype = |rule: &str| {
            yaml(&format!(
                "requiredTraits: [{{type: a}}, {{type: b}}, {{type: c}}]\nreadinessRule: {rule}\n"
            ))
        };
        let pipeline = |schedules: &str| {
            yaml(&format!(
                "id: p\narchetype: x\ntraits: [{{type: a, evaluator: 'http://e/a'}}, {{type: b, evaluator: 'http://e/b'}}, {{type: c, evaluator: 'http://e/c'}}]\ntrigger: {{type: http, url: 'http://t'}}\n{schedules}"
            ))
        };
        for (rule, trigger) in [
            ("{type: majority-pass}", "MAJORITY"),
            ("{type: majority-pass, parameters: {threshold: 2}}", "MAJORITY"),
            ("{type: majority-pass, parameters: {threshold: 3}}", "ALL"),
            ("{type: majority-pass, parameters: {threshold: 1}}", "ANY"),
        ] {
            let out = translate(&pipeline(""), Some(("x", &archetype(rule))));
            assert_eq!(out.config["validation"]["trigger"], json!(trigger), "{rule}");
            let parsed = config::parse(&out.config, Variables::MayBeUnresolved).unwrap();
            assert_eq!(parsed.config.validation.mode == Mode::Majority, trigger == "MAJORITY");
        }
        assert!(check_archetype(&archetype("{type: most-pass}"))
            .unwrap_err()
            .contains("most-pass"));
        assert!(check_archetype(&yaml("requiredTraits: []\nreadinessRule: {type: all-required-pass}")).is_err());
        assert!(check_archetype(&yaml(
            "requiredTraits: [{type: a}, {type: a}]\nreadinessRule: {type: all-required-pass}"
        ))
        .is_err());

        let hours: Vec<String> = (0..24)
            .map(|h| format!("{{name: h{h:02}, after: '{h:02}:05', deadline: '{h:02}:35'}}"))
            .collect();
        let all = archetype("{type: all-required-pass}");
        let out = translate(
            &pipeline(&format!("schedules: [{}]\n", hours.join(", "))),
            Some(("x", &all)),
        );
        assert_eq!(out.config["schedule"]["cron"], json!("5 * * * *"));
        assert_eq!(out.config["schedule"]["evaluation"]["window"], json!("30m"));
        let two = "schedules: [{name: am, after: '06:00'}, {name: pm, after: '18:00'}]\n";
        let out = translate(&pipeline(two), Some(("x", &all)));
        assert_eq!(out.problems[0].path, "schedules", "{:?}", out.problems);
    }

    #[test]
    fn a_sluice_pipeline_naming_a_trait_archetype_must_rule_on_every_required_trait() {
        let archetype = yaml(GOLD_ETL);
        let mut pipeline = json!({"pipeline": {"id": "p"}, "archetype": "gold-etl",
            "validation": {"rules": [{"key": "record-count", "check": "equals", "field": "status", "value": "PASS"}]}});
        let problem = gate(&mut pipeline.clone(), "gold-etl", &archetype).unwrap_err();
        assert!(
            problem.reason.contains("requires the traits upstream-dependency:"),
            "{problem}"
        );
        pipeline["validation"]["rules"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "upstream-dependency", "check": "exists"}));
        assert_eq!(
            gate(&mut pipeline, "gold-etl", &archetype).unwrap(),
            ["validation.trigger"]
        );
        assert_eq!(pipeline["validation"]["trigger"], json!("ALL"));
        assert_eq!(pipeline["archetype"], json!({"name": "gold-etl"}));
    }
}

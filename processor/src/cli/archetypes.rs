//! Archetypes: shared defaults for pipelines (`archetype: NAME` in a pipeline file), from
//! `archetypes/NAME.yaml`, merged in by `config validate` and `config apply` as calendars
//! are resolved, so the processor only ever sees whole configs.
//!
//! An archetype file is a partial pipeline config (any field but `pipeline` and
//! `archetype`): its rules, SLA, job retry settings and so on. The pipeline's own fields
//! win: mappings merge field by field, any other value is the pipeline's when it has one,
//! and rules (`validation.rules`, `postRun.rules`) merge by sensor key: the archetype's
//! rules for a key the pipeline has no rule for are kept (as the earlier AWS variant's
//! required traits), the pipeline's rules for a key replace them. After the merge
//! `archetype: NAME` becomes `archetype: {name: NAME}`, which the processor accepts (a bare
//! name it refuses: nothing merged it).
//!
//! This is file I/O, so it lives outside [`crate::core`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::traits;
use crate::core::config::{self, Problem};

/// The rule lists that merge by sensor key.
const RULE_LISTS: [&str; 2] = ["/validation/rules", "/postRun/rules"];

/// The archetypes of a folder, by name (the file name without `.yaml`/`.yml`).
#[derive(Debug, Default)]
pub struct Archetypes {
    by_name: BTreeMap<String, Value>,
}

/// What merging an archetype did to one pipeline: its name, and the field paths whose
/// value came from it (what `config validate --explain` shows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    pub archetype: String,
    pub inherited: Vec<String>,
}

impl Archetypes {
    /// Loads every `*.yaml`/`*.yml` of `dir`; every file's problem is reported, as
    /// `file: reason`.
    pub fn load_dir(dir: &Path) -> Result<Archetypes, Vec<String>> {
        let mut errors = Vec::new();
        let mut archetypes = Archetypes::default();
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => return Err(vec![format!("archetypes folder {}: {e}", dir.display())]),
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        files.sort();
        for file in files {
            let stem = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let value = match read(&file) {
                Ok(value) => value,
                Err(reason) => {
                    errors.push(format!("{}: {reason}", file.display()));
                    continue;
                }
            };
            // A trait archetype is known by its `name`, as the earlier variant registered it.
            let name = match traits::is_trait_archetype(&value) {
                true => value.get("name").and_then(Value::as_str).map_or(stem, str::to_string),
                false => stem,
            };
            match archetypes.by_name.entry(name) {
                std::collections::btree_map::Entry::Occupied(taken) => {
                    errors.push(format!(
                        "{}: archetype {:?} is defined twice",
                        file.display(),
                        taken.key()
                    ));
                }
                std::collections::btree_map::Entry::Vacant(free) => {
                    free.insert(value);
                }
            }
        }
        match errors.is_empty() {
            true => Ok(archetypes),
            false => Err(errors),
        }
    }

    pub fn names(&self) -> Vec<&str> {
        self.by_name.keys().map(String::as_str).collect()
    }

    /// The archetype file called `name`.
    pub fn get(&self, name: &str) -> Result<&Value, Problem> {
        self.by_name.get(name).ok_or_else(|| {
            let known = match self.by_name.is_empty() {
                true => "none".to_string(),
                false => self.names().join(", "),
            };
            problem(format!("unknown archetype {name:?} (known: {known})"))
        })
    }

    /// Merges the archetype `json` names into it; `Ok(None)` when it names none. A problem
    /// is about the `archetype` field.
    pub fn resolve(&self, json: &mut Value) -> Result<Option<Merged>, Problem> {
        let Some(name) = named(json) else {
            return Ok(None);
        };
        let archetype = self.get(&name)?;
        if traits::is_trait_archetype(archetype) {
            let inherited = traits::gate(json, &name, archetype)?;
            return Ok(Some(Merged {
                archetype: name,
                inherited,
            }));
        }
        let mut inherited = Vec::new();
        let mut merged = merge(archetype, json, "", &mut inherited);
        merged["archetype"] = json!({"name": name});
        *json = merged;
        Ok(Some(Merged {
            archetype: name,
            inherited,
        }))
    }
}

/// The archetype a pipeline config names with `archetype: NAME` (not yet merged).
pub fn named(json: &Value) -> Option<String> {
    json.get("archetype").and_then(Value::as_str).map(str::to_string)
}

fn problem(reason: String) -> Problem {
    Problem {
        path: "archetype".into(),
        reason,
    }
}

/// An archetype file: a mapping of pipeline fields, without `pipeline` or `archetype`.
fn read(file: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let value = config::yaml_to_json(&text).map_err(|p| p.reason)?;
    let Some(map) = value.as_object() else {
        return Err("must be a mapping of pipeline fields".into());
    };
    if traits::is_trait_archetype(&value) {
        traits::check_archetype(&value)?;
        return Ok(value);
    }
    for field in ["pipeline", "archetype"] {
        if map.contains_key(field) {
            return Err(format!(
                "{field}: an archetype cannot set it (each pipeline names its own)"
            ));
        }
    }
    Ok(value)
}

/// `over` merged onto `base` (the pipeline's onto the archetype's); `inherited` gets the
/// paths whose value came from `base`.
fn merge(base: &Value, over: &Value, path: &str, inherited: &mut Vec<String>) -> Value {
    match (base, over) {
        (Value::Object(base), Value::Object(over)) => {
            let mut out = Map::new();
            for (k, b) in base {
                let at = format!("{path}/{k}");
                match over.get(k) {
                    Some(o) if !o.is_null() => {
                        out.insert(k.clone(), merge(b, o, &at, inherited));
                    }
                    _ => {
                        inherited.push(dotted(&at));
                        out.insert(k.clone(), b.clone());
                    }
                }
            }
            for (k, o) in over {
                if !base.contains_key(k) {
                    out.insert(k.clone(), o.clone());
                }
            }
            Value::Object(out)
        }
        (Value::Array(base), Value::Array(over)) if RULE_LISTS.contains(&path) => {
            let key = |rule: &Value| rule.get("key").cloned();
            let own: Vec<Option<Value>> = over.iter().map(key).collect();
            let mut out = Vec::new();
            for rule in base.iter().filter(|r| !own.contains(&key(r))) {
                let label = key(rule)
                    .and_then(|k| k.as_str().map(str::to_string))
                    .unwrap_or_default();
                inherited.push(format!("{}[{label}]", dotted(path)));
                out.push(rule.clone());
            }
            out.extend(over.iter().cloned());
            Value::Array(out)
        }
        (_, over) => over.clone(),
    }
}

/// `/validation/rules` as `validation.rules`.
fn dotted(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archetypes(files: &[(&str, &str)]) -> (tempfile::TempDir, Result<Archetypes, Vec<String>>) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let loaded = Archetypes::load_dir(dir.path());
        (dir, loaded)
    }

    const BATCH: &str = "
sla: {deadline: '06:00', expectedDuration: 30m}
validation:
  trigger: ALL
  rules:
    - {key: upstream, check: equals, field: status, value: ready}
    - {key: row-count, check: gte, field: count, value: 1000}
job: {maxRetries: 2, type: command, config: {command: 'true'}}
";

    #[test]
    fn the_pipelines_fields_win_and_rules_merge_by_sensor_key() {
        let (_dir, loaded) = archetypes(&[("daily-batch.yaml", BATCH)]);
        let archetypes = loaded.unwrap();
        let mut pipeline = json!({
            "pipeline": {"id": "gold"},
            "archetype": "daily-batch",
            "sla": {"deadline": "07:00"},
            "validation": {"rules": [{"key": "row-count", "check": "gte", "field": "count", "value": 5}]},
            "job": {"type": "http", "config": {"url": "http://x"}}
        });
        let merged = archetypes.resolve(&mut pipeline).unwrap().unwrap();
        assert_eq!(pipeline["sla"], json!({"deadline": "07:00", "expectedDuration": "30m"}));
        let rules = pipeline["validation"]["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(
            rules[0]["key"],
            json!("upstream"),
            "the archetype's rule for another key is kept"
        );
        assert_eq!(
            rules[1]["value"],
            json!(5),
            "the pipeline's rule for row-count replaces the archetype's"
        );
        assert_eq!(pipeline["job"]["maxRetries"], json!(2));
        assert_eq!(pipeline["job"]["type"], json!("http"));
        assert_eq!(pipeline["job"]["config"], json!({"command": "true", "url": "http://x"}));
        assert_eq!(pipeline["archetype"], json!({"name": "daily-batch"}));
        assert_eq!(
            merged.inherited,
            [
                "job.config.command",
                "job.maxRetries",
                "sla.expectedDuration",
                "validation.rules[upstream]",
                "validation.trigger"
            ]
        );
        // Merged already: nothing more to do.
        assert_eq!(archetypes.resolve(&mut pipeline).unwrap(), None);
    }

    #[test]
    fn an_unknown_archetype_or_a_bad_file_is_named() {
        let (_dir, loaded) = archetypes(&[("a.yaml", BATCH)]);
        let mut pipeline = json!({"pipeline": {"id": "gold"}, "archetype": "b"});
        let problem = loaded.unwrap().resolve(&mut pipeline).unwrap_err();
        assert_eq!(problem.path, "archetype");
        assert_eq!(problem.reason, "unknown archetype \"b\" (known: a)");
        let (_dir, loaded) = archetypes(&[("a.yaml", "pipeline: {id: x}"), ("b.yml", "[1]"), ("c.yaml", "{")]);
        let errors = loaded.unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].ends_with("a.yaml: pipeline: an archetype cannot set it (each pipeline names its own)"));
        assert!(errors[1].ends_with("b.yml: must be a mapping of pipeline fields"));
        assert!(errors[2].contains("c.yaml: not valid YAML"));
    }
}

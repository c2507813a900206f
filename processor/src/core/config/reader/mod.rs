//! Turns a pipeline config's JSON (or YAML) into the model, collecting every problem.
//!
//! Reading never stops at the first mistake: every problem is collected with the field path
//! at fault, so `sluice config validate` can report them all at once. Unknown fields are
//! warnings, not errors, so YAML written for the earlier design keeps loading. This module
//! holds the entry points and the reads of single fields; [`pipeline`] reads the sections
//! of a pipeline and [`job`] its `job`, with the earlier design's spellings of job settings.

mod job;
mod pipeline;

use std::fmt;

use chrono::{NaiveDate, TimeDelta, Weekday};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::model::PipelineConfig;
use crate::core::duration::parse_duration;

/// One thing wrong (or suspicious) in a config, located by its field path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    pub path: String,
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

/// Every problem that made a config invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.problems.iter().map(Problem::to_string).collect();
        write!(f, "{}", parts.join("; "))
    }
}

/// How strict parsing is about `${name}` deployment variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variables {
    /// `config validate`: deployment variables may still be unresolved.
    MayBeUnresolved,
    /// `config apply` output and the processor: every `${name}` must be resolved by now.
    MustBeResolved,
}

/// A config that parsed, with the warnings worth showing its author.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub config: PipelineConfig,
    pub warnings: Vec<Problem>,
}

/// Parses YAML text into the JSON form used on the topic.
pub fn yaml_to_json(text: &str) -> Result<Value, Problem> {
    crate::core::config::yaml::from_str::<Value>(text).map_err(|e| Problem {
        path: String::new(),
        reason: format!("not valid YAML: {e}"),
    })
}

/// Parses and validates a pipeline config, reporting every problem found.
pub fn parse(raw: &Value, variables: Variables) -> Result<Parsed, ConfigError> {
    let mut r = Reader::default();
    let config = r.pipeline(raw, variables);
    match config {
        Some(mut config) if r.problems.is_empty() => {
            config.json = raw.to_string().into_boxed_str();
            Ok(Parsed {
                config,
                warnings: r.warnings,
            })
        }
        _ => {
            if r.problems.is_empty() {
                r.problem("", "config is not valid");
            }
            Err(ConfigError { problems: r.problems })
        }
    }
}

pub const MAX_PIPELINE_ID_LEN: usize = 200;

/// Collects problems and warnings while walking the JSON.
#[derive(Default)]
struct Reader {
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// `key` as `known` spells it, whatever its case; itself when `known` lacks it.
fn canonical<'k>(key: &'k str, known: &[&'k str]) -> &'k str {
    known.iter().find(|k| k.eq_ignore_ascii_case(key)).map_or(key, |k| *k)
}

/// `map` with its keys spelt as `known` spells them, for a section read a second time (its
/// warnings were given the first).
fn respelt(map: &Map<String, Value>, known: &[&str]) -> Map<String, Value> {
    map.iter()
        .map(|(key, value)| (canonical(key, known).to_string(), value.clone()))
        .collect()
}

impl Reader {
    fn problem(&mut self, path: &str, reason: impl std::fmt::Display) {
        self.problems.push(Problem {
            path: path.to_string(),
            reason: reason.to_string(),
        });
    }

    fn warn(&mut self, path: &str, reason: impl Into<String>) {
        self.warnings.push(Problem {
            path: path.to_string(),
            reason: reason.into(),
        });
    }

    /// `map` with its keys spelt as `known` spells them, whatever their case, and a warning
    /// for each key nobody reads (usually a typo). The earlier design decoded configs as Go
    /// does, case-insensitively, so `dryrun: true` was a dry run (read as an unknown key, it
    /// would run the real job). Each respelling is a warning; two spellings of one key are a
    /// problem.
    fn fields(&mut self, map: &Map<String, Value>, path: &str, known: &[&str]) -> Map<String, Value> {
        let mut spelt = Map::new();
        for (key, value) in map {
            let canonical = canonical(key, known);
            if canonical != key {
                self.warn(
                    &join(path, key),
                    format!("read as {canonical} (keys match in any case)"),
                );
            } else if !known.contains(&key.as_str()) {
                self.warn(&join(path, key), format!("unknown field (known: {})", known.join(", ")));
            }
            if spelt.insert(canonical.to_string(), value.clone()).is_some() {
                self.problem(&join(path, canonical), "is set twice, in two spellings");
            }
        }
        spelt
    }

    fn object<'v>(&mut self, v: &'v Value, path: &str) -> Option<&'v Map<String, Value>> {
        match v {
            Value::Object(map) => Some(map),
            other => {
                self.problem(path, format!("must be a mapping, found {}", describe(other)));
                None
            }
        }
    }

    /// An optional sub-mapping; `null` counts as absent.
    fn section<'v>(&mut self, map: &'v Map<String, Value>, key: &str, path: &str) -> Option<&'v Map<String, Value>> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => self.object(v, &join(path, key)),
        }
    }

    fn string(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<String> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.trim().is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                self.problem(&join(path, key), format!("must be a string, found {}", describe(other)));
                None
            }
        }
    }

    fn required_string(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<String> {
        let value = self.string(map, key, path);
        if value.is_none() && !self.problems.iter().any(|p| p.path == join(path, key)) {
            self.problem(&join(path, key), "is required");
        }
        value
    }

    fn boolean(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> bool {
        self.boolean_or(map, key, path, false)
    }

    /// A boolean; absent means `default`.
    fn boolean_or(&mut self, map: &Map<String, Value>, key: &str, path: &str, default: bool) -> bool {
        match map.get(key) {
            None | Some(Value::Null) => default,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                self.problem(
                    &join(path, key),
                    format!("must be true or false, found {}", describe(other)),
                );
                default
            }
        }
    }

    fn duration(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<TimeDelta> {
        let text = self.string(map, key, path)?;
        match parse_duration(&text) {
            Ok(d) if d > TimeDelta::zero() => Some(d),
            Ok(_) => {
                self.problem(&join(path, key), "must be longer than zero");
                None
            }
            Err(e) => {
                self.problem(&join(path, key), e.to_string());
                None
            }
        }
    }

    /// A whole number within `lo..=hi`; absent means `default`.
    fn bounded(&mut self, map: &Map<String, Value>, key: &str, path: &str, lo: u32, hi: u32, default: u32) -> u32 {
        let path = join(path, key);
        match map.get(key) {
            None | Some(Value::Null) => default,
            Some(Value::Number(n)) => match n.as_i64() {
                Some(v) if (lo as i64..=hi as i64).contains(&v) => v as u32,
                Some(v) => {
                    self.problem(&path, format!("{v} is out of range [{lo},{hi}]"));
                    default
                }
                None => {
                    self.problem(&path, format!("must be a whole number in [{lo},{hi}], found {n}"));
                    default
                }
            },
            Some(other) => {
                self.problem(
                    &path,
                    format!("must be a whole number in [{lo},{hi}], found {}", describe(other)),
                );
                default
            }
        }
    }

    fn timezone(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Option<Tz> {
        let name = self.string(map, key, path)?;
        match name.parse::<Tz>() {
            Ok(tz) => Some(tz),
            Err(_) => {
                self.problem(
                    &join(path, key),
                    format!("{name:?} is not an IANA timezone (e.g. UTC, America/New_York)"),
                );
                None
            }
        }
    }

    fn dates(&mut self, map: &Map<String, Value>, key: &str, path: &str) -> Vec<NaiveDate> {
        self.each(map, key, path, |r, item, at| {
            let date = item
                .as_str()
                .and_then(|s| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok());
            if date.is_none() {
                r.problem(at, format!("{item} is not a date (expected YYYY-MM-DD)"));
            }
            date
        })
    }

    /// Parses each item of an optional list; `parse` reports its own problems, located by
    /// the item's path (`field[i]`).
    fn each<T>(
        &mut self,
        map: &Map<String, Value>,
        key: &str,
        path: &str,
        mut parse: impl FnMut(&mut Self, &Value, &str) -> Option<T>,
    ) -> Vec<T> {
        let path = join(path, key);
        let Some(list) = self.list(map, key, &path) else {
            return Vec::new();
        };
        list.iter()
            .enumerate()
            .filter_map(|(i, item)| parse(self, item, &format!("{path}[{i}]")))
            .collect()
    }

    fn list<'v>(&mut self, map: &'v Map<String, Value>, key: &str, path: &str) -> Option<&'v Vec<Value>> {
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Array(list)) => Some(list),
            Some(other) => {
                self.problem(path, format!("must be a list, found {}", describe(other)));
                None
            }
        }
    }

    fn weekdays(&mut self, map: &Map<String, Value>, path: &str) -> Vec<Weekday> {
        self.each(map, "days", path, |r, item, at| {
            let day = item.as_str().and_then(|s| s.parse::<Weekday>().ok());
            if day.is_none() {
                r.problem(at, format!("{item} is not a weekday (monday..sunday)"));
            }
            day
        })
    }
}

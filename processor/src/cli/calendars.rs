//! Named calendars: YAML files (`name`, `days`, `dates`) that `config validate` checks
//! pipelines against and `config apply` writes into them.
//!
//! A pipeline names a calendar with a string at `exclusions.calendar`, `schedule.calendar` or
//! (earlier design) `schedule.exclude.holidays`. The processor never reads files, so
//! [`Calendars::resolve`] replaces each name by the calendar's contents,
//! `{"name": .., "days": [..], "dates": [..]}`, before the config is published.
//!
//! This is file I/O, so it lives outside [`crate::core`]; the parsed form is the core's
//! [`Calendar`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use chrono::{NaiveDate, Weekday};
use serde_json::{json, Map, Value};

use crate::core::config::{Calendar, Problem, Variables};
use crate::core::template;

/// The places a pipeline config may name a calendar: JSON pointer and field path.
pub const CALENDAR_FIELDS: [(&str, &str); 3] = [
    ("/exclusions/calendar", "exclusions.calendar"),
    ("/schedule/calendar", "schedule.calendar"),
    ("/schedule/exclude/holidays", "schedule.exclude.holidays"),
];

const KNOWN_FIELDS: [&str; 3] = ["name", "days", "dates"];

/// Something wrong with a calendar file or the calendars folder.
#[derive(Debug, thiserror::Error)]
pub enum CalendarError {
    #[error("calendars folder {}: {source}", .dir.display())]
    ReadDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", .file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not valid YAML: {message}", .file.display())]
    Yaml { file: PathBuf, message: String },
    #[error("{}: must be a mapping with name, days and dates, found {found}", .file.display())]
    NotAMapping { file: PathBuf, found: &'static str },
    #[error("{}: {field}: {reason}", .file.display())]
    Field {
        file: PathBuf,
        field: String,
        reason: String,
    },
    #[error("{}: name: calendar {name:?} is also defined in {}", .file.display(), .first.display())]
    Duplicate {
        name: String,
        file: PathBuf,
        first: PathBuf,
    },
}

impl CalendarError {
    /// The calendar file (or, for [`CalendarError::ReadDir`], the folder) at fault.
    pub fn file(&self) -> &Path {
        match self {
            CalendarError::ReadDir { dir, .. } => dir,
            CalendarError::Read { file, .. }
            | CalendarError::Yaml { file, .. }
            | CalendarError::NotAMapping { file, .. }
            | CalendarError::Field { file, .. }
            | CalendarError::Duplicate { file, .. } => file,
        }
    }
}

/// Every problem found in a calendars folder (loading does not stop at the first), and the
/// warnings found on the way.
#[derive(Debug, thiserror::Error)]
pub struct LoadError {
    pub errors: Vec<CalendarError>,
    pub warnings: Vec<CalendarWarning>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.errors.iter().map(CalendarError::to_string).collect();
        write!(f, "{}", parts.join("; "))
    }
}

/// Something suspicious in a calendar file that does not stop it loading (unknown fields,
/// as for pipeline configs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarWarning {
    pub file: PathBuf,
    pub field: String,
    pub reason: String,
}

impl fmt::Display for CalendarWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.file.display(), self.field, self.reason)
    }
}

/// A calendar name in a pipeline config that cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("{field}: unknown calendar {name:?} (known: {})", known_list(.known))]
    Unknown {
        field: String,
        name: String,
        known: Vec<String>,
    },
    #[error("{field}: calendar {name:?} has unresolved ${{{variable}}}: pass --var {variable}=VALUE to config apply")]
    Unresolved {
        field: String,
        name: String,
        variable: String,
    },
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    }
}

impl ResolveError {
    /// The field path at fault (`schedule.exclude.holidays`...).
    pub fn field(&self) -> &str {
        match self {
            ResolveError::Unknown { field, .. } | ResolveError::Unresolved { field, .. } => field,
        }
    }

    /// The error as a config problem: the field path, and the reason without it.
    pub fn to_problem(&self) -> Problem {
        let text = self.to_string();
        let reason = text
            .strip_prefix(self.field())
            .and_then(|r| r.strip_prefix(": "))
            .unwrap_or(&text)
            .to_string();
        Problem {
            path: self.field().to_string(),
            reason,
        }
    }
}

/// What [`Calendars::resolve`] did to one config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    /// Field paths whose name was replaced by the calendar.
    pub resolved: Vec<String>,
    /// Names left as written (deployment variables while validating).
    pub warnings: Vec<Problem>,
    pub errors: Vec<ResolveError>,
}

/// A calendar name written in a pipeline config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// Field path, e.g. `exclusions.calendar`.
    pub field: &'static str,
    pub name: String,
}

/// The calendar names (strings, not yet resolved) a config refers to.
pub fn references(config: &Value) -> Vec<Reference> {
    CALENDAR_FIELDS
        .iter()
        .filter_map(|(pointer, field)| match config.pointer(pointer) {
            Some(Value::String(name)) => Some(Reference {
                field,
                name: name.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// A calendar and the file it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct CalendarFile {
    pub file: PathBuf,
    pub calendar: Calendar,
}

/// The calendars of one folder, by name.
#[derive(Debug, Clone, Default)]
pub struct Calendars {
    pub dir: PathBuf,
    by_name: BTreeMap<String, CalendarFile>,
    pub warnings: Vec<CalendarWarning>,
}

impl Calendars {
    /// Loads every `*.yaml` / `*.yml` file of `dir` (not its subfolders), reporting every
    /// problem found.
    pub fn load_dir(dir: &Path) -> Result<Calendars, LoadError> {
        let read_dir = |source| LoadError {
            errors: vec![CalendarError::ReadDir {
                dir: dir.to_path_buf(),
                source,
            }],
            warnings: Vec::new(),
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read_dir)? {
            let path = entry.map_err(read_dir)?.path();
            if path.is_file() && path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                files.push(path);
            }
        }
        files.sort();

        let mut calendars = Calendars {
            dir: dir.to_path_buf(),
            ..Calendars::default()
        };
        let mut errors = Vec::new();
        for file in files {
            let text = match std::fs::read_to_string(&file) {
                Ok(text) => text,
                Err(source) => {
                    errors.push(CalendarError::Read { file, source });
                    continue;
                }
            };
            let mut file_errors = Vec::new();
            let parsed = parse_file(&file, &text, &mut file_errors, &mut calendars.warnings);
            errors.extend(file_errors);
            let Some(calendar) = parsed else { continue };
            if let Some(first) = calendars.by_name.get(&calendar.name) {
                errors.push(CalendarError::Duplicate {
                    name: calendar.name,
                    file,
                    first: first.file.clone(),
                });
                continue;
            }
            calendars
                .by_name
                .insert(calendar.name.clone(), CalendarFile { file, calendar });
        }
        if errors.is_empty() {
            Ok(calendars)
        } else {
            Err(LoadError {
                errors,
                warnings: calendars.warnings,
            })
        }
    }

    pub fn get(&self, name: &str) -> Option<&CalendarFile> {
        self.by_name.get(name)
    }

    /// Calendar names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Replaces each calendar name in `config` (see [`CALENDAR_FIELDS`]) by the calendar,
    /// `{"name", "days", "dates"}`. Calendars already resolved (mappings) are left alone, as
    /// is anything that is not a string (the config parser reports those). A name still
    /// holding a deployment variable (`${region}-holidays`) is a warning while validating
    /// ([`Variables::MayBeUnresolved`]) and an error otherwise. Every name that can be
    /// resolved is, even when others cannot.
    pub fn resolve(&self, config: &mut Value, variables: Variables) -> Resolution {
        let mut out = Resolution::default();
        for (pointer, field) in CALENDAR_FIELDS {
            let Some(slot) = config.pointer_mut(pointer) else {
                continue;
            };
            let Some(name) = slot.as_str().map(str::to_owned) else {
                continue;
            };
            if let Some(variable) = deployment_variable(&name) {
                if variables == Variables::MayBeUnresolved {
                    out.warnings.push(Problem {
                        path: field.to_string(),
                        reason: format!(
                            "calendar {name:?} has deployment variable ${{{variable}}}: checked when config apply resolves it"
                        ),
                    });
                } else {
                    out.errors.push(ResolveError::Unresolved {
                        field: field.to_string(),
                        name,
                        variable,
                    });
                }
                continue;
            }
            match self.by_name.get(&name) {
                Some(found) => {
                    *slot = calendar_json(&found.calendar);
                    out.resolved.push(field.to_string());
                }
                None => out.errors.push(ResolveError::Unknown {
                    field: field.to_string(),
                    name,
                    known: self.names(),
                }),
            }
        }
        out
    }
}

/// The first deployment variable (`${name}`, not a run variable or secret) in `text`.
fn deployment_variable(text: &str) -> Option<String> {
    template::placeholders(text)
        .ok()?
        .into_iter()
        .find(|name| !template::is_builtin(name))
}

/// A calendar in the form `config apply` writes into pipeline configs.
pub fn calendar_json(calendar: &Calendar) -> Value {
    json!({
        "name": calendar.name,
        "days": calendar.days.iter().map(|d| weekday_name(*d)).collect::<Vec<_>>(),
        "dates": calendar.dates.iter().map(|d| d.format("%Y-%m-%d").to_string()).collect::<Vec<_>>(),
    })
}

fn weekday_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Mon => "monday",
        Weekday::Tue => "tuesday",
        Weekday::Wed => "wednesday",
        Weekday::Thu => "thursday",
        Weekday::Fri => "friday",
        Weekday::Sat => "saturday",
        Weekday::Sun => "sunday",
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Parses one calendar file; problems go to `errors`, unknown fields to `warnings`.
fn parse_file(
    file: &Path,
    text: &str,
    errors: &mut Vec<CalendarError>,
    warnings: &mut Vec<CalendarWarning>,
) -> Option<Calendar> {
    let value = match crate::core::config::yaml::from_str::<Value>(text) {
        Ok(v) => v,
        Err(e) => {
            errors.push(CalendarError::Yaml {
                file: file.to_path_buf(),
                message: e.to_string(),
            });
            return None;
        }
    };
    let Value::Object(map) = &value else {
        errors.push(CalendarError::NotAMapping {
            file: file.to_path_buf(),
            found: describe(&value),
        });
        return None;
    };
    let field_error = |field: &str, reason: String| CalendarError::Field {
        file: file.to_path_buf(),
        field: field.to_string(),
        reason,
    };
    for key in map.keys() {
        if !KNOWN_FIELDS.contains(&key.as_str()) {
            warnings.push(CalendarWarning {
                file: file.to_path_buf(),
                field: key.clone(),
                reason: format!("unknown field (known: {})", KNOWN_FIELDS.join(", ")),
            });
        }
    }
    let name = match map.get("name") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        None | Some(Value::Null) | Some(Value::String(_)) => {
            errors.push(field_error("name", "is required".into()));
            None
        }
        Some(other) => {
            errors.push(field_error(
                "name",
                format!("must be a string, found {}", describe(other)),
            ));
            None
        }
    };
    let before = errors.len();
    let days = list(map, "days", errors, &field_error, |item| {
        item.as_str()
            .and_then(|s| s.parse::<Weekday>().ok())
            .ok_or_else(|| format!("{item} is not a weekday (monday..sunday)"))
    });
    let dates = list(map, "dates", errors, &field_error, |item| {
        item.as_str()
            .and_then(|s| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok())
            .ok_or_else(|| format!("{item} is not a date (expected YYYY-MM-DD)"))
    });
    let name = name?;
    if errors.len() > before {
        return None;
    }
    if days.is_empty() && dates.is_empty() {
        warnings.push(CalendarWarning {
            file: file.to_path_buf(),
            field: "name".into(),
            reason: format!("calendar {name:?} has no days and no dates: it excludes nothing"),
        });
    }
    let (mut days, mut dates) = (days, dates);
    days.sort_by_key(|d| d.num_days_from_monday());
    days.dedup();
    dates.sort();
    dates.dedup();
    Some(Calendar {
        name,
        resolved: true,
        days,
        dates,
    })
}

/// Parses each item of an optional list, reporting bad items as `key[i]`.
fn list<T>(
    map: &Map<String, Value>,
    key: &str,
    errors: &mut Vec<CalendarError>,
    field_error: &dyn Fn(&str, String) -> CalendarError,
    parse: impl Fn(&Value) -> Result<T, String>,
) -> Vec<T> {
    match map.get(key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| match parse(item) {
                Ok(v) => Some(v),
                Err(reason) => {
                    errors.push(field_error(&format!("{key}[{i}]"), reason));
                    None
                }
            })
            .collect(),
        Some(other) => {
            errors.push(field_error(key, format!("must be a list, found {}", describe(other))));
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config;
    use chrono::Datelike;

    fn write(dir: &Path, file: &str, text: &str) {
        std::fs::write(dir.join(file), text).unwrap();
    }

    fn us_holidays() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "us.yaml",
            "name: us-holidays\ndays: [Saturday, SUNDAY]\ndates: [2026-11-26, \"2026-12-25\"]\n",
        );
        write(dir.path(), "uk.yml", "name: uk-holidays\ndates: [\"2026-12-26\"]\n");
        write(dir.path(), "README.md", "not a calendar");
        dir
    }

    fn day(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn loads_every_yaml_file_of_a_folder() {
        let dir = us_holidays();
        let calendars = Calendars::load_dir(dir.path()).unwrap();
        assert_eq!(calendars.names(), ["uk-holidays", "us-holidays"]);
        let us = calendars.get("us-holidays").unwrap();
        assert_eq!(us.file, dir.path().join("us.yaml"));
        assert_eq!(us.calendar.days, [Weekday::Sat, Weekday::Sun]);
        assert_eq!(us.calendar.dates, [day("2026-11-26"), day("2026-12-25")]);
        assert!(calendars.warnings.is_empty(), "{:?}", calendars.warnings);
    }

    #[test]
    fn the_example_calendar_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/calendars");
        let calendars = Calendars::load_dir(&dir).unwrap();
        let us = &calendars.get("us-holidays").unwrap().calendar;
        assert!(us.dates.contains(&day("2026-11-26")));
        assert!(calendars.warnings.is_empty(), "{:?}", calendars.warnings);
    }

    #[test]
    fn duplicate_names_across_files_are_an_error() {
        let dir = us_holidays();
        write(dir.path(), "z-copy.yaml", "name: us-holidays\ndates: [2026-07-03]\n");
        let err = Calendars::load_dir(dir.path()).unwrap_err();
        assert_eq!(err.errors.len(), 1, "{err}");
        assert!(
            matches!(&err.errors[0], CalendarError::Duplicate { name, file, first }
                if name == "us-holidays" && file.ends_with("z-copy.yaml") && first.ends_with("us.yaml")),
            "{err}"
        );
        assert!(err
            .to_string()
            .contains("z-copy.yaml: name: calendar \"us-holidays\" is also defined in"));
    }

    #[test]
    fn bad_fields_are_errors_naming_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "bad.yaml",
            "name: bad\ndays: [monday, funday]\ndates: [2026-02-30, 2026-03-01]\n",
        );
        write(dir.path(), "nameless.yaml", "days: [monday]\n");
        write(dir.path(), "list.yaml", "- name: x\n");
        write(dir.path(), "broken.yaml", "name: [unclosed\n");
        let err = Calendars::load_dir(dir.path()).unwrap_err();
        let text: Vec<String> = err.errors.iter().map(ToString::to_string).collect();
        let expect = [
            "bad.yaml: days[1]: \"funday\" is not a weekday (monday..sunday)",
            "bad.yaml: dates[0]: \"2026-02-30\" is not a date (expected YYYY-MM-DD)",
            "nameless.yaml: name: is required",
            "list.yaml: must be a mapping",
            "broken.yaml: not valid YAML",
        ];
        for e in expect {
            assert!(text.iter().any(|t| t.contains(e)), "missing {e:?} in {text:#?}");
        }
        assert!(matches!(
            &err.errors.iter().find(|e| e.to_string().contains("funday")).unwrap(),
            CalendarError::Field { file, field, .. } if file.ends_with("bad.yaml") && field == "days[1]"
        ));
    }

    #[test]
    fn unknown_fields_warn_but_load() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "c.yaml",
            "name: c\ndays: [sunday]\nholidays: [2026-01-01]\n",
        );
        let calendars = Calendars::load_dir(dir.path()).unwrap();
        assert_eq!(calendars.len(), 1);
        assert_eq!(calendars.warnings.len(), 1);
        assert_eq!(calendars.warnings[0].field, "holidays");
        assert!(calendars.warnings[0]
            .to_string()
            .contains("c.yaml: holidays: unknown field"));
    }

    #[test]
    fn a_missing_folder_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = Calendars::load_dir(&dir.path().join("nope")).unwrap_err();
        assert!(matches!(err.errors[0], CalendarError::ReadDir { .. }));
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn names_are_resolved_at_all_three_places() {
        let dir = us_holidays();
        let calendars = Calendars::load_dir(dir.path()).unwrap();
        let mut config = json!({
            "pipeline": {"id": "p"},
            "schedule": {"calendar": "uk-holidays", "exclude": {"weekends": true, "holidays": "us-holidays"}},
            "exclusions": {"calendar": "us-holidays", "days": ["friday"]},
        });
        assert_eq!(references(&config).len(), 3);
        let resolution = calendars.resolve(&mut config, Variables::MustBeResolved);
        assert!(resolution.errors.is_empty(), "{:?}", resolution.errors);
        assert_eq!(
            resolution.resolved,
            ["exclusions.calendar", "schedule.calendar", "schedule.exclude.holidays"]
        );
        let us = json!({"name": "us-holidays", "days": ["saturday", "sunday"], "dates": ["2026-11-26", "2026-12-25"]});
        assert_eq!(config["exclusions"]["calendar"], us);
        assert_eq!(config["schedule"]["exclude"]["holidays"], us);
        assert_eq!(
            config["schedule"]["calendar"],
            json!({"name": "uk-holidays", "days": [], "dates": ["2026-12-26"]})
        );
        assert_eq!(config["exclusions"]["days"], json!(["friday"]), "the rest is untouched");
        assert!(references(&config).is_empty());
    }

    #[test]
    fn an_unknown_name_is_an_error_naming_the_field_and_the_known_calendars() {
        let dir = us_holidays();
        let calendars = Calendars::load_dir(dir.path()).unwrap();
        let mut config = json!({
            "schedule": {"exclude": {"holidays": "us-holidayz"}},
            "exclusions": {"calendar": "us-holidays"},
        });
        let resolution = calendars.resolve(&mut config, Variables::MayBeUnresolved);
        assert_eq!(resolution.errors.len(), 1);
        assert_eq!(
            resolution.errors[0].to_string(),
            "schedule.exclude.holidays: unknown calendar \"us-holidayz\" (known: uk-holidays, us-holidays)"
        );
        let problem = resolution.errors[0].to_problem();
        assert_eq!(problem.path, "schedule.exclude.holidays");
        assert_eq!(
            problem.reason,
            "unknown calendar \"us-holidayz\" (known: uk-holidays, us-holidays)"
        );
        assert_eq!(
            config["schedule"]["exclude"]["holidays"], "us-holidayz",
            "left as written"
        );
        assert!(
            config["exclusions"]["calendar"].is_object(),
            "the known one is still resolved"
        );

        let empty = Calendars::default();
        let mut config = json!({"exclusions": {"calendar": "x"}});
        let resolution = empty.resolve(&mut config, Variables::MustBeResolved);
        assert_eq!(
            resolution.errors[0].to_string(),
            "exclusions.calendar: unknown calendar \"x\" (known: none)"
        );
    }

    #[test]
    fn a_calendar_already_resolved_is_left_alone() {
        let dir = us_holidays();
        let calendars = Calendars::load_dir(dir.path()).unwrap();
        let already = json!({"name": "us-holidays", "days": ["monday"], "dates": []});
        let mut config = json!({"exclusions": {"calendar": already.clone()}, "schedule": {"calendar": null}});
        let before = config.clone();
        let resolution = calendars.resolve(&mut config, Variables::MustBeResolved);
        assert_eq!(resolution, Resolution::default());
        assert_eq!(config, before);
    }

    #[test]
    fn names_with_deployment_variables_wait_for_apply() {
        let dir = us_holidays();
        let calendars = Calendars::load_dir(dir.path()).unwrap();
        let mut config = json!({"exclusions": {"calendar": "${region}-holidays"}});
        let resolution = calendars.resolve(&mut config, Variables::MayBeUnresolved);
        assert!(resolution.errors.is_empty());
        assert_eq!(resolution.warnings[0].path, "exclusions.calendar");
        let resolution = calendars.resolve(&mut config, Variables::MustBeResolved);
        assert_eq!(
            resolution.errors[0].to_string(),
            "exclusions.calendar: calendar \"${region}-holidays\" has unresolved ${region}: pass --var region=VALUE to config apply"
        );
    }

    #[test]
    fn a_resolved_config_parses_for_the_processor() {
        let dir = us_holidays();
        let calendars = Calendars::load_dir(dir.path()).unwrap();
        let mut config = json!({
            "pipeline": {"id": "p1", "owner": "me"},
            "schedule": {"trigger": {"key": "k", "check": "exists"}, "exclude": {"holidays": "us-holidays"}},
            "job": {"type": "command", "config": {"command": "true"}}
        });
        assert!(config::parse(&config, Variables::MustBeResolved).is_err());
        calendars.resolve(&mut config, Variables::MustBeResolved);
        let parsed = config::parse(&config, Variables::MustBeResolved).unwrap();
        assert!(
            !parsed.warnings.iter().any(|w| w.path.starts_with("schedule.exclude.")),
            "{:?}",
            parsed.warnings
        );
        let calendar = parsed.config.exclusions.calendar.unwrap();
        assert!(calendar.resolved);
        assert_eq!(calendar, calendars.get("us-holidays").unwrap().calendar);
    }

    #[test]
    fn a_legacy_config_resolved_against_the_example_calendars_is_what_the_processor_reads() {
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let text = std::fs::read_to_string(examples.join("legacy/gold-revenue.yaml")).unwrap();
        // What `config apply` does: deployment variables, then calendars, then the strict parse.
        let (mut json, _) =
            crate::core::template::substitute_deployment(&config::yaml_to_json(&text).unwrap(), &Default::default())
                .unwrap();
        assert!(
            config::parse(&json, Variables::MustBeResolved).is_err(),
            "a calendar name alone is not enough for the processor"
        );
        let calendars = Calendars::load_dir(&examples.join("calendars")).unwrap();
        let resolution = calendars.resolve(&mut json, Variables::MustBeResolved);
        assert!(resolution.errors.is_empty(), "{:?}", resolution.errors);
        assert_eq!(resolution.resolved, ["schedule.exclude.holidays"]);

        let config = config::parse(&json, Variables::MustBeResolved).unwrap().config;
        let calendar = config.exclusions.calendar.as_ref().unwrap();
        assert_eq!(calendar.name, "us-holidays");
        assert!(calendar.resolved);
        let day = |text: &str| NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap();
        let thanksgiving = config.exclusions.excludes(day("2026-11-26"));
        assert_eq!(
            thanksgiving.as_deref(),
            Some("2026-11-26 is excluded by calendar \"us-holidays\"")
        );
        assert_eq!(day("2026-11-24").weekday(), Weekday::Tue);
        assert_eq!(config.exclusions.excludes(day("2026-11-24")), None);
        assert!(config.exclusions.excludes(day("2026-11-28")).is_some(), "a Saturday");
        // The resolved JSON is what travels on the topic, and reads back the same.
        assert_eq!(
            config::PipelineConfig::from_json(&config.to_value()).unwrap().config,
            config
        );
    }
}

//! `sluice config validate|apply|delete`: pipeline YAML files read from a folder, archetypes
//! merged in, calendars and deployment variables resolved, every problem reported, and the
//! configs published to the config topic only when there is none; `apply --prune` and
//! `delete` remove pipelines (a tombstone on the config topic: the owner drops the
//! pipeline's state and timers), with the plan printed first. `replay --pipelines` reads
//! configs the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use clap::Subcommand;
use rdkafka::consumer::Consumer;
use rdkafka::Message;
use serde_json::{json, Value};

use super::archetypes::{self, Archetypes, Merged};
use super::args::parse_var;
use super::calendars::{self, Calendars, ResolveError};
use super::events::Output;
use super::traits;
use crate::core::config::{self, Parsed, Problem, Variables};
use crate::core::limits::Limits;
use crate::core::partitioning::PartitionId;
use crate::core::template;
use crate::runtime::kafka::{self, Connection};
use crate::runtime::topics::Topics;

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Report every problem in the pipeline YAML files of DIR; exits 1 if any.
    Validate {
        dir: PathBuf,
        /// Folder of calendar files (name, days, dates) that pipelines name; default:
        /// calendars/ beside the pipelines folder (DIR/../calendars).
        #[arg(long, value_name = "DIR")]
        calendars: Option<PathBuf>,
        /// Folder of archetype files (NAME.yaml: shared pipeline fields) that pipelines name
        /// with `archetype: NAME`; default: archetypes/ beside the pipelines folder.
        #[arg(long, value_name = "DIR")]
        archetypes: Option<PathBuf>,
        /// Show each pipeline as published: its archetype merged in, with the fields it
        /// inherited.
        #[arg(long)]
        explain: bool,
        /// `json`: one JSON document on stdout (every file with its problems and warnings),
        /// the readable lines on stderr.
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Validate, then publish every config in DIR to the config topic, calendars resolved.
    Apply {
        dir: PathBuf,
        /// Deployment variable for ${name} placeholders (repeatable).
        #[arg(long = "var", value_name = "NAME=VALUE", value_parser = parse_var)]
        vars: Vec<(String, String)>,
        /// Folder of calendar files (name, days, dates) that pipelines name; default:
        /// calendars/ beside the pipelines folder (DIR/../calendars).
        #[arg(long, value_name = "DIR")]
        calendars: Option<PathBuf>,
        /// Folder of archetype files that pipelines name; default: archetypes/ beside the
        /// pipelines folder.
        #[arg(long, value_name = "DIR")]
        archetypes: Option<PathBuf>,
        /// Also delete the pipelines the config topic holds that DIR no longer has (GitOps:
        /// the folder is the whole truth). The plan is printed first.
        #[arg(long)]
        prune: bool,
        /// Print the plan (what would be applied and deleted) and publish nothing.
        #[arg(long)]
        dry_run: bool,
        /// `json`: one JSON document on stdout (what was published, where; or the problems),
        /// the readable lines on stderr.
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Delete pipelines: a tombstone for each on the config topic, and the owner drops its
    /// state, timers and subscriptions (CONFIG_ACCEPTED with `deleted: true`). An id the
    /// topic does not hold is an error, and then nothing is deleted.
    Delete {
        #[arg(required = true, value_name = "PIPELINE")]
        ids: Vec<String>,
        /// Print the plan and delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// `json`: one JSON document on stdout, the readable lines on stderr.
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

pub async fn run(kafka: &Connection, topics: &Topics, command: ConfigCommand) -> Result<ExitCode> {
    match command {
        ConfigCommand::Validate {
            dir,
            calendars,
            archetypes,
            explain,
            output,
        } => {
            let folders = Folders {
                calendars: calendars.as_deref(),
                archetypes: archetypes.as_deref(),
            };
            Ok(validate(&dir, folders, explain, output))
        }
        ConfigCommand::Apply {
            dir,
            vars,
            calendars,
            archetypes,
            prune,
            dry_run,
            output,
        } => {
            let folders = Folders {
                calendars: calendars.as_deref(),
                archetypes: archetypes.as_deref(),
            };
            let how = Publish { prune, dry_run, output };
            apply(&dir, folders, &vars.into_iter().collect(), kafka, topics, how).await
        }
        ConfigCommand::Delete { ids, dry_run, output } => delete(&ids, kafka, topics, dry_run, output).await,
    }
}

/// How `config apply` publishes.
#[derive(Clone, Copy)]
struct Publish {
    prune: bool,
    dry_run: bool,
    output: Output,
}

/// The folders beside the pipelines that configs draw on (`--calendars`, `--archetypes`;
/// `None`: the default folder beside the pipelines folder).
#[derive(Clone, Copy, Default)]
pub struct Folders<'a> {
    pub calendars: Option<&'a Path>,
    pub archetypes: Option<&'a Path>,
}

/// One pipeline file read from disk, parsed or with its problems.
struct LoadedFile {
    path: PathBuf,
    json: Option<Value>,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
    /// The archetype merged in, and what it gave.
    merged: Option<Merged>,
}

fn pipeline_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading pipeline folder {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no pipeline files (*.yaml, *.yml) in {}", dir.display());
    }
    Ok(files)
}

/// Where the calendars pipelines name come from, for one `config validate` or `apply`.
enum CalendarSource {
    Loaded(Calendars),
    /// The default folder does not exist: fine until a pipeline names a calendar.
    Missing(PathBuf),
    /// The folder has errors (already reported).
    Broken(PathBuf),
}

/// `NAME/` beside the pipelines folder: `DIR/../NAME`, written without the `..` when DIR
/// ends in a folder name (`examples/pipelines` -> `examples/calendars`).
fn beside(pipelines: &Path, name: &str) -> PathBuf {
    match pipelines.components().next_back() {
        Some(std::path::Component::Normal(_)) => pipelines
            .parent()
            .map(|p| p.join(name))
            .unwrap_or_else(|| PathBuf::from(name)),
        _ => pipelines.join("..").join(name),
    }
}

/// Where the archetypes pipelines name come from: loaded, or why not.
enum ArchetypeSource {
    Loaded(Archetypes),
    /// No folder, or one with errors (already reported): why a name cannot be resolved.
    Unavailable(String),
}

/// Loads the archetypes for `pipelines`; an explicit `--archetypes` folder must exist.
/// Problems in archetype files are printed here and counted.
fn load_archetypes(pipelines: &Path, flag: Option<&Path>, progress: Progress) -> Result<(ArchetypeSource, usize)> {
    let dir = match flag {
        Some(dir) if !dir.is_dir() => bail!("--archetypes {}: no such folder", dir.display()),
        Some(dir) => dir.to_path_buf(),
        None => beside(pipelines, "archetypes"),
    };
    if flag.is_none() && !dir.exists() {
        let why = format!(
            "there is no archetypes folder at {} (the default, beside the pipelines folder): pass --archetypes DIR",
            dir.display()
        );
        return Ok((ArchetypeSource::Unavailable(why), 0));
    }
    match Archetypes::load_dir(&dir) {
        Ok(archetypes) => {
            if !archetypes.names().is_empty() {
                progress.say(format!(
                    "archetypes from {}: {}",
                    dir.display(),
                    archetypes.names().join(", ")
                ));
            }
            Ok((ArchetypeSource::Loaded(archetypes), 0))
        }
        Err(errors) => {
            for error in &errors {
                eprintln!("error: {error}");
            }
            let why = format!("the archetypes in {} have errors (above)", dir.display());
            Ok((ArchetypeSource::Unavailable(why), errors.len()))
        }
    }
}

/// Merges the archetype `json` names into it, reading a pipeline of the earlier variant's
/// trait form as Sluice's first (see [`traits`]); a problem goes to `file`.
fn merge_archetype(json: &mut Value, source: &ArchetypeSource, file: &mut LoadedFile) {
    let name = archetypes::named(json);
    let unavailable = |name: &str, why: &str| Problem {
        path: "archetype".into(),
        reason: format!("archetype {name:?} cannot be resolved: {why}"),
    };
    if traits::is_trait_pipeline(json) {
        let archetype = match (name.as_deref(), source) {
            (None, _) => None,
            (Some(name), ArchetypeSource::Loaded(archetypes)) => match archetypes.get(name) {
                Ok(archetype) => Some((name, archetype)),
                Err(problem) => return file.problems.push(problem),
            },
            (Some(name), ArchetypeSource::Unavailable(why)) => return file.problems.push(unavailable(name, why)),
        };
        let translated = traits::translate(json, archetype);
        file.warnings.extend(translated.warnings);
        file.problems.extend(translated.problems);
        file.merged = name.map(|archetype| Merged {
            archetype,
            inherited: translated.inherited,
        });
        *json = translated.config;
        return;
    }
    let result = match source {
        ArchetypeSource::Loaded(archetypes) => archetypes.resolve(json),
        ArchetypeSource::Unavailable(why) => match name {
            Some(name) => Err(unavailable(&name, why)),
            None => Ok(None),
        },
    };
    match result {
        Ok(merged) => file.merged = merged,
        Err(problem) => file.problems.push(problem),
    }
}

/// How many calendar problems [`load_calendars`] printed, and in how many files.
#[derive(Default)]
struct CalendarErrors {
    problems: usize,
    files: usize,
}

/// Loads the calendars for `pipelines`; an explicit `--calendars` folder must exist. Calendar
/// errors and warnings are printed here.
fn load_calendars(
    pipelines: &Path,
    flag: Option<&Path>,
    progress: Progress,
) -> Result<(CalendarSource, CalendarErrors)> {
    let dir = match flag {
        Some(dir) => {
            if !dir.is_dir() {
                bail!("--calendars {}: no such folder", dir.display());
            }
            dir.to_path_buf()
        }
        None => {
            let dir = beside(pipelines, "calendars");
            if !dir.exists() {
                return Ok((CalendarSource::Missing(dir), CalendarErrors::default()));
            }
            dir
        }
    };
    match Calendars::load_dir(&dir) {
        Ok(calendars) => {
            for w in &calendars.warnings {
                eprintln!("warning: {w}");
            }
            progress.say(format!(
                "calendars from {}: {}",
                dir.display(),
                if calendars.is_empty() {
                    "none".to_string()
                } else {
                    calendars.names().join(", ")
                }
            ));
            Ok((CalendarSource::Loaded(calendars), CalendarErrors::default()))
        }
        Err(e) => {
            for w in &e.warnings {
                eprintln!("warning: {w}");
            }
            let mut files: Vec<&Path> = Vec::new();
            for error in &e.errors {
                eprintln!("error: {error}");
                if !files.contains(&error.file()) {
                    files.push(error.file());
                }
            }
            let errors = CalendarErrors {
                problems: e.errors.len(),
                files: files.len(),
            };
            Ok((CalendarSource::Broken(dir), errors))
        }
    }
}

/// Replaces the calendar names in `json` by the calendars (see [`Calendars::resolve`]).
/// Problems go to `file`; returns the field paths they are about, so the parser's own
/// complaint about an unresolved name there is not reported twice.
fn resolve_calendars(json: &mut Value, source: &CalendarSource, mode: Variables, file: &mut LoadedFile) -> Vec<String> {
    match source {
        CalendarSource::Loaded(calendars) => {
            let resolution = calendars.resolve(json, mode);
            file.warnings.extend(resolution.warnings);
            let fields = resolution.errors.iter().map(|e| e.field().to_string()).collect();
            file.problems
                .extend(resolution.errors.iter().map(ResolveError::to_problem));
            fields
        }
        CalendarSource::Missing(dir) | CalendarSource::Broken(dir) => {
            let why = match source {
                CalendarSource::Missing(_) => format!(
                    "there is no calendars folder at {} (the default, beside the pipelines folder): pass --calendars DIR",
                    dir.display()
                ),
                _ => format!("the calendars in {} have errors (above)", dir.display()),
            };
            calendars::references(json)
                .into_iter()
                .map(|r| {
                    file.problems.push(Problem {
                        path: r.field.to_string(),
                        reason: format!("calendar {:?} cannot be resolved: {why}", r.name),
                    });
                    r.field.to_string()
                })
                .collect()
        }
    }
}

/// Reads and checks every pipeline file; with `vars`, deployment variables are substituted
/// and must all resolve. Archetypes are merged in first (their fields may hold variables
/// and calendar names too), then calendar names resolved from `calendars`; a name that
/// cannot be is a problem.
fn load(
    dir: &Path,
    vars: Option<&BTreeMap<String, String>>,
    archetypes: &ArchetypeSource,
    calendars: &CalendarSource,
) -> Result<Vec<LoadedFile>> {
    let mut loaded = Vec::new();
    for path in pipeline_files(dir)? {
        let mut file = LoadedFile {
            path: path.clone(),
            json: None,
            problems: Vec::new(),
            warnings: Vec::new(),
            merged: None,
        };
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut json = match config::yaml_to_json(&text) {
            Ok(v) => v,
            Err(p) => {
                file.problems.push(p);
                loaded.push(file);
                continue;
            }
        };
        merge_archetype(&mut json, archetypes, &mut file);
        if !file.problems.is_empty() {
            loaded.push(file);
            continue;
        }
        let (mut json, mode) = match vars {
            None => (json, Variables::MayBeUnresolved),
            Some(vars) => match template::substitute_deployment(&json, vars) {
                Ok((substituted, _)) => (substituted, Variables::MustBeResolved),
                Err(e) => {
                    file.problems.push(Problem {
                        path: String::new(),
                        reason: e.to_string(),
                    });
                    loaded.push(file);
                    continue;
                }
            },
        };
        let calendar_fields = resolve_calendars(&mut json, calendars, mode, &mut file);
        match config::parse(&json, mode) {
            Ok(Parsed { warnings, config }) => {
                // The processor's default limits: a config over them would be rejected there.
                let limits = Limits::default();
                file.problems.extend(limits.check_config(&config));
                let bytes = json.to_string().len();
                if let Err(reason) = limits.check_record(true, bytes) {
                    file.problems.push(Problem {
                        path: String::new(),
                        reason: reason.to_string(),
                    });
                }
                file.warnings.extend(warnings);
                // Named before a run does not happen, for teams moving over.
                let today = chrono::Utc::now().with_timezone(&config.schedule.timezone).date_naive();
                file.warnings
                    .extend(config::days_skipped_unlike_interlock(&config, today));
                file.warnings.extend(config::runs_unlike_interlock(&config));
                file.json = Some(json);
            }
            Err(e) => file
                .problems
                .extend(e.problems.into_iter().filter(|p| !calendar_fields.contains(&p.path))),
        }
        loaded.push(file);
    }
    // Two files claiming one pipeline id would overwrite each other on the topic.
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for file in &mut loaded {
        let Some(id) = file
            .json
            .as_ref()
            .and_then(|j| j.pointer("/pipeline/id"))
            .and_then(Value::as_str)
        else {
            continue;
        };
        if let Some(first) = seen.get(id) {
            file.problems.push(Problem {
                path: "pipeline.id".into(),
                reason: format!("{id:?} is also defined in {}", first.display()),
            });
        } else {
            seen.insert(id.to_string(), file.path.clone());
        }
    }
    Ok(loaded)
}

fn report(loaded: &[LoadedFile], progress: Progress) -> usize {
    let mut errors = 0;
    for file in loaded {
        for w in &file.warnings {
            eprintln!("warning: {}: {w}", file.path.display());
        }
        for p in &file.problems {
            eprintln!("error: {}: {p}", file.path.display());
            errors += 1;
        }
        if file.problems.is_empty() {
            progress.say(format!("ok: {}", file.path.display()));
        }
    }
    errors
}

fn validate(dir: &Path, folders: Folders, explain: bool, output: Output) -> ExitCode {
    let progress = Progress::for_output(output);
    let loaded = load_calendars(dir, folders.calendars, progress).and_then(|(source, calendar_errors)| {
        let (archetypes, archetype_errors) = load_archetypes(dir, folders.archetypes, progress)?;
        let loaded = load(dir, None, &archetypes, &source)?;
        Ok((loaded, calendar_errors, archetype_errors))
    });
    match loaded {
        Err(e) => {
            eprintln!("error: {e:#}");
            if output == Output::Json {
                println!("{}", json!({"valid": false, "error": format!("{e:#}")}));
            }
            ExitCode::FAILURE
        }
        Ok((loaded, calendar_errors, archetype_errors)) => {
            let errors = report(&loaded, progress) + calendar_errors.problems + archetype_errors;
            if explain && output == Output::Table {
                explain_merges(&loaded);
            }
            if output == Output::Json {
                println!(
                    "{}",
                    files_json(&loaded, calendar_errors.problems, archetype_errors, explain)
                );
            }
            if errors > 0 {
                eprintln!(
                    "{errors} problem(s) in {} file(s)",
                    loaded.iter().filter(|f| !f.problems.is_empty()).count() + calendar_errors.files
                );
                ExitCode::FAILURE
            } else {
                progress.say(format!("{} pipeline(s) valid", loaded.len()));
                ExitCode::SUCCESS
            }
        }
    }
}

/// `config validate --explain`: each valid pipeline as it would be published, after the
/// fields its archetype gave it.
fn explain_merges(loaded: &[LoadedFile]) {
    for file in loaded {
        let Some(json) = &file.json else { continue };
        match &file.merged {
            Some(m) => println!(
                "{}: archetype {} gave {}",
                file.path.display(),
                m.archetype,
                if m.inherited.is_empty() {
                    "nothing".to_string()
                } else {
                    m.inherited.join(", ")
                }
            ),
            None => println!("{}: no archetype", file.path.display()),
        }
        println!("{}", serde_json::to_string_pretty(json).unwrap_or_default());
    }
}

/// What `config validate --output json` prints: whether all is valid, and every file with
/// its pipeline id, problems and warnings (each `{path, reason}`); with `explain`, the
/// merged config and what its archetype gave.
fn files_json(loaded: &[LoadedFile], calendar_problems: usize, archetype_problems: usize, explain: bool) -> Value {
    let problems = |list: &[Problem]| -> Vec<Value> {
        list.iter()
            .map(|p| json!({"path": p.path, "reason": p.reason}))
            .collect()
    };
    let files: Vec<Value> = loaded
        .iter()
        .map(|f| {
            let mut entry = json!({
                "file": f.path.display().to_string(),
                "pipelineId": f.json.as_ref().and_then(|j| j.pointer("/pipeline/id")).cloned(),
                "valid": f.problems.is_empty(),
                "problems": problems(&f.problems),
                "warnings": problems(&f.warnings),
            });
            if explain {
                entry["archetype"] = json!(f.merged.as_ref().map(|m| &m.archetype));
                entry["inherited"] = json!(f.merged.as_ref().map(|m| &m.inherited));
                entry["config"] = f.json.clone().unwrap_or(Value::Null);
            }
            entry
        })
        .collect();
    let valid = calendar_problems + archetype_problems == 0 && loaded.iter().all(|f| f.problems.is_empty());
    json!({"valid": valid, "calendarProblems": calendar_problems, "archetypeProblems": archetype_problems,
           "files": files})
}

async fn apply(
    dir: &Path,
    folders: Folders<'_>,
    vars: &BTreeMap<String, String>,
    kafka: &Connection,
    topics: &Topics,
    how: Publish,
) -> Result<ExitCode> {
    let output = how.output;
    let progress = Progress::for_output(output);
    let Some(configs) = publishable_configs(dir, folders, vars, progress)? else {
        if output == Output::Json {
            println!("{}", json!({"published": false, "applied": [], "deleted": []}));
        }
        return Ok(ExitCode::FAILURE);
    };
    // Pipelines the topic holds that the folder no longer names.
    let gone: Vec<String> = match how.prune {
        true => {
            let named: BTreeSet<&str> = configs.iter().map(|(_, id, _)| id.as_str()).collect();
            let held = applied_pipelines(kafka, &topics.config)?;
            held.into_iter().filter(|id| !named.contains(id.as_str())).collect()
        }
        false => Vec::new(),
    };
    let ids: Vec<&str> = configs.iter().map(|(_, id, _)| id.as_str()).collect();
    progress.say(format!("plan: apply {} ({})", ids.len(), ids.join(", ")));
    if how.prune {
        progress.say(match gone.is_empty() {
            true => format!(
                "plan: delete none (every pipeline on {} is in {})",
                topics.config,
                dir.display()
            ),
            false => format!(
                "plan: delete {} no longer in {}: {}",
                gone.len(),
                dir.display(),
                gone.join(", ")
            ),
        });
    }
    if how.dry_run {
        progress.say("dry run: nothing published".into());
        if output == Output::Json {
            println!(
                "{}",
                json!({"published": false, "dryRun": true, "apply": ids, "delete": gone})
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let producer = kafka::producer(kafka)?;
    let mut applied = Vec::new();
    for (path, id, json) in &configs {
        let bytes = serde_json::to_vec(json)?;
        let (partition, offset) =
            kafka::send(&producer, &topics.config, Some(id.as_bytes()), Some(&bytes), &[]).await?;
        match output {
            Output::Table => println!("applied {id} from {} to {}", path.display(), topics.config),
            Output::Json => applied.push(json!({
                "pipelineId": id, "file": path.display().to_string(),
                "topic": topics.config, "partition": partition, "offset": offset,
            })),
        }
    }
    let deleted = tombstones(&producer, &gone, topics, output).await?;
    if output == Output::Json {
        println!("{}", json!({"published": true, "applied": applied, "deleted": deleted}));
    }
    Ok(ExitCode::SUCCESS)
}

/// `config delete`: a tombstone for each of `ids`, once every one is on the config topic.
async fn delete(
    ids: &[String],
    kafka: &Connection,
    topics: &Topics,
    dry_run: bool,
    output: Output,
) -> Result<ExitCode> {
    let progress = Progress::for_output(output);
    let held = applied_pipelines(kafka, &topics.config)?;
    let unknown: Vec<&str> = ids
        .iter()
        .map(String::as_str)
        .filter(|id| !held.contains(*id))
        .collect();
    if !unknown.is_empty() {
        eprintln!(
            "error: not on {}: {} (nothing was deleted; `sluice status` lists the pipelines)",
            topics.config,
            unknown.join(", ")
        );
        if output == Output::Json {
            println!("{}", json!({"deleted": [], "unknown": unknown}));
        }
        return Ok(ExitCode::FAILURE);
    }
    progress.say(format!("plan: delete {} ({})", ids.len(), ids.join(", ")));
    if dry_run {
        progress.say("dry run: nothing deleted".into());
        if output == Output::Json {
            println!("{}", json!({"deleted": [], "dryRun": true, "delete": ids}));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let producer = kafka::producer(kafka)?;
    let deleted = tombstones(&producer, ids, topics, output).await?;
    if output == Output::Json {
        println!("{}", json!({"deleted": deleted}));
    }
    Ok(ExitCode::SUCCESS)
}

/// Publishes a tombstone for each of `ids` to the config topic; what was deleted, where.
async fn tombstones(producer: &kafka::Producer, ids: &[String], topics: &Topics, output: Output) -> Result<Vec<Value>> {
    let mut deleted = Vec::new();
    for id in ids {
        let (partition, offset) = kafka::send(producer, &topics.config, Some(id.as_bytes()), None, &[]).await?;
        match output {
            Output::Table => println!("deleted {id} from {}", topics.config),
            Output::Json => deleted.push(json!({
                "pipelineId": id, "topic": topics.config, "partition": partition, "offset": offset,
            })),
        }
    }
    Ok(deleted)
}

/// The pipelines the config topic holds now: each key's latest record, a tombstone
/// removing it (read to the topic's end, as the processor restores it).
fn applied_pipelines(kafka: &Connection, topic: &str) -> Result<BTreeSet<String>> {
    let reader = kafka::reader(kafka, "sluice-config-plan")?;
    let partitions = tokio::task::block_in_place(|| kafka::partition_counts((*reader).client(), &[topic]))?;
    let starts: Vec<kafka::Start> = (0..partitions[0].1 as i32)
        .map(|partition| kafka::Start {
            topic: topic.to_string(),
            partition: PartitionId::new(partition),
            offset: 0,
        })
        .collect();
    let records = tokio::task::block_in_place(|| kafka::read_span(&reader, &starts))?;
    let mut held = BTreeSet::new();
    for m in &records {
        let Some(key) = m.key().and_then(|k| std::str::from_utf8(k).ok()) else {
            continue;
        };
        match m.payload() {
            Some(_) => held.insert(key.to_string()),
            None => held.remove(key),
        };
    }
    Ok(held)
}

/// The configs of `dir` as `config apply` publishes them (file, pipeline id, JSON with
/// calendars resolved and variables expanded); `None` when a problem was reported, and
/// then nothing may be published.
pub fn publishable_configs(
    dir: &Path,
    folders: Folders,
    vars: &BTreeMap<String, String>,
    progress: Progress,
) -> Result<Option<Vec<(PathBuf, String, Value)>>> {
    let (source, calendar_errors) = load_calendars(dir, folders.calendars, progress)?;
    let (archetypes, archetype_errors) = load_archetypes(dir, folders.archetypes, progress)?;
    let loaded = load(dir, Some(vars), &archetypes, &source)?;
    let errors = report(&loaded, progress) + calendar_errors.problems + archetype_errors;
    if errors > 0 {
        eprintln!("{errors} problem(s): nothing was published");
        return Ok(None);
    }
    let mut configs = Vec::new();
    for file in loaded {
        let json = file
            .json
            .ok_or_else(|| anyhow!("{} did not parse", file.path.display()))?;
        let id = json
            .pointer("/pipeline/id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        configs.push((file.path, id, json));
    }
    Ok(Some(configs))
}

/// Where progress lines go: stdout, or stderr when stdout carries data (replayed events).
#[derive(Clone, Copy)]
pub enum Progress {
    Stdout,
    Stderr,
}

impl Progress {
    /// Readable lines go to stderr when stdout carries JSON.
    pub fn for_output(output: Output) -> Progress {
        match output {
            Output::Table => Progress::Stdout,
            Output::Json => Progress::Stderr,
        }
    }

    fn say(self, line: String) {
        match self {
            Progress::Stdout => println!("{line}"),
            Progress::Stderr => eprintln!("{line}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendars_default_to_the_folder_beside_the_pipelines() {
        let cases = [
            ("examples/pipelines", "examples/calendars"),
            ("examples/pipelines/", "examples/calendars"),
            ("pipelines", "calendars"),
            ("/srv/sluice/pipelines", "/srv/sluice/calendars"),
            (".", "./../calendars"),
            ("examples/..", "examples/../../calendars"),
        ];
        for (pipelines, calendars) in cases {
            assert_eq!(
                beside(Path::new(pipelines), "calendars"),
                PathBuf::from(calendars),
                "{pipelines}"
            );
        }
    }
}

//! Topic names (with the configurable prefix) and the declarative definitions in `topics/`.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::core::duration::parse_duration;

use super::codec::Family;

/// The names of Sluice's topics under one prefix (default `sluice.`).
#[derive(Debug, Clone)]
pub struct Topics {
    pub prefix: String,
    pub config: String,
    pub sensors: String,
    pub jobs: String,
    pub commands: String,
    pub events: String,
    pub dlq: String,
    /// Every state write, for restore (compacted; partitioned like the inputs).
    pub changelog: String,
    /// Running instances: their partitions and API address (compacted, one partition).
    pub instances: String,
}

/// Which input topic a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputTopic {
    Config,
    Sensors,
    Jobs,
    Commands,
}

impl InputTopic {
    /// Every input, in the order a replay takes records with the same timestamp.
    pub const ALL: [InputTopic; 4] = [
        InputTopic::Config,
        InputTopic::Sensors,
        InputTopic::Jobs,
        InputTopic::Commands,
    ];

    /// The record family with an Avro schema; configs are JSON only.
    pub fn family(self) -> Option<Family> {
        match self {
            InputTopic::Config => None,
            InputTopic::Sensors => Some(Family::Sensors),
            InputTopic::Jobs => Some(Family::Jobs),
            InputTopic::Commands => Some(Family::Commands),
        }
    }

    /// The topic's name without the deployment's prefix: event ids derive from it, so the
    /// same inputs yield the same ids under any prefix (a replay elsewhere, a test).
    pub fn role(self) -> &'static str {
        match self {
            InputTopic::Config => "config",
            InputTopic::Sensors => "sensors",
            InputTopic::Jobs => "jobs",
            InputTopic::Commands => "commands",
        }
    }
}

impl Topics {
    pub fn new(prefix: &str) -> Self {
        let name = |n: &str| format!("{prefix}{n}");
        Topics {
            prefix: prefix.to_string(),
            config: name("config"),
            sensors: name("sensors"),
            jobs: name("jobs"),
            commands: name("commands"),
            events: name("events"),
            dlq: name("dlq"),
            changelog: name("changelog"),
            instances: name("instances"),
        }
    }

    /// The co-partitioned inputs, in the order they are subscribed.
    pub fn inputs(&self) -> [&str; 4] {
        [&self.config, &self.sensors, &self.jobs, &self.commands]
    }

    /// The name of an input topic.
    pub fn input(&self, kind: InputTopic) -> &str {
        match kind {
            InputTopic::Config => &self.config,
            InputTopic::Sensors => &self.sensors,
            InputTopic::Jobs => &self.jobs,
            InputTopic::Commands => &self.commands,
        }
    }

    pub fn input_kind(&self, topic: &str) -> Option<InputTopic> {
        match topic {
            t if t == self.config => Some(InputTopic::Config),
            t if t == self.sensors => Some(InputTopic::Sensors),
            t if t == self.jobs => Some(InputTopic::Jobs),
            t if t == self.commands => Some(InputTopic::Commands),
            _ => None,
        }
    }
}

/// One topic as declared in `topics/*.yaml` (name without prefix).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TopicDefinition {
    pub name: String,
    pub partitions: i32,
    pub cleanup_policy: CleanupPolicy,
    /// `forever`, or a duration such as `7d`.
    pub retention: String,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CleanupPolicy {
    Delete,
    Compact,
}

impl CleanupPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicFile {
    topics: Vec<TopicDefinition>,
}

impl TopicDefinition {
    /// `retention.ms` as Kafka wants it (-1 = forever).
    pub fn retention_ms(&self) -> Result<i64> {
        if self.retention == "forever" {
            return Ok(-1);
        }
        let d = parse_duration(&self.retention).with_context(|| format!("topic {}: retention", self.name))?;
        Ok(d.num_milliseconds())
    }
}

impl TopicDefinition {
    /// The topic configs Sluice sets and checks.
    pub fn configs(&self) -> Result<Vec<(&'static str, String)>> {
        let mut configs = vec![
            ("cleanup.policy", self.cleanup_policy.as_str().to_string()),
            ("retention.ms", self.retention_ms()?.to_string()),
        ];
        if self.cleanup_policy == CleanupPolicy::Compact {
            // A restore trusts a store only this long after its checkpoint.
            let kept = super::changelog::TOMBSTONES_KEPT.num_milliseconds();
            configs.push(("delete.retention.ms", kept.to_string()));
        }
        Ok(configs)
    }

    /// How an existing topic's `actual` configs differ from this definition, one sentence
    /// per config.
    pub fn drift(&self, actual: &std::collections::HashMap<String, Option<String>>) -> Result<Vec<String>> {
        let mut drift = Vec::new();
        for (name, want) in self.configs()? {
            let have = actual.get(name).cloned().flatten();
            if have.as_deref() != Some(want.as_str()) {
                let have = have.map_or_else(|| "unset (the broker's default)".to_string(), |v| format!("{v:?}"));
                drift.push(format!("{name} is {have}, topics/ declares {want:?}"));
            }
        }
        Ok(drift)
    }
}

/// Reads every `*.yaml` file in `dir`, checking that the definitions make sense.
pub fn load_definitions(dir: &Path) -> Result<Vec<TopicDefinition>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading topic definitions in {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut defs: Vec<TopicDefinition> = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        let parsed: TopicFile = serde_yaml_ng::from_str(&text).with_context(|| format!("{}", file.display()))?;
        for def in parsed.topics {
            if def.partitions < 1 {
                bail!("{}: topic {}: partitions must be at least 1", file.display(), def.name);
            }
            def.retention_ms().with_context(|| file.display().to_string())?;
            if defs.iter().any(|d| d.name == def.name) {
                bail!("{}: topic {} is defined twice", file.display(), def.name);
            }
            defs.push(def);
        }
    }
    if defs.is_empty() {
        bail!("no topic definitions found in {}", dir.display());
    }
    Ok(defs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_names_each_config_that_differs() {
        let def = TopicDefinition {
            name: "events".into(),
            partitions: 3,
            cleanup_policy: CleanupPolicy::Delete,
            retention: "90d".into(),
            description: None,
        };
        let mut actual = std::collections::HashMap::new();
        actual.insert("cleanup.policy".to_string(), Some("delete".to_string()));
        actual.insert("retention.ms".to_string(), Some("7776000000".to_string()));
        assert!(def.drift(&actual).unwrap().is_empty());
        actual.insert("cleanup.policy".to_string(), Some("compact".to_string()));
        actual.remove("retention.ms");
        assert_eq!(
            def.drift(&actual).unwrap(),
            [
                r#"cleanup.policy is "compact", topics/ declares "delete""#,
                r#"retention.ms is unset (the broker's default), topics/ declares "7776000000""#
            ]
        );
    }

    #[test]
    fn the_repository_topic_definitions_load_and_cover_every_topic() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topics");
        let defs = load_definitions(&dir).unwrap();
        let topics = Topics::new("");
        for name in topics
            .inputs()
            .into_iter()
            .chain([topics.events.as_str(), topics.dlq.as_str()])
        {
            assert!(defs.iter().any(|d| d.name == name), "topics/ lacks {name}");
        }
        let inputs: Vec<_> = defs.iter().filter(|d| topics.input_kind(&d.name).is_some()).collect();
        assert!(
            inputs.windows(2).all(|w| w[0].partitions == w[1].partitions),
            "inputs must be co-partitioned"
        );
        let config = defs.iter().find(|d| d.name == "config").unwrap();
        assert_eq!(config.cleanup_policy, CleanupPolicy::Compact);
    }
}

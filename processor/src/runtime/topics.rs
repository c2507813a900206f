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

    /// Every topic of the deployment.
    pub fn all(&self) -> [&str; 8] {
        let t = self;
        [
            &t.config,
            &t.sensors,
            &t.jobs,
            &t.commands,
            &t.events,
            &t.dlq,
            &t.changelog,
            &t.instances,
        ]
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
    /// Copies of each partition; unset, `topics apply --replication-factor` or else the
    /// broker's `default.replication.factor` decides.
    #[serde(default)]
    pub replication_factor: Option<i16>,
    /// `min.insync.replicas`: how many copies must have a write before an `acks=all`
    /// producer (every Sluice producer) is told it is stored; unset, as for the factor.
    #[serde(default)]
    pub min_insync_replicas: Option<i16>,
    #[serde(default)]
    pub description: Option<String>,
}

/// Replication for the topics that do not declare their own, from `topics apply`'s flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replication {
    pub factor: Option<i16>,
    pub min_insync: Option<i16>,
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
    /// This topic's replication: its own declaration, else `fallback`'s.
    pub fn with_replication(mut self, fallback: Replication) -> TopicDefinition {
        self.replication_factor = self.replication_factor.or(fallback.factor);
        self.min_insync_replicas = self.min_insync_replicas.or(fallback.min_insync);
        self
    }

    /// The topic configs Sluice sets and checks.
    pub fn configs(&self) -> Result<Vec<(&'static str, String)>> {
        let mut configs = vec![
            ("cleanup.policy", self.cleanup_policy.as_str().to_string()),
            ("retention.ms", self.retention_ms()?.to_string()),
        ];
        if let Some(n) = self.min_insync_replicas {
            configs.push(("min.insync.replicas", n.to_string()));
        }
        if self.cleanup_policy == CleanupPolicy::Compact {
            // A restore trusts a store only this long after its checkpoint.
            let kept = super::changelog::TOMBSTONES_KEPT.num_milliseconds();
            configs.push(("delete.retention.ms", kept.to_string()));
            let lag = super::changelog::SHADOWED_KEPT.num_milliseconds();
            configs.push(("min.compaction.lag.ms", lag.to_string()));
        }
        Ok(configs)
    }

    /// How an existing topic's `actual` configs and `replicas` per partition differ from this
    /// definition, one sentence per config.
    pub fn drift(
        &self,
        actual: &std::collections::HashMap<String, Option<String>>,
        replicas: Option<usize>,
    ) -> Result<Vec<String>> {
        let mut drift = Vec::new();
        if let (Some(want), Some(have)) = (self.replication_factor, replicas) {
            if have != want as usize {
                drift.push(format!(
                    "replication factor is {have}, topics/ declares {want} (change it with kafka-reassign-partitions)"
                ));
            }
        }
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
        let parsed: TopicFile = crate::core::config::yaml::from_str(&text)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("{}", file.display()))?;
        for def in parsed.topics {
            if def.partitions < 1 {
                bail!("{}: topic {}: partitions must be at least 1", file.display(), def.name);
            }
            check_replication(&def.name, def.replication_factor, def.min_insync_replicas)
                .with_context(|| file.display().to_string())?;
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

/// Refuses replication settings that can never hold: a factor under 1, or more in-sync
/// copies required than there are copies (every `acks=all` write would fail).
pub fn check_replication(topic: &str, factor: Option<i16>, min_insync: Option<i16>) -> Result<()> {
    if let Some(f) = factor.filter(|f| *f < 1) {
        bail!("topic {topic}: replicationFactor {f} must be at least 1 (leave it out for the broker's default)");
    }
    if let Some(m) = min_insync.filter(|m| *m < 1) {
        bail!("topic {topic}: minInsyncReplicas {m} must be at least 1");
    }
    if let (Some(f), Some(m)) = (factor, min_insync) {
        if m > f {
            bail!("topic {topic}: minInsyncReplicas {m} exceeds replicationFactor {f}: no write with acks=all could succeed");
        }
    }
    Ok(())
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
            replication_factor: None,
            min_insync_replicas: None,
            description: None,
        };
        let mut actual = std::collections::HashMap::new();
        actual.insert("cleanup.policy".to_string(), Some("delete".to_string()));
        actual.insert("retention.ms".to_string(), Some("7776000000".to_string()));
        assert!(def.drift(&actual, Some(1)).unwrap().is_empty());
        actual.insert("cleanup.policy".to_string(), Some("compact".to_string()));
        actual.remove("retention.ms");
        assert_eq!(
            def.drift(&actual, Some(1)).unwrap(),
            [
                r#"cleanup.policy is "compact", topics/ declares "delete""#,
                r#"retention.ms is unset (the broker's default), topics/ declares "7776000000""#
            ]
        );
    }

    #[test]
    fn declared_replication_is_created_and_checked_and_the_broker_default_otherwise() {
        let text = "topics:\n  - {name: events, partitions: 3, cleanupPolicy: delete, retention: 90d}\n  - {name: changelog, partitions: 3, cleanupPolicy: compact, retention: forever, replicationFactor: 3, minInsyncReplicas: 2}\n";
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t.yaml"), text).unwrap();
        let defs = load_definitions(dir.path()).unwrap();
        let flags = Replication {
            factor: Some(5),
            min_insync: Some(3),
        };
        let [events, changelog] = [0, 1].map(|i| defs[i].clone().with_replication(flags));
        assert_eq!(
            (events.replication_factor, events.min_insync_replicas),
            (Some(5), Some(3))
        );
        assert_eq!(
            (changelog.replication_factor, changelog.min_insync_replicas),
            (Some(3), Some(2))
        );
        let broker_default = defs[0].clone().with_replication(Replication::default());
        assert!(!broker_default
            .configs()
            .unwrap()
            .iter()
            .any(|(k, _)| *k == "min.insync.replicas"));
        // Undeclared, neither is checked against what the broker chose.
        let as_described = |def: &TopicDefinition| -> std::collections::HashMap<_, _> {
            def.configs()
                .unwrap()
                .into_iter()
                .map(|(k, v)| (k.to_string(), Some(v)))
                .collect()
        };
        let mut actual = as_described(&broker_default);
        actual.insert("min.insync.replicas".into(), Some("1".into()));
        assert!(broker_default.drift(&actual, Some(1)).unwrap().is_empty());
        let mut actual = as_described(&changelog);
        assert!(changelog.drift(&actual, Some(3)).unwrap().is_empty());
        actual.insert("min.insync.replicas".into(), Some("1".into()));
        assert_eq!(
            changelog.drift(&actual, Some(1)).unwrap(),
            [
                "replication factor is 1, topics/ declares 3 (change it with kafka-reassign-partitions)",
                r#"min.insync.replicas is "1", topics/ declares "2""#
            ]
        );
    }

    #[test]
    fn replication_that_can_never_hold_is_refused() {
        for (f, m, why) in [
            (Some(0), None, "must be at least 1"),
            (None, Some(0), "must be at least 1"),
            (Some(2), Some(3), "no write with acks=all could succeed"),
        ] {
            let err = check_replication("events", f, m).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
        check_replication("events", Some(3), Some(2)).unwrap();
        check_replication("events", None, Some(2)).unwrap();
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

    /// A compacted topic keeps tombstones and every record long enough: a restore trusts a
    /// store a day after its checkpoint, and a write that does not count must not compact
    /// away the value it shadows before an owner writes it again (found by `sim`).
    #[test]
    fn compacted_topics_keep_tombstones_and_shadowed_values_a_day() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../topics");
        let defs = load_definitions(&dir).unwrap();
        let changelog = defs.iter().find(|d| d.name == "changelog").unwrap();
        let configs: std::collections::BTreeMap<&str, String> = changelog.configs().unwrap().into_iter().collect();
        let day = (24 * 3_600_000).to_string();
        assert_eq!(configs.get("delete.retention.ms"), Some(&day));
        assert_eq!(configs.get("min.compaction.lag.ms"), Some(&day));
        let events = defs.iter().find(|d| d.name == "events").unwrap();
        let configs: std::collections::BTreeMap<&str, String> = events.configs().unwrap().into_iter().collect();
        assert!(
            !configs.contains_key("min.compaction.lag.ms"),
            "a deleted topic has no compaction lag"
        );
    }
}

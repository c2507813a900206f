//! How records look on the wire: JSON (the default), JSON in Kafka Connect's schema/payload
//! envelope, or Avro — framed for a schema registry (magic byte 0 and the 4-byte schema id)
//! when `--schema-registry-url` is set, else as Avro single-object encoding (`C3 01` and
//! the schema's 8-byte fingerprint), so a record always says how to read it.
//!
//! Writing follows `--format` per family; reading accepts every form whatever the flag, so
//! producers can move between formats one at a time. The schemas are `schemas/*.avsc`,
//! compiled in; the config topic stays JSON (it is YAML written by people).

pub mod avro;
pub mod connect;
pub mod protobuf;
pub mod registry;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use apache_avro::headers::{HeaderBuilder, RabinFingerprintHeader};
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::Schema;
use serde_json::Value as Json;

pub use registry::{Framed, Registry, RegistryError, RegistrySettings};

/// The record families with a public schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    Events,
    Sensors,
    Jobs,
    Commands,
}

impl Family {
    pub const ALL: [Family; 4] = [Family::Events, Family::Sensors, Family::Jobs, Family::Commands];

    pub fn name(self) -> &'static str {
        match self {
            Family::Events => "events",
            Family::Sensors => "sensors",
            Family::Jobs => "jobs",
            Family::Commands => "commands",
        }
    }

    /// The `.avsc` text, docs included (what is registered).
    pub fn schema_text(self) -> &'static str {
        match self {
            Family::Events => include_str!("../../../../schemas/event.avsc"),
            Family::Sensors => include_str!("../../../../schemas/sensor.avsc"),
            Family::Jobs => include_str!("../../../../schemas/job.avsc"),
            Family::Commands => include_str!("../../../../schemas/command.avsc"),
        }
    }

    pub fn schema(self) -> &'static Schema {
        static SCHEMAS: LazyLock<BTreeMap<Family, Schema>> = LazyLock::new(|| {
            Family::ALL
                .iter()
                .map(|f| {
                    (
                        *f,
                        Schema::parse_str(f.schema_text()).expect("schemas/*.avsc are valid Avro"),
                    )
                })
                .collect()
        });
        &SCHEMAS[&self]
    }

    fn single_object_header(self) -> Vec<u8> {
        RabinFingerprintHeader::from_schema(self.schema()).build_header()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    /// JSON in Kafka Connect's `{"schema", "payload"}` envelope.
    JsonConnect,
    Avro,
}

impl Format {
    fn parse(text: &str) -> Option<Format> {
        match text {
            "json" => Some(Format::Json),
            "json-connect" => Some(Format::JsonConnect),
            "avro" => Some(Format::Avro),
            _ => None,
        }
    }
}

/// The format written per family (`--format [FAMILY=]FORMAT`, repeatable; JSON by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Formats(BTreeMap<Family, Format>);

impl Default for Formats {
    fn default() -> Self {
        Formats(Family::ALL.iter().map(|f| (*f, Format::Json)).collect())
    }
}

impl Formats {
    /// `avro` sets every family; `events=json-connect` one; later specs win.
    pub fn parse(specs: &[String]) -> Result<Formats, String> {
        let mut formats = Formats::default();
        for spec in specs
            .iter()
            .flat_map(|s| s.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let (families, format) = match spec.split_once('=') {
                Some((family, format)) => {
                    let family = Family::ALL.into_iter().find(|f| f.name() == family.trim()).ok_or_else(|| {
                        format!("--format {spec:?}: unknown family {family:?}; families: events, sensors, jobs, commands")
                    })?;
                    (vec![family], format.trim())
                }
                None => (Family::ALL.to_vec(), spec),
            };
            let format = Format::parse(format).ok_or_else(|| {
                format!("--format {spec:?}: unknown format {format:?}; formats: json, json-connect, avro")
            })?;
            for family in families {
                formats.0.insert(family, format);
            }
        }
        Ok(formats)
    }

    pub fn of(&self, family: Family) -> Format {
        self.0.get(&family).copied().unwrap_or(Format::Json)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("the record does not fit the {family} schema: {reason}")]
    Schema { family: &'static str, reason: String },
    #[error("undecodable Avro: {0}")]
    Avro(String),
    #[error("undecodable Protobuf (schema id {id}): {reason}")]
    Protobuf { id: u32, reason: String },
    #[error("the record is framed for a schema registry (schema id {id}); run with --schema-registry-url to read it")]
    NoRegistry { id: u32 },
    #[error(
        "the record is Avro single-object encoded with a schema this build does not know (fingerprint {fingerprint}); producers on another schema version need a schema registry"
    )]
    UnknownFingerprint { fingerprint: String },
    #[error("the {family} schema is not registered for topic {topic}; register it first (Codec::prepare)")]
    NotPrepared { family: &'static str, topic: String },
}

impl CodecError {
    /// Whether, met while decoding a record, the error is the record's fault (bad input, for
    /// the dead-letter topic): everything but a schema registry that cannot answer for it (an
    /// outage, refused credentials), which the record must wait out.
    pub fn blames_record(&self) -> bool {
        match self {
            CodecError::Registry(e) => e.blames_record(),
            CodecError::NotPrepared { .. } => false,
            _ => true,
        }
    }

    /// Whether the registry may answer for the record on another try (unreachable, timed
    /// out, 5xx, 408, 429): what a record waits out however long it takes.
    pub fn is_transient(&self) -> bool {
        matches!(self, CodecError::Registry(e) if e.is_transient())
    }
}

/// Encodes and decodes records of every family, as `formats` and the registry say.
#[derive(Clone, Debug)]
pub struct Codec {
    formats: Formats,
    registry: Option<Registry>,
}

/// The subject a topic's values are registered under (the registry's TopicNameStrategy).
pub fn subject(topic: &str) -> String {
    format!("{topic}-value")
}

impl Codec {
    pub fn new(formats: Formats, registry_url: Option<&str>) -> Result<Codec, CodecError> {
        let registry = registry_url.map(Registry::new).transpose()?;
        Ok(Codec { formats, registry })
    }

    /// With `registry`, built by the caller (credentials, `--schema-registry-auto-register`).
    pub fn with_registry(formats: Formats, registry: Option<Registry>) -> Codec {
        Codec { formats, registry }
    }

    /// JSON everywhere, no registry.
    pub fn json() -> Codec {
        Codec {
            formats: Formats::default(),
            registry: None,
        }
    }

    pub fn format(&self, family: Family) -> Format {
        self.formats.of(family)
    }

    /// Registers the schema of every Avro-written family in `topics` with the registry, or
    /// takes each subject's latest version when not auto-registering (so [`Self::encode`]
    /// needs no I/O and a compatibility problem stops startup, not a batch). A registry that
    /// cannot answer is retried for a while (see [`registry::STARTUP_PATIENCE`]).
    pub async fn prepare(&self, topics: &[(Family, &str)]) -> Result<(), CodecError> {
        let Some(registry) = &self.registry else { return Ok(()) };
        for (family, topic) in topics {
            if self.format(*family) == Format::Avro {
                registry
                    .prepare(&subject(topic), family.schema_text(), family.schema())
                    .await?;
            }
        }
        Ok(())
    }

    /// `record` (its JSON form) as `family`'s format writes it to `topic`.
    pub fn encode(&self, family: Family, topic: &str, record: &Json) -> Result<Vec<u8>, CodecError> {
        let schema_error = |reason| CodecError::Schema {
            family: family.name(),
            reason,
        };
        match self.format(family) {
            Format::Json => Ok(serde_json::to_vec(record).expect("JSON values serialise")),
            Format::JsonConnect => {
                let envelope = connect::envelope(family.schema(), record).map_err(schema_error)?;
                Ok(serde_json::to_vec(&envelope).expect("JSON values serialise"))
            }
            Format::Avro => {
                let value = avro::to_avro(family.schema(), record).map_err(schema_error)?;
                let mut datum = write(family.schema(), value)?;
                let mut bytes = match &self.registry {
                    Some(registry) => {
                        let writer = registry
                            .writer(&subject(topic))
                            .ok_or_else(|| CodecError::NotPrepared {
                                family: family.name(),
                                topic: topic.to_string(),
                            })?;
                        // The subject's latest version, not Sluice's schema: written as that.
                        if let Some(registered) = &writer.schema {
                            datum = write(registered, read(family.schema(), registered, &datum)?)?;
                        }
                        let mut header = vec![0];
                        header.extend_from_slice(&writer.id.to_be_bytes());
                        header
                    }
                    None => family.single_object_header(),
                };
                bytes.extend_from_slice(&datum);
                Ok(bytes)
            }
        }
    }

    /// Whether the schema registry answers (see [`Registry::answers`]); false without one.
    pub async fn registry_answers(&self) -> bool {
        match &self.registry {
            Some(registry) => registry.answers().await,
            None => false,
        }
    }

    /// A record of `family` in its JSON form, whichever format it was written in.
    pub async fn decode<'a>(&self, family: Family, payload: &'a [u8]) -> Result<Cow<'a, [u8]>, CodecError> {
        let reader = family.schema();
        let avro = match payload {
            [0, a, b, c, d, datum @ ..] => {
                let id = u32::from_be_bytes([*a, *b, *c, *d]);
                let registry = self.registry.as_ref().ok_or(CodecError::NoRegistry { id })?;
                match registry.framed(id).await? {
                    Framed::Avro(writer) => read(&writer, reader, datum)?,
                    // Confluent's JSON Schema serializer: the JSON after the framing.
                    Framed::Json => return Ok(Cow::Borrowed(datum)),
                    // Confluent's Protobuf serializer: the message, as its JSON.
                    Framed::Protobuf(schema) => {
                        return protobuf::to_json(&schema, datum)
                            .map(Cow::Owned)
                            .map_err(|reason| CodecError::Protobuf { id, reason })
                    }
                }
            }
            [0xC3, 0x01, rest @ ..] if rest.len() >= 8 => {
                let header = family.single_object_header();
                if payload[..10] != header[..] {
                    let fingerprint = rest[..8].iter().map(|b| format!("{b:02x}")).collect();
                    return Err(CodecError::UnknownFingerprint { fingerprint });
                }
                read(reader, reader, &rest[8..])?
            }
            _ => {
                // JSON; unwrapped if it is a Connect envelope, else passed on as it is.
                let unwrapped = serde_json::from_slice::<Json>(payload)
                    .ok()
                    .and_then(|v| connect::unwrap(reader, &v));
                return Ok(match unwrapped {
                    Some(record) => Cow::Owned(serde_json::to_vec(&record).expect("JSON values serialise")),
                    None => Cow::Borrowed(payload),
                });
            }
        };
        let json = avro::to_json(reader, &avro).map_err(|reason| CodecError::Schema {
            family: family.name(),
            reason,
        })?;
        Ok(Cow::Owned(serde_json::to_vec(&json).expect("JSON values serialise")))
    }
}

/// `value` as a datum of `schema`.
fn write(schema: &Schema, value: apache_avro::types::Value) -> Result<Vec<u8>, CodecError> {
    GenericDatumWriter::builder(schema)
        .build()
        .and_then(|w| w.write_value_to_vec(value))
        .map_err(|e| CodecError::Avro(e.to_string()))
}

/// One datum written with `writer`, resolved to `reader` (Avro's schema evolution).
fn read(writer: &Schema, reader: &Schema, mut datum: &[u8]) -> Result<apache_avro::types::Value, CodecError> {
    GenericDatumReader::builder(writer)
        .reader_schema(reader)
        .build()
        .and_then(|r| r.read_value(&mut datum))
        .map_err(|e| CodecError::Avro(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::extract::{Path, State};
    use axum::http::StatusCode;
    use axum::routing::{get, post};
    use axum::Router;
    use chrono::{TimeZone, Utc};
    use serde_json::json;

    use super::*;
    use crate::core::events::{Event, EventType};
    use crate::core::records;

    fn every_event() -> Vec<Event> {
        let at = Utc.with_ymd_and_hms(2026, 11, 21, 6, 12, 3).unwrap() + chrono::TimeDelta::milliseconds(125);
        EventType::ALL
            .iter()
            .enumerate()
            .map(|(i, kind)| Event {
                event_id: format!("{i:032x}"),
                kind: *kind,
                category: kind.category(),
                pipeline_id: "gold-revenue".into(),
                schedule_id: (i % 2 == 0).then(|| "daily".into()),
                date: (i % 3 != 0).then(|| "2026-11-21".into()),
                run_id: (i % 2 == 1).then(|| format!("gold-revenue.daily.2026-11-21.{i}").into()),
                attempt: (i % 2 == 1).then_some(i as u32),
                timestamp: at,
                message: format!("{} happened", kind.name()),
                detail: json!({"n": i, "nested": {"ok": true}, "list": [1, "two"]})
                    .as_object()
                    .unwrap()
                    .clone(),
            })
            .collect()
    }

    /// The JSON Schema lists every event type, and each category's types under it.
    #[test]
    fn the_event_json_schema_names_every_event_type_in_its_category() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../../../schemas/event.schema.json")).unwrap();
        let names = |v: &serde_json::Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_string())
                .collect()
        };
        let all: Vec<String> = EventType::ALL.iter().map(|t| t.name().to_string()).collect();
        assert_eq!(names(&schema["properties"]["type"]["enum"]), all);
        let mut listed = Vec::new();
        for rule in schema["allOf"].as_array().unwrap() {
            let Some(category) = rule["then"]["properties"]["category"]["const"].as_str() else {
                continue;
            };
            let types = names(&rule["if"]["properties"]["type"]["enum"]);
            let want: Vec<String> = (EventType::ALL.iter())
                .filter(|t| serde_json::to_value(t.category()).unwrap() == category)
                .map(|t| t.name().to_string())
                .collect();
            assert_eq!(types, want, "category {category}");
            listed.push(category.to_string());
        }
        assert_eq!(names(&schema["properties"]["category"]["enum"]), listed);
    }

    #[test]
    fn the_event_schema_names_every_event_type_and_an_unknown_default() {
        let Schema::Record(record) = Family::Events.schema() else {
            panic!("a record")
        };
        let field = record.fields.iter().find(|f| f.name == "type").unwrap();
        let Schema::Enum(e) = &field.schema else {
            panic!("an enum")
        };
        let mut want: Vec<&str> = EventType::ALL.iter().map(|t| t.name()).collect();
        want.push("UNKNOWN");
        assert_eq!(e.symbols, want, "schemas/event.avsc must list every event type");
        assert_eq!(e.default.as_deref(), Some("UNKNOWN"));
    }

    #[tokio::test]
    async fn every_event_type_round_trips_through_avro_and_the_connect_envelope() {
        for format in ["avro", "json-connect"] {
            let codec = Codec::new(Formats::parse(&[format.into()]).unwrap(), None).unwrap();
            for event in every_event() {
                let json = serde_json::to_value(&event).unwrap();
                let bytes = codec.encode(Family::Events, "sluice.events", &json).unwrap();
                if format == "avro" {
                    assert_eq!(bytes[..2], [0xC3, 0x01], "single-object encoding without a registry");
                }
                let back: Event = serde_json::from_slice(&codec.decode(Family::Events, &bytes).await.unwrap()).unwrap();
                assert_eq!(back, event, "{format}");
            }
        }
    }

    /// Every example in schemas/examples, as Avro and back, still decodes as its topic does.
    #[tokio::test]
    async fn every_schema_example_round_trips_through_avro() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas/examples");
        let codec = Codec::new(Formats::parse(&["avro".into()]).unwrap(), None).unwrap();
        let key = Some(b"gold-revenue".as_slice());
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let family = match name.split(['.', '-']).next().unwrap() {
                "event" => Family::Events,
                "sensor" => Family::Sensors,
                "job" => Family::Jobs,
                "command" => Family::Commands,
                _ => continue, // config stays JSON
            };
            let json: Json = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            let avro = codec.encode(family, "t", &json).unwrap();
            let back = codec.decode(family, &avro).await.unwrap();
            let back_json: Json = serde_json::from_slice(&back).unwrap();
            match family {
                Family::Sensors => assert_eq!(
                    records::decode_sensor(key, Some(&back)).unwrap(),
                    records::decode_sensor(key, Some(&serde_json::to_vec(&json).unwrap())).unwrap(),
                    "{name}"
                ),
                Family::Jobs => assert_eq!(
                    records::decode_job(key, Some(&back)).unwrap(),
                    records::decode_job(key, Some(&serde_json::to_vec(&json).unwrap())).unwrap(),
                    "{name}"
                ),
                Family::Commands => assert_eq!(
                    records::decode_command(key, Some(&back)).unwrap(),
                    records::decode_command(key, Some(&serde_json::to_vec(&json).unwrap())).unwrap(),
                    "{name}"
                ),
                Family::Events => assert_eq!(
                    serde_json::from_value::<Event>(back_json).unwrap(),
                    serde_json::from_value::<Event>(json).unwrap(),
                    "{name}"
                ),
            }
            seen += 1;
        }
        assert_eq!(
            seen, 6,
            "one example per Avro family, an evaluator's failed reading and a reading to add"
        );
    }

    #[tokio::test]
    async fn what_cannot_be_encoded_or_read_says_why() {
        let codec = Codec::new(Formats::parse(&["sensors=avro".into()]).unwrap(), None).unwrap();
        let nested = json!({"pipelineId": "p", "key": "k", "data": {"deep": {"x": 1}}});
        let e = codec.encode(Family::Sensors, "t", &nested).unwrap_err().to_string();
        assert!(
            e.contains("data.deep") && e.contains("fits none of null, boolean, long, double, string"),
            "{e}"
        );
        let e = codec
            .decode(Family::Sensors, &[0, 0, 0, 0, 7, 1])
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("schema id 7") && e.contains("--schema-registry-url"), "{e}");
        let mut foreign = vec![0xC3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8];
        foreign.push(0);
        let e = codec.decode(Family::Sensors, &foreign).await.unwrap_err().to_string();
        assert!(e.contains("0102030405060708"), "{e}");
        // JSON passes through untouched, whatever the flag.
        let plain = br#"{"pipelineId":"p","key":"k"}"#;
        assert!(matches!(
            codec.decode(Family::Sensors, plain).await.unwrap(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn formats_per_family() {
        let f = Formats::parse(&["avro".into(), "events=json-connect".into()]).unwrap();
        assert_eq!(
            Family::ALL.map(|x| f.of(x)),
            [Format::JsonConnect, Format::Avro, Format::Avro, Format::Avro]
        );
        let f = Formats::parse(&["sensors=avro,jobs=avro".into()]).unwrap();
        assert_eq!(f.of(Family::Events), Format::Json);
        assert_eq!(f.of(Family::Jobs), Format::Avro);
        assert!(Formats::parse(&["evnts=avro".into()])
            .unwrap_err()
            .contains("families: events"));
        assert!(Formats::parse(&["protobuf".into()])
            .unwrap_err()
            .contains("formats: json"));
    }

    /// A loopback server speaking the registry endpoints Sluice uses.
    #[derive(Clone, Default)]
    struct FakeRegistry {
        schemas: Arc<Mutex<Vec<(String, String)>>>,
        incompatible: Arc<Mutex<bool>>,
        requests: Arc<Mutex<Vec<String>>>,
    }

    async fn register(
        State(r): State<FakeRegistry>,
        Path(subject): Path<String>,
        body: String,
    ) -> (StatusCode, String) {
        r.requests.lock().unwrap().push(format!("POST {subject}"));
        if *r.incompatible.lock().unwrap() {
            let body =
                json!({"error_code": 409, "message": "Schema being registered is incompatible with an earlier schema"});
            return (StatusCode::CONFLICT, body.to_string());
        }
        let schema = serde_json::from_str::<Json>(&body).unwrap()["schema"]
            .as_str()
            .unwrap()
            .to_string();
        let mut all = r.schemas.lock().unwrap();
        let id = match all.iter().position(|(s, text)| *s == subject && *text == schema) {
            Some(i) => i + 1,
            None => {
                all.push((subject, schema));
                all.len()
            }
        };
        (StatusCode::OK, json!({"id": id}).to_string())
    }

    async fn by_id(State(r): State<FakeRegistry>, Path(id): Path<usize>) -> (StatusCode, String) {
        r.requests.lock().unwrap().push(format!("GET {id}"));
        match r.schemas.lock().unwrap().get(id.wrapping_sub(1)) {
            Some((_, text)) => (StatusCode::OK, json!({"schema": text}).to_string()),
            None => (
                StatusCode::NOT_FOUND,
                json!({"error_code": 40403, "message": "Schema not found"}).to_string(),
            ),
        }
    }

    async fn registry() -> (String, FakeRegistry) {
        let state = FakeRegistry::default();
        let app = Router::new()
            .route("/subjects/{subject}/versions", post(register))
            .route("/schemas/ids/{id}", get(by_id))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, state)
    }

    #[tokio::test]
    async fn the_registry_frames_registers_once_and_serves_writers_by_id() {
        let (url, fake) = registry().await;
        let formats = Formats::parse(&["avro".into()]).unwrap();
        let writer = Codec::new(formats.clone(), Some(&url)).unwrap();
        let event = serde_json::to_value(&every_event()[0]).unwrap();
        let e = writer.encode(Family::Events, "sluice.events", &event).unwrap_err();
        assert!(e.to_string().contains("not registered"), "{e}");
        writer
            .prepare(&[(Family::Events, "sluice.events"), (Family::Jobs, "sluice.jobs")])
            .await
            .unwrap();
        writer.prepare(&[(Family::Events, "sluice.events")]).await.unwrap();
        let registered = fake.schemas.lock().unwrap().clone();
        assert_eq!(
            registered.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(),
            ["sluice.events-value", "sluice.jobs-value"]
        );
        assert!(registered[0].1.contains("\"doc\""), "registered with its docs");
        assert_eq!(
            fake.requests.lock().unwrap().len(),
            2,
            "cached after the first registration"
        );
        let bytes = writer.encode(Family::Events, "sluice.events", &event).unwrap();
        assert_eq!(bytes[..5], [0, 0, 0, 0, 1], "magic byte and schema id");

        // Another process reads it: the writer schema comes from the registry, once.
        let reader = Codec::new(Formats::default(), Some(&url)).unwrap();
        for _ in 0..2 {
            let back: Event = serde_json::from_slice(&reader.decode(Family::Events, &bytes).await.unwrap()).unwrap();
            assert_eq!(back, every_event()[0]);
        }
        assert_eq!(
            fake.requests
                .lock()
                .unwrap()
                .iter()
                .filter(|r| r.starts_with("GET"))
                .count(),
            1
        );
        let e = reader
            .decode(Family::Events, &[0, 0, 0, 0, 9, 0])
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("no schema with id 9"), "{e}");

        *fake.incompatible.lock().unwrap() = true;
        let other = Codec::new(formats, Some(&url)).unwrap();
        let e = other
            .prepare(&[(Family::Sensors, "sluice.sensors")])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"sluice.sensors-value\"") && e.contains("incompatible"),
            "{e}"
        );
        let away = Registry::new("http://127.0.0.1:1")
            .unwrap()
            .with_patience(std::time::Duration::from_millis(500));
        let e = Codec::with_registry(Formats::parse(&["avro".into()]).unwrap(), Some(away))
            .prepare(&[(Family::Events, "e")])
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gave up") && e.contains("cannot be reached") && e.contains("--schema-registry-url"),
            "{e}"
        );
    }
}

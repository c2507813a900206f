//! Kafka Connect's JSON converter envelope (`schemas.enable=true`): `{"schema": …,
//! "payload": …}`, so a JDBC or other schema-needing sink can take JSON events without a
//! schema registry. The Connect schema is derived from the record's Avro schema.

use apache_avro::schema::Schema;
use apache_avro::types::Value as Avro;
use serde_json::{json, Map, Value as Json};

use super::avro::to_avro;

/// `record` (JSON form) wrapped with its Connect schema.
pub fn envelope(schema: &Schema, record: &Json) -> Result<Json, String> {
    let avro = to_avro(schema, record)?;
    Ok(json!({"schema": connect_schema(schema, false), "payload": payload(schema, &avro)}))
}

/// The record inside an envelope, back in its JSON form (JSON-text fields parsed,
/// timestamps as epoch milliseconds, which the JSON form accepts), or `None` for a value
/// that is not an envelope.
pub fn unwrap(schema: &Schema, value: &Json) -> Option<Json> {
    let object = value.as_object()?;
    if object.len() != 2 || !object.contains_key("schema") {
        return None;
    }
    let mut payload = object.get("payload")?.clone();
    if let (Schema::Record(record), Json::Object(fields)) = (schema, &mut payload) {
        for field in &record.fields {
            let json_text = field.custom_attributes.get("sluice.json") == Some(&Json::Bool(true));
            let restored = match fields.get(&field.name) {
                Some(Json::String(text)) if json_text => serde_json::from_str(text).ok(),
                // Connect timestamps are epoch milliseconds; the JSON form is RFC 3339.
                Some(Json::Number(ms)) if is_timestamp(&field.schema) => ms
                    .as_i64()
                    .and_then(chrono::DateTime::from_timestamp_millis)
                    .map(|t| Json::String(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))),
                _ => None,
            };
            if let Some(value) = restored {
                fields.insert(field.name.clone(), value);
            }
        }
        fields.retain(|_, v| !v.is_null());
    }
    Some(payload)
}

fn is_timestamp(schema: &Schema) -> bool {
    match schema {
        Schema::TimestampMillis | Schema::TimestampMicros => true,
        Schema::Union(union) => union.variants().iter().any(is_timestamp),
        _ => false,
    }
}

fn connect_schema(schema: &Schema, optional: bool) -> Json {
    let simple = |kind: &str| json!({"type": kind, "optional": optional});
    match schema {
        Schema::Record(record) => {
            let fields: Vec<Json> = record
                .fields
                .iter()
                .map(|f| {
                    let mut s = connect_schema(&f.schema, false);
                    s["field"] = Json::String(f.name.clone());
                    s
                })
                .collect();
            json!({"type": "struct", "name": record.name.fullname(None), "optional": optional, "fields": fields})
        }
        Schema::Union(union) => {
            let others: Vec<&Schema> = union.variants().iter().filter(|s| !matches!(s, Schema::Null)).collect();
            match others.as_slice() {
                [one] => connect_schema(one, union.is_nullable()),
                // Connect has no unions: mixed scalars travel as their JSON text.
                _ => json!({"type": "string", "optional": union.is_nullable()}),
            }
        }
        Schema::Boolean => simple("boolean"),
        Schema::Int => simple("int32"),
        Schema::Long => simple("int64"),
        Schema::Double => simple("double"),
        Schema::TimestampMillis | Schema::TimestampMicros => json!({
            "type": "int64", "name": "org.apache.kafka.connect.data.Timestamp", "version": 1, "optional": optional
        }),
        Schema::Map(map) => json!({
            "type": "map", "keys": {"type": "string", "optional": false},
            "values": connect_schema(&map.types, false), "optional": optional
        }),
        _ => simple("string"),
    }
}

fn payload(schema: &Schema, avro: &Avro) -> Json {
    match (schema, avro) {
        (Schema::Record(record), Avro::Record(values)) => {
            let mut object = Map::new();
            for (field, (name, value)) in record.fields.iter().zip(values) {
                object.insert(name.clone(), payload(&field.schema, value));
            }
            Json::Object(object)
        }
        (Schema::Union(union), Avro::Union(i, value)) => {
            let others = union.variants().iter().filter(|s| !matches!(s, Schema::Null)).count();
            match (others, value.as_ref()) {
                (_, Avro::Null) => Json::Null,
                (1, v) => payload(&union.variants()[*i as usize], v),
                (_, v) => Json::String(scalar_text(v)),
            }
        }
        (Schema::Map(map), Avro::Map(entries)) => Json::Object(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), payload(&map.types, v)))
                .collect(),
        ),
        (_, Avro::TimestampMillis(ms)) => Json::from(*ms),
        (_, Avro::TimestampMicros(us)) => Json::from(us.div_euclid(1000)),
        (_, Avro::Boolean(b)) => Json::Bool(*b),
        (_, Avro::Int(n)) => Json::from(*n),
        (_, Avro::Long(n)) => Json::from(*n),
        (_, Avro::Double(f)) => Json::from(*f),
        (_, Avro::String(s)) | (_, Avro::Enum(_, s)) => Json::String(s.clone()),
        _ => Json::Null,
    }
}

fn scalar_text(v: &Avro) -> String {
    match v {
        Avro::String(s) => s.clone(),
        Avro::Boolean(b) => b.to_string(),
        Avro::Long(n) => n.to_string(),
        Avro::Int(n) => n.to_string(),
        Avro::Double(f) => f.to_string(),
        other => format!("{other:?}"),
    }
}

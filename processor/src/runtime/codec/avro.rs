//! The JSON form of Sluice's records ⇄ Avro values of the schemas in `schemas/*.avsc`.
//!
//! One schema-guided conversion serves every record, both ways, so the JSON contract stays
//! the single decoder of input records (an Avro record becomes its JSON form, then goes
//! through the same validation) and events are written from their JSON form.
//!
//! Mapping: timestamps (`timestamp-millis`) are RFC 3339 strings in JSON (numbers are read
//! as epoch seconds below 1e11, else milliseconds); a field marked `"sluice.json": true`
//! holds JSON text in Avro and the JSON value itself in JSON; absent optional fields are
//! left out of the JSON form; enums are their symbol.

use apache_avro::schema::{RecordField, RecordSchema, Schema, UnionSchema};
use apache_avro::types::Value as Avro;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Number, Value as Json};

use crate::core::rules::as_timestamp;

/// The field attribute that marks JSON carried as text.
const JSON_TEXT: &str = "sluice.json";

fn is_json_text(field: &RecordField) -> bool {
    field.custom_attributes.get(JSON_TEXT) == Some(&Json::Bool(true))
}

/// `json` as a value of `schema`; the error names the field at fault.
pub fn to_avro(schema: &Schema, json: &Json) -> Result<Avro, String> {
    convert_in(schema, json, "")
}

fn convert_in(schema: &Schema, json: &Json, path: &str) -> Result<Avro, String> {
    let bad = |want: &str| Err(format!("{}: {json} is not {want}", display(path)));
    match schema {
        Schema::Record(record) => match json {
            Json::Object(object) => record_in(record, object, path),
            _ => bad("an object"),
        },
        Schema::Union(union) => union_in(union, json, path),
        Schema::Null => match json {
            Json::Null => Ok(Avro::Null),
            _ => bad("null"),
        },
        Schema::Boolean => json.as_bool().map(Avro::Boolean).map_or_else(|| bad("a boolean"), Ok),
        Schema::Int => match integer(json).and_then(|n| i32::try_from(n).ok()) {
            Some(n) => Ok(Avro::Int(n)),
            None => bad("a 32-bit integer"),
        },
        Schema::Long => integer(json).map(Avro::Long).map_or_else(|| bad("an integer"), Ok),
        Schema::Double => json.as_f64().map(Avro::Double).map_or_else(|| bad("a number"), Ok),
        Schema::String => match json {
            Json::String(s) => Ok(Avro::String(s.clone())),
            _ => bad("a string"),
        },
        Schema::Enum(e) => match json.as_str().and_then(|s| e.symbols.iter().position(|x| x == s)) {
            Some(i) => Ok(Avro::Enum(i as u32, e.symbols[i].clone())),
            None => bad(&format!("one of {}", e.symbols.join(", "))),
        },
        Schema::TimestampMillis => match as_timestamp(json) {
            Some(t) => Ok(Avro::TimestampMillis(t.timestamp_millis())),
            None => bad("an RFC 3339 timestamp"),
        },
        Schema::TimestampMicros => match as_timestamp(json) {
            Some(t) => Ok(Avro::TimestampMicros(t.timestamp_micros())),
            None => bad("an RFC 3339 timestamp"),
        },
        Schema::Map(map) => match json {
            Json::Object(object) => map_in(&map.types, object, path),
            _ => bad("an object"),
        },
        other => Err(format!(
            "{}: the schema type {other:?} is not used by Sluice",
            display(path)
        )),
    }
}

/// `object` as a value of `record`, field by field.
fn record_in(record: &RecordSchema, object: &Map<String, Json>, path: &str) -> Result<Avro, String> {
    let mut fields = Vec::with_capacity(record.fields.len());
    for field in &record.fields {
        let path = join(path, &field.name);
        let given = object.get(&field.name).filter(|v| !v.is_null());
        let value = match (given, &field.default) {
            // JSON-text fields carry the JSON value itself in the JSON form.
            (Some(v), _) if is_json_text(field) => Json::String(v.to_string()),
            (Some(v), _) => v.clone(),
            // Absent: the default (already in Avro's JSON form), else null.
            (None, Some(default)) if !accepts_null(&field.schema) => default.clone(),
            (None, _) => Json::Null,
        };
        fields.push((field.name.clone(), convert_in(&field.schema, &value, &path)?));
    }
    Ok(Avro::Record(fields))
}

/// Every value of `object` as a value of `values`.
fn map_in(values: &Schema, object: &Map<String, Json>, path: &str) -> Result<Avro, String> {
    let mut out = std::collections::HashMap::with_capacity(object.len());
    for (k, v) in object {
        out.insert(k.clone(), convert_in(values, v, &join(path, k))?);
    }
    Ok(Avro::Map(out))
}

fn accepts_null(schema: &Schema) -> bool {
    matches!(schema, Schema::Null) || matches!(schema, Schema::Union(u) if u.is_nullable())
}

/// The branch of `union` that takes `json`: null, else the first branch that converts.
fn union_in(union: &UnionSchema, json: &Json, path: &str) -> Result<Avro, String> {
    let branches = union.variants();
    let order: Vec<usize> = match json {
        Json::Null => branches
            .iter()
            .position(|s| matches!(s, Schema::Null))
            .into_iter()
            .collect(),
        // An integer prefers long over double; a whole double stays a double only if no long.
        _ => (0..branches.len())
            .filter(|i| !matches!(branches[*i], Schema::Null))
            .collect(),
    };
    for i in order {
        if let Ok(v) = convert_in(&branches[i], json, path) {
            return Ok(Avro::Union(i as u32, Box::new(v)));
        }
    }
    let names: Vec<String> = branches
        .iter()
        .map(|s| format!("{:?}", apache_avro::schema::SchemaKind::from(s)).to_lowercase())
        .collect();
    Err(format!("{}: {json} fits none of {}", display(path), names.join(", ")))
}

/// An integral JSON number, or a string holding one (hours may come as "07").
fn integer(json: &Json) -> Option<i64> {
    match json {
        Json::Number(n) => n.as_i64(),
        Json::String(s) => s.trim().trim_start_matches('+').parse().ok(),
        _ => None,
    }
}

/// An Avro value of `schema` in its JSON form.
pub fn to_json(schema: &Schema, avro: &Avro) -> Result<Json, String> {
    convert_out(schema, avro, "")
}

fn convert_out(schema: &Schema, avro: &Avro, path: &str) -> Result<Json, String> {
    let unexpected = || Err(format!("{}: {avro:?} does not match the schema", display(path)));
    Ok(match (schema, avro) {
        (Schema::Record(record), Avro::Record(values)) => {
            let mut object = Map::new();
            for field in &record.fields {
                let Some((_, value)) = values.iter().find(|(name, _)| *name == field.name) else {
                    continue;
                };
                let path = join(path, &field.name);
                let mut json = convert_out(&field.schema, value, &path)?;
                if is_json_text(field) {
                    if let Json::String(text) = &json {
                        json = serde_json::from_str(text)
                            .map_err(|e| format!("{}: not JSON text: {e}", display(&path)))?;
                    }
                }
                if !json.is_null() {
                    object.insert(field.name.clone(), json);
                }
            }
            Json::Object(object)
        }
        (Schema::Union(union), Avro::Union(i, value)) => match union.variants().get(*i as usize) {
            Some(branch) => convert_out(branch, value, path)?,
            None => return unexpected(),
        },
        (_, Avro::Null) => Json::Null,
        (_, Avro::Boolean(b)) => Json::Bool(*b),
        (_, Avro::Int(n)) => Json::from(*n),
        (_, Avro::Long(n)) => Json::from(*n),
        (_, Avro::Float(f)) => Number::from_f64(f64::from(*f)).map_or(Json::Null, Json::Number),
        (_, Avro::Double(f)) => Number::from_f64(*f).map_or(Json::Null, Json::Number),
        (_, Avro::String(s)) | (_, Avro::Enum(_, s)) => Json::String(s.clone()),
        (_, Avro::TimestampMicros(us)) => timestamp(DateTime::from_timestamp_micros(*us)),
        (_, Avro::TimestampMillis(ms)) => timestamp(DateTime::from_timestamp_millis(*ms)),
        (Schema::Map(map), Avro::Map(entries)) => {
            let mut object = Map::new();
            for (k, v) in entries {
                object.insert(k.clone(), convert_out(&map.types, v, &join(path, k))?);
            }
            Json::Object(object)
        }
        _ => return unexpected(),
    })
}

fn timestamp(t: Option<DateTime<Utc>>) -> Json {
    t.map_or(Json::Null, |t| {
        Json::String(t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    })
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn display(path: &str) -> &str {
    if path.is_empty() {
        "the record"
    } else {
        path
    }
}

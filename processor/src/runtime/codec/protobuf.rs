//! Records framed by Confluent's Protobuf serializer: after the magic byte and the schema
//! id, the *message indexes* (which message of the schema's file the record is: a
//! zig-zag varint count, then that many zig-zag varints, the path through nested messages;
//! a lone 0 means the file's first message), then the message in Protobuf's binary form.
//!
//! The registry's schema (`.proto` text, with the files it references) is compiled here
//! with protox, and a record is read as a dynamic message and written as its canonical
//! JSON form (field names in lowerCamelCase, as Sluice's JSON records name theirs; 64-bit
//! integers as numbers), which is then read as any JSON record is.

use std::collections::HashMap;
use std::sync::Arc;

use prost_reflect::{DescriptorPool, DynamicMessage, FileDescriptor, MessageDescriptor, SerializeOptions};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

/// The file name the registry's own schema is compiled under.
const ROOT: &str = "registry-schema.proto";
/// The most message indexes a record may name (nesting deeper than this is refused).
const MAX_INDEXES: usize = 32;

/// A registry schema, compiled: its file, whose messages records name by index.
#[derive(Debug, Clone)]
pub struct Protobuf {
    file: FileDescriptor,
}

/// The registry's schema text and the files it references (import name → text).
struct Sources {
    root: String,
    references: HashMap<String, String>,
}

impl FileResolver for Sources {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        let text = if name == ROOT {
            &self.root
        } else {
            self.references
                .get(name)
                .ok_or_else(|| protox::Error::file_not_found(name))?
        };
        File::from_source(name, text)
    }
}

/// Compiles `schema` (and `references`, by the names its imports use); the well-known
/// types (`google/protobuf/*.proto`) are built in.
pub fn compile(schema: &str, references: HashMap<String, String>) -> Result<Arc<Protobuf>, String> {
    let mut resolver = ChainFileResolver::new();
    resolver.add(Sources {
        root: schema.to_string(),
        references,
    });
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler.open_file(ROOT).map_err(|e| e.to_string())?;
    let pool: DescriptorPool = compiler.descriptor_pool();
    let file = pool
        .get_file_by_name(ROOT)
        .ok_or_else(|| "the compiled schema has no file".to_string())?;
    Ok(Arc::new(Protobuf { file }))
}

/// The JSON of the record `datum` (what follows the schema id) written with `schema`.
pub fn to_json(schema: &Protobuf, datum: &[u8]) -> Result<Vec<u8>, String> {
    let (indexes, message) = message_indexes(datum)?;
    let descriptor = schema.message(&indexes)?;
    let decoded = DynamicMessage::decode(descriptor.clone(), message)
        .map_err(|e| format!("not a {} message: {e}", descriptor.full_name()))?;
    let options = SerializeOptions::new().stringify_64_bit_integers(false);
    let mut out = serde_json::Serializer::new(Vec::new());
    decoded
        .serialize_with_options(&mut out, &options)
        .map_err(|e| format!("{} as JSON: {e}", descriptor.full_name()))?;
    Ok(out.into_inner())
}

impl Protobuf {
    /// The message `indexes` name: the file's top-level message at the first, then nested
    /// messages at the rest.
    fn message(&self, indexes: &[usize]) -> Result<MessageDescriptor, String> {
        let missing = || format!("the schema has no message at indexes {indexes:?}");
        let (first, rest) = indexes.split_first().ok_or_else(missing)?;
        let mut message = self.file.messages().nth(*first).ok_or_else(missing)?;
        for i in rest {
            let child = message.child_messages().nth(*i);
            message = child.ok_or_else(missing)?;
        }
        Ok(message)
    }
}

/// The message indexes at the start of `datum`, and the message after them.
fn message_indexes(datum: &[u8]) -> Result<(Vec<usize>, &[u8]), String> {
    let mut rest = datum;
    let count = zigzag(&mut rest)?;
    if count == 0 {
        return Ok((vec![0], rest));
    }
    if count < 0 || count as usize > MAX_INDEXES {
        return Err(format!("{count} message indexes: not a Protobuf-framed record"));
    }
    let mut indexes = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let index = zigzag(&mut rest)?;
        let index = usize::try_from(index).map_err(|_| format!("message index {index}"))?;
        indexes.push(index);
    }
    Ok((indexes, rest))
}

/// One zig-zag varint (Protobuf's `sint32`) from the front of `input`.
fn zigzag(input: &mut &[u8]) -> Result<i64, String> {
    let mut value: u64 = 0;
    for (i, byte) in input.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *input = &input[i + 1..];
            return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
        }
    }
    Err("the message indexes end early".into())
}

/// A record as Confluent's Protobuf serializer frames it, without the magic byte and id:
/// the message `indexes` (empty: the short form for the file's first message), then the
/// message `json` describes, in binary. What a producer writes; Sluice reads it.
pub fn frame(schema: &Protobuf, indexes: &[usize], json: &str) -> Result<Vec<u8>, String> {
    let descriptor = schema.message(if indexes.is_empty() { &[0] } else { indexes })?;
    let mut reader = serde_json::Deserializer::from_str(json);
    let message = DynamicMessage::deserialize(descriptor, &mut reader).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut varint = |n: i64| {
        let mut v = ((n << 1) ^ (n >> 63)) as u64;
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
    };
    varint(indexes.len() as i64);
    for i in indexes {
        varint(*i as i64);
    }
    out.extend(prost::Message::encode_to_vec(&message));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const SENSOR: &str = r#"
syntax = "proto3";
package acme.sensors;
import "google/protobuf/struct.proto";
message Envelope {
  message Reading {
    string pipeline_id = 1;
    string key = 2;
    google.protobuf.Struct data = 3;
    string date = 4;
    int64 sequence = 5;
  }
}
message Other { string x = 1; }
"#;

    #[test]
    fn a_nested_message_named_by_its_indexes_reads_as_sluices_json() {
        let schema = compile(SENSOR, HashMap::new()).unwrap();
        let reading = r#"{"pipelineId": "gold", "key": "orders-count", "data": {"count": 5000, "ok": true},
                          "date": "2026-11-27", "sequence": "9007199254740993"}"#;
        let record = frame(&schema, &[0, 0], reading).unwrap();
        let json: serde_json::Value = serde_json::from_slice(&to_json(&schema, &record).unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"pipelineId": "gold", "key": "orders-count", "data": {"count": 5000.0, "ok": true},
                               "date": "2026-11-27", "sequence": 9007199254740993_i64})
        );
        // The file's first message, framed with the short form (a lone 0).
        let first = frame(&schema, &[], "{}").unwrap();
        assert_eq!((first[0], to_json(&schema, &first).unwrap()), (0, b"{}".to_vec()));
        let second = frame(&schema, &[1], r#"{"x": "y"}"#).unwrap();
        assert_eq!(to_json(&schema, &second).unwrap(), br#"{"x":"y"}"#);
    }

    #[test]
    fn records_that_do_not_fit_are_refused_naming_why() {
        let schema = compile(SENSOR, HashMap::new()).unwrap();
        assert!(to_json(&schema, &[2, 8])
            .unwrap_err()
            .contains("no message at indexes [4]"));
        assert!(to_json(&schema, &[0x80]).unwrap_err().contains("end early"));
        assert!(to_json(&schema, &[200, 1]).unwrap_err().contains("message indexes"));
        let garbage = [4, 0, 0, 0x0a, 0xff];
        assert!(to_json(&schema, &garbage)
            .unwrap_err()
            .contains("not a acme.sensors.Envelope.Reading"));
        let broken = compile("syntax = \"proto3\"; message {", HashMap::new()).unwrap_err();
        assert!(!broken.is_empty());
        let unresolved = compile(
            "syntax = \"proto3\"; import \"other.proto\"; message A { B b = 1; }",
            HashMap::new(),
        );
        assert!(unresolved.unwrap_err().contains("other.proto"));
        let references = HashMap::from([(
            "other.proto".to_string(),
            "syntax = \"proto3\"; message B { int32 n = 1; }".to_string(),
        )]);
        let with = compile(
            "syntax = \"proto3\"; import \"other.proto\"; message A { B b = 1; }",
            references,
        )
        .unwrap();
        let record = frame(&with, &[], r#"{"b": {"n": 3}}"#).unwrap();
        assert_eq!(to_json(&with, &record).unwrap(), br#"{"b":{"n":3}}"#);
    }
}

//! A client of the schema registry REST API (the Confluent-compatible endpoints that
//! Confluent Schema Registry, Apicurio's ccompat API, Karapace and Redpanda serve): it
//! registers Sluice's schemas under the subject `<topic>-value` and fetches writer schemas
//! by id, caching both for the life of the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apache_avro::Schema;
use serde_json::{json, Value};

/// What went wrong talking to the registry, said so an operator can act on it.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("the schema registry at {url} cannot be reached: {reason}; check --schema-registry-url")]
    Unreachable { url: String, reason: String },
    #[error(
        "the schema registry refuses Sluice's schema for subject {subject:?} as incompatible with the versions registered there: {message}. Set the subject's compatibility (e.g. BACKWARD) or register a compatible version; see schemas/README.md"
    )]
    Incompatible { subject: String, message: String },
    #[error("the schema registry rejects the schema for subject {subject:?} as invalid: {message}")]
    Invalid { subject: String, message: String },
    #[error("the schema registry has no schema with id {id}: was the record written against another registry?")]
    UnknownId { id: u32 },
    #[error("the schema registry answered {status} to {what}: {message}")]
    Failed { what: String, status: u16, message: String },
    #[error("the schema with id {id} from the registry is not valid Avro: {reason}")]
    BadSchema { id: u32, reason: String },
}

#[derive(Clone, Debug)]
pub struct Registry {
    url: String,
    client: reqwest::Client,
    ids: Arc<Mutex<HashMap<String, u32>>>,
    schemas: Arc<Mutex<HashMap<u32, Arc<Schema>>>>,
}

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

impl Registry {
    pub fn new(url: &str) -> Result<Registry, RegistryError> {
        // TLS through ring (the build has no other provider); a no-op once installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| RegistryError::Unreachable {
                url: url.to_string(),
                reason: e.to_string(),
            })?;
        Ok(Registry {
            url: url.trim_end_matches('/').to_string(),
            client,
            ids: Arc::default(),
            schemas: Arc::default(),
        })
    }

    /// The id of `schema` (whose `.avsc` text is `text`, docs included) under `subject`,
    /// registering it if the registry lacks it (the registry answers with the existing id for
    /// a schema it already has).
    pub async fn register(&self, subject: &str, text: &str, schema: &Schema) -> Result<u32, RegistryError> {
        if let Some(id) = self.ids.lock().expect("registry cache").get(subject) {
            return Ok(*id);
        }
        let url = format!("{}/subjects/{}/versions", self.url, encode(subject));
        let body = json!({"schemaType": "AVRO", "schema": text});
        let response = self
            .client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let answer: Value =
            serde_json::from_slice(&response.bytes().await.map_err(|e| self.unreachable(e))?).unwrap_or(Value::Null);
        let message = answer["message"].as_str().unwrap_or("no message").to_string();
        let subject = subject.to_string();
        match status {
            200 => {
                let id = answer["id"]
                    .as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or(RegistryError::Failed {
                        what: format!("registering {subject}"),
                        status,
                        message: format!("no schema id in {answer}"),
                    })?;
                self.ids.lock().expect("registry cache").insert(subject, id);
                self.schemas
                    .lock()
                    .expect("registry cache")
                    .insert(id, Arc::new(schema.clone()));
                Ok(id)
            }
            409 => Err(RegistryError::Incompatible { subject, message }),
            422 => Err(RegistryError::Invalid { subject, message }),
            _ => Err(RegistryError::Failed {
                what: format!("registering {subject}"),
                status,
                message,
            }),
        }
    }

    /// The writer schema with `id`.
    pub async fn schema(&self, id: u32) -> Result<Arc<Schema>, RegistryError> {
        if let Some(schema) = self.schemas.lock().expect("registry cache").get(&id) {
            return Ok(schema.clone());
        }
        let url = format!("{}/schemas/ids/{id}", self.url);
        let response = self.client.get(&url).send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let answer: Value =
            serde_json::from_slice(&response.bytes().await.map_err(|e| self.unreachable(e))?).unwrap_or(Value::Null);
        match status {
            200 => {
                let text = answer["schema"].as_str().unwrap_or_default();
                let schema = Schema::parse_str(text).map_err(|e| RegistryError::BadSchema {
                    id,
                    reason: e.to_string(),
                })?;
                let schema = Arc::new(schema);
                self.schemas.lock().expect("registry cache").insert(id, schema.clone());
                Ok(schema)
            }
            404 => Err(RegistryError::UnknownId { id }),
            _ => Err(RegistryError::Failed {
                what: format!("fetching schema {id}"),
                status,
                message: answer["message"].as_str().unwrap_or("no message").to_string(),
            }),
        }
    }

    /// The id `schema` was registered under for `subject`, if this process registered it.
    pub fn registered(&self, subject: &str) -> Option<u32> {
        self.ids.lock().expect("registry cache").get(subject).copied()
    }

    fn unreachable(&self, e: reqwest::Error) -> RegistryError {
        RegistryError::Unreachable {
            url: self.url.clone(),
            reason: e.to_string(),
        }
    }
}

fn encode(segment: &str) -> String {
    url::form_urlencoded::byte_serialize(segment.as_bytes()).collect()
}

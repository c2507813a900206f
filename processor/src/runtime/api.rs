//! The pipeline API beside the processor on `--http`: `GET /api/pipelines` (every pipeline of
//! every instance) and `GET /api/pipelines/{id}` (config, latest sensors, executions, pending
//! timers, recent events), whichever instance is asked.
//!
//! The processor owns its state and answers [`Query`]s between batches, so a reader never
//! sees half a batch. A pipeline of a partition this instance does not own is forwarded to the
//! owner named by the [`Directory`]; the list is gathered from every live instance.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query as QueryString, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::instances::{Directory, Member};
use crate::core::partitioning::partition_for;
use crate::core::status::PipelineSummary;

/// Marks a forwarded request, so it is answered where it lands and never forwarded again.
const FORWARDED: &str = "x-sluice-forwarded-by";
/// How long a peer may take to answer a forwarded request.
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// A question for the processor, answered between batches.
pub enum Query {
    /// Summaries of every pipeline in the owned partitions.
    List {
        reply: oneshot::Sender<Vec<Arc<PipelineSummary>>>,
    },
    /// One pipeline's full view.
    Pipeline { id: String, reply: oneshot::Sender<Answer> },
}

pub enum Answer {
    Found(Value),
    /// Its partition is owned here but the pipeline is unknown.
    Missing,
    /// Its partition is owned elsewhere (or by no one, mid-rebalance).
    NotOwned {
        partition: i32,
    },
}

/// What the API handlers share.
#[derive(Clone)]
pub struct Api {
    pub queries: mpsc::Sender<Query>,
    pub directory: Arc<Directory>,
    pub instance: String,
    pub client: reqwest::Client,
}

impl Api {
    pub fn new(queries: mpsc::Sender<Query>, directory: Arc<Directory>, instance: &str) -> anyhow::Result<Api> {
        let client = reqwest::Client::builder()
            .timeout(PEER_TIMEOUT)
            .build()
            .map_err(|e| anyhow::anyhow!("building the API's peer client: {e}"))?;
        Ok(Api {
            queries,
            directory,
            instance: instance.to_string(),
            client,
        })
    }

    async fn ask<T>(&self, query: impl FnOnce(oneshot::Sender<T>) -> Query) -> Result<T, Response> {
        let (reply, answer) = oneshot::channel();
        let unavailable = || error(StatusCode::SERVICE_UNAVAILABLE, "the processor is not running");
        self.queries.send(query(reply)).await.map_err(|_| unavailable())?;
        answer.await.map_err(|_| unavailable())
    }
}

/// The `/api` routes.
pub fn routes(api: Api) -> Router {
    Router::new()
        .route("/api/pipelines", get(list))
        .route("/api/pipelines/{id}", get(pipeline))
        .route("/api/pipelines/{id}/events/{event}", get(event))
        .with_state(api)
}

/// Filters of the list: `owner`, `state` (of the latest execution, see
/// [`PipelineSummary::state`]), `q` (part of the id, any letter case); and the page:
/// `offset` and `limit` (default [`PAGE`], at most [`MAX_PAGE`]).
#[derive(Debug, Default, Deserialize)]
pub struct ListFilter {
    owner: Option<String>,
    state: Option<String>,
    q: Option<String>,
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
    /// `true`: this instance's pipelines only, unpaged (what peers ask each other).
    #[serde(default)]
    local: bool,
}

/// Pipelines per page by default, and at most.
const PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

impl ListFilter {
    /// Owner and name: what the counts by state are taken over (`q` lowercased already).
    fn keeps(&self, p: &PipelineSummary) -> bool {
        self.owner.as_ref().is_none_or(|o| p.owner.as_deref() == Some(o))
            && self
                .q
                .as_ref()
                .is_none_or(|q| p.pipeline_id.to_lowercase().contains(q.as_str()))
    }

    fn keeps_state(&self, p: &PipelineSummary) -> bool {
        self.state.as_ref().is_none_or(|s| p.state() == s)
    }
}

async fn list(
    State(api): State<Api>,
    QueryString(mut filter): QueryString<ListFilter>,
    headers: HeaderMap,
) -> Response {
    filter.q = filter.q.map(|q| q.to_lowercase());
    let mut pipelines = match api.ask(|reply| Query::List { reply }).await {
        Ok(p) => p,
        Err(response) => return response,
    };
    let mut instances = vec![json!({"instance": api.instance, "ok": true})];
    let mut complete = true;
    if !filter.local && !headers.contains_key(FORWARDED) {
        for peer in api.directory.peers(Utc::now()) {
            match fetch_peer_list(&api, &peer).await {
                Ok(theirs) => {
                    pipelines.extend(theirs.into_iter().map(Arc::new));
                    instances.push(json!({"instance": peer.instance, "url": peer.url, "ok": true}));
                }
                Err(e) => {
                    complete = false;
                    instances.push(json!({"instance": peer.instance, "url": peer.url, "ok": false, "error": e}));
                }
            }
        }
    }
    pipelines.retain(|p| filter.keeps(p));
    pipelines.sort_by(|a, b| a.pipeline_id.cmp(&b.pipeline_id));
    pipelines.dedup_by(|a, b| a.pipeline_id == b.pipeline_id);
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for p in &pipelines {
        match counts.get_mut(p.state()) {
            Some(n) => *n += 1,
            None => drop(counts.insert(p.state().to_string(), 1)),
        }
    }
    pipelines.retain(|p| filter.keeps_state(p));
    let total = pipelines.len();
    if !filter.local {
        let limit = filter.limit.unwrap_or(PAGE).clamp(1, MAX_PAGE);
        pipelines = pipelines.into_iter().skip(filter.offset).take(limit).collect();
    }
    let body = json!({
        "pipelines": pipelines,
        "total": total,
        "offset": filter.offset,
        "counts": counts,
        "instances": instances,
        "complete": complete,
    });
    (StatusCode::OK, json_type(), body.to_string()).into_response()
}

async fn fetch_peer_list(api: &Api, peer: &Member) -> Result<Vec<PipelineSummary>, String> {
    let url = format!("{}/api/pipelines?local=true", peer.url.trim_end_matches('/'));
    let response = api
        .client
        .get(&url)
        .header(FORWARDED, &api.instance)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{url}: HTTP {}", response.status()));
    }
    let bytes = response.bytes().await.map_err(|e| format!("{url}: {e}"))?;
    #[derive(Deserialize)]
    struct Page {
        pipelines: Vec<PipelineSummary>,
    }
    serde_json::from_slice::<Page>(&bytes)
        .map(|p| p.pipelines)
        .map_err(|e| format!("{url}: {e}"))
}

async fn pipeline(State(api): State<Api>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let answer = match api.ask(|reply| Query::Pipeline { id: id.clone(), reply }).await {
        Ok(a) => a,
        Err(response) => return response,
    };
    match answer {
        Answer::Found(view) => (StatusCode::OK, json_type(), view.to_string()).into_response(),
        Answer::Missing => error(
            StatusCode::NOT_FOUND,
            &format!("no pipeline {id:?}: no config or sensor for it has arrived"),
        ),
        Answer::NotOwned { partition } => {
            if let Some(from) = headers.get(FORWARDED) {
                let from = from.to_str().unwrap_or("?");
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("{from} forwarded pipeline {id:?} here, but partition {partition} is not owned here (a rebalance is moving it); retry"),
                );
            }
            match api.directory.owner(partition, Utc::now()) {
                Some(owner) => forward(&api, &owner, &id).await,
                None => error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("pipeline {id:?} is in partition {partition}, which no live instance owns right now (starting or rebalancing?); retry shortly"),
                ),
            }
        }
    }
}

/// One of a pipeline's recent events, as published (the page links every event here).
async fn event(State(api): State<Api>, Path((id, event_id)): Path<(String, String)>, headers: HeaderMap) -> Response {
    let view = pipeline(State(api), Path(id.clone()), headers).await;
    if view.status() != StatusCode::OK {
        return view;
    }
    let Ok(bytes) = axum::body::to_bytes(view.into_body(), usize::MAX).await else {
        return error(StatusCode::BAD_GATEWAY, "reading the pipeline's view");
    };
    let view: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let found = view["recentEvents"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["eventId"] == event_id.as_str());
    match found {
        Some(e) => (StatusCode::OK, json_type(), e.to_string()).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            &format!("event {event_id} of pipeline {id:?} is not among its recent events (sluice events tail --pipeline {id} reads them all)"),
        ),
    }
}

/// Relays the owner's answer, status and body as they are.
async fn forward(api: &Api, owner: &Member, id: &str) -> Response {
    let url = format!(
        "{}/api/pipelines/{}",
        owner.url.trim_end_matches('/'),
        url::form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
    );
    let sent = api.client.get(&url).header(FORWARDED, &api.instance).send().await;
    match sent {
        Ok(response) => {
            let status = StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            match response.bytes().await {
                Ok(body) => (status, json_type(), body).into_response(),
                Err(e) => error(
                    StatusCode::BAD_GATEWAY,
                    &format!("reading {}'s answer: {e}", owner.instance),
                ),
            }
        }
        Err(e) => error(
            StatusCode::BAD_GATEWAY,
            &format!(
                "pipeline {id:?} is owned by {} at {}, which did not answer: {e}",
                owner.instance, owner.url
            ),
        ),
    }
}

fn json_type() -> [(header::HeaderName, &'static str); 1] {
    [(header::CONTENT_TYPE, "application/json")]
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, json_type(), json!({"error": message}).to_string()).into_response()
}

/// Which partition of `partitions` holds `pipeline` (the inputs' key hash).
pub fn partition_of(pipeline: &str, partitions: i32) -> i32 {
    partition_for(pipeline.as_bytes(), partitions)
}

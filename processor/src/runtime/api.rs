//! The pipeline API beside the processor on `--http`: `GET /api/pipelines` (every pipeline of
//! every instance), `GET /api/graph` (their `dependsOn` graph for a date) and
//! `GET /api/pipelines/{id}` (config, latest sensors, executions, pending timers, run history,
//! SLA forecast, recent events), whichever instance is asked; `POST /api/pipelines/{id}/rerun` and
//! `/cancel` publish the command to `sluice.commands`, and `POST /api/sensors` publishes
//! readings to `sluice.sensors` (for producers that cannot speak Kafka), for a token allowed
//! to write (see [`super::access`]).
//!
//! The processor owns its state and answers [`Query`]s between batches, so a reader never
//! sees half a batch. A pipeline of a partition this instance does not own is forwarded to the
//! owner named by the [`Directory`]; the list is gathered from every live instance.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Extension, Path, Query as QueryString, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::access::{Access, Grant};
use super::codec::{Codec, Family};
use super::instances::{Directory, Member};
use super::jobs::secrets::hide_literal_secrets;
use super::kafka;
use super::opening::Openings;
use super::recent::RecentEvents;
use super::store::PartitionStore;
use super::summaries::Summaries;
use crate::core::execution::ExecutionDate;
use crate::core::graph;
use crate::core::partitioning::{partition_for, PartitionId};
use crate::core::records::{producer_reading, CommandKind, CommandRecord, SensorRecord};
use crate::core::status::{self, PipelineSummary};

/// What the processor's answers are read from: its stores and read models, lent for one
/// answer between batches.
pub(super) struct Served<'a> {
    pub stores: BTreeMap<PartitionId, &'a PartitionStore>,
    pub openings: &'a Openings,
    pub summaries: &'a mut Summaries,
    pub recent: &'a RecentEvents,
    /// Partition count of the input topics.
    pub partitions: i32,
    pub instance: &'a str,
}

/// Answers `query` from `served` (the processor calls it between batches).
pub(super) fn answer(query: Query, served: Served<'_>) -> anyhow::Result<()> {
    match query {
        Query::List { reply } => {
            let _ = reply.send(Listed {
                pipelines: served.summaries.all(&served.stores)?,
                opening: !served.openings.is_empty(),
            });
        }
        Query::Pipeline { id, reply } => {
            let _ = reply.send(pipeline_view(&id, &served)?);
        }
    }
    Ok(())
}

/// One pipeline's full view, or where it is if not here.
fn pipeline_view(id: &str, served: &Served<'_>) -> anyhow::Result<Answer> {
    let partition = partition_of(id, served.partitions);
    let Some(store) = served.stores.get(&partition) else {
        return Ok(match served.openings.contains(partition) {
            true => Answer::Opening { partition },
            false => Answer::NotOwned { partition },
        });
    };
    let Some(state) = store.pipeline(id)? else {
        return Ok(Answer::Missing);
    };
    let config = state.config.as_deref();
    let events = served.recent.of(id);
    Ok(Answer::Found(json!({
        "pipelineId": id,
        "partition": partition,
        "servedBy": served.instance,
        "summary": status::summarize(id, &state),
        "config": config.map(|c| {
            let mut value = c.to_value();
            hide_literal_secrets(&mut value);
            value
        }),
        "about": config.map(status::config_sentences),
        "rules": config.map(status::rules),
        "sensors": status::sensors(&state),
        "evaluators": status::evaluators(&state),
        "executions": state.executions.values().collect::<Vec<_>>(),
        "timers": status::timers(&state),
        "runHistory": status::run_history(&state),
        "slaProjection": status::sla_projection(&state, &events),
        "recentEvents": events,
    })))
}

/// Marks a forwarded request, so it is answered where it lands and never forwarded again.
const FORWARDED: &str = "x-sluice-forwarded-by";
/// How long a peer may take to answer a forwarded request.
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a question waits for partitions being opened (restored) here before it is
/// answered without them: a restore does not hold the processor up, but a caller asking
/// just after a start or a rebalance should see the state, not a gap.
const OPENING_WAIT: Duration = Duration::from_secs(10);

/// A question for the processor, answered between batches.
pub enum Query {
    /// Summaries of every pipeline in the owned partitions.
    List { reply: oneshot::Sender<Listed> },
    /// One pipeline's full view.
    Pipeline { id: String, reply: oneshot::Sender<Answer> },
}

/// The owned partitions' summaries, and whether partitions are still being opened here
/// (their pipelines are missing).
pub struct Listed {
    pub pipelines: Vec<Arc<PipelineSummary>>,
    pub opening: bool,
}

pub enum Answer {
    Found(Value),
    /// Its partition is owned here but the pipeline is unknown.
    Missing,
    /// Its partition is owned elsewhere (or by no one, mid-rebalance).
    NotOwned {
        partition: PartitionId,
    },
    /// Its partition was assigned here and is being restored.
    Opening {
        partition: PartitionId,
    },
}

/// What the API handlers share.
#[derive(Clone)]
pub struct Api {
    pub queries: mpsc::Sender<Query>,
    pub directory: Arc<Directory>,
    pub instance: String,
    pub client: reqwest::Client,
    pub access: Arc<Access>,
    /// Where reruns, cancels and readings go.
    pub publishing: Arc<Publishing>,
}

/// The topics the API writes to and how: commands (reruns, cancels) and sensor readings,
/// each keyed by its pipeline as the processor's inputs are.
pub struct Publishing {
    pub producer: kafka::RenewableProducer,
    pub codec: Codec,
    pub commands: String,
    pub sensors: String,
    /// The processor's limits: a reading over `--max-record-bytes` is refused here, as the
    /// processor would dead-letter it.
    pub limits: crate::core::limits::Limits,
}

impl Publishing {
    /// Publishes a command; returns where it landed.
    async fn command(&self, record: &CommandRecord) -> anyhow::Result<(PartitionId, i64)> {
        let json = serde_json::to_value(record)?;
        self.publish(Family::Commands, &self.commands, &record.pipeline_id, &json)
            .await
    }

    /// A reading as the sensors topic takes it, or why the processor would refuse it (over
    /// `--max-record-bytes` once encoded).
    async fn encode_reading(&self, record: &SensorRecord) -> Result<Vec<u8>, String> {
        let json = serde_json::to_value(record).map_err(|e| e.to_string())?;
        let value = (self.codec.encode(Family::Sensors, &self.sensors, &json)).map_err(|e| format!("{e:#}"))?;
        self.limits
            .check_record(false, value.len())
            .map_err(|over| over.to_string())?;
        Ok(value)
    }

    /// Publishes an encoded reading of `pipeline`; returns where it landed.
    async fn reading(&self, pipeline: &str, value: &[u8]) -> anyhow::Result<(PartitionId, i64)> {
        Ok((self.producer)
            .send(&self.sensors, Some(pipeline.as_bytes()), Some(value), &[])
            .await?)
    }

    async fn publish(
        &self,
        family: Family,
        topic: &str,
        pipeline: &str,
        json: &Value,
    ) -> anyhow::Result<(PartitionId, i64)> {
        let value = self.codec.encode(family, topic, json)?;
        Ok(self
            .producer
            .send(topic, Some(pipeline.as_bytes()), Some(&value), &[])
            .await?)
    }
}

impl Api {
    pub fn new(
        queries: mpsc::Sender<Query>,
        directory: Arc<Directory>,
        instance: &str,
        access: Arc<Access>,
        publishing: Publishing,
    ) -> anyhow::Result<Api> {
        let client = reqwest::Client::builder()
            .timeout(PEER_TIMEOUT)
            // A peer was checked against --peer; where it might redirect to was not.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| anyhow::anyhow!("building the API's peer client: {e}"))?;
        Ok(Api {
            queries,
            directory,
            instance: instance.to_string(),
            client,
            access,
            publishing: Arc::new(publishing),
        })
    }

    async fn ask<T>(&self, query: impl FnOnce(oneshot::Sender<T>) -> Query) -> Result<T, Response> {
        let (reply, answer) = oneshot::channel();
        let unavailable = || error(StatusCode::SERVICE_UNAVAILABLE, "the processor is not running");
        self.queries.send(query(reply)).await.map_err(|_| unavailable())?;
        answer.await.map_err(|_| unavailable())
    }

    /// Asks again while `opening` says the answer waits for a partition being opened here,
    /// for at most [`OPENING_WAIT`]; the last answer either way.
    async fn ask_opened<T>(
        &self,
        query: impl Fn(oneshot::Sender<T>) -> Query,
        opening: impl Fn(&T) -> bool,
    ) -> Result<T, Response> {
        let deadline = tokio::time::Instant::now() + OPENING_WAIT;
        loop {
            let answer = self.ask(&query).await?;
            if !opening(&answer) || tokio::time::Instant::now() >= deadline {
                return Ok(answer);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The `/api` routes.
pub fn routes(api: Api) -> Router {
    Router::new()
        .route("/api/pipelines", get(list))
        .route("/api/graph", get(dependency_graph))
        .route("/api/pipelines/{id}", get(pipeline))
        .route("/api/pipelines/{id}/events/{event}", get(event))
        .route("/api/pipelines/{id}/rerun", post(rerun))
        .route("/api/pipelines/{id}/cancel", post(cancel))
        .route("/api/sensors", post(sensors))
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

/// Every pipeline's summary, by id: this instance's and, unless `local` or the request was
/// forwarded here, every live peer's; with how each instance answered, and whether all did.
struct Gathered {
    pipelines: Vec<Arc<PipelineSummary>>,
    instances: Vec<Value>,
    complete: bool,
}

async fn gather(api: &Api, headers: &HeaderMap, local: bool) -> Result<Gathered, Response> {
    let Listed { mut pipelines, opening } = api.ask_opened(|reply| Query::List { reply }, |l| l.opening).await?;
    let mut instances = vec![json!({"instance": api.instance, "ok": true, "restoring": opening})];
    let mut complete = !opening;
    if !local && !headers.contains_key(FORWARDED) {
        for peer in api.directory.peers(api.directory.now()) {
            match fetch_peer_list(api, &peer, headers).await {
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
    pipelines.sort_by(|a, b| a.pipeline_id.cmp(&b.pipeline_id));
    pipelines.dedup_by(|a, b| a.pipeline_id == b.pipeline_id);
    Ok(Gathered {
        pipelines,
        instances,
        complete,
    })
}

async fn list(
    State(api): State<Api>,
    QueryString(mut filter): QueryString<ListFilter>,
    headers: HeaderMap,
) -> Response {
    filter.q = filter.q.map(|q| q.to_lowercase());
    let Gathered {
        mut pipelines,
        instances,
        complete,
    } = match gather(&api, &headers, filter.local).await {
        Ok(gathered) => gathered,
        Err(response) => return response,
    };
    pipelines.retain(|p| filter.keeps(p));
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

/// `GET /api/graph?date=`: the dependency graph of a date (see [`graph::graph`]), over every
/// instance's pipelines.
#[derive(Debug, Default, Deserialize)]
pub struct GraphQuery {
    /// `YYYY-MM-DD` or `YYYY-MM-DDTHH`; by default the latest day with executions.
    date: Option<String>,
}

async fn dependency_graph(
    State(api): State<Api>,
    QueryString(query): QueryString<GraphQuery>,
    headers: HeaderMap,
) -> Response {
    let date = query.date.filter(|d| !d.is_empty());
    if let Some(d) = date.as_deref().filter(|d| ExecutionDate::canonical(d).is_none()) {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("{d:?} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH)"),
        );
    }
    let gathered = match gather(&api, &headers, false).await {
        Ok(gathered) => gathered,
        Err(response) => return response,
    };
    let drawn = graph::graph(&gathered.pipelines, date.as_deref(), api.directory.now().date_naive());
    let mut body = json!(drawn);
    body["instances"] = json!(gathered.instances);
    body["complete"] = json!(gathered.complete);
    (StatusCode::OK, json_type(), body.to_string()).into_response()
}

/// A request to a peer, on behalf of the caller: marked as forwarded, with the caller's
/// credentials (every instance is given the same token files). Peers are only instances
/// whose URL a `--peer` admits (see [`Directory`]).
fn to_peer(api: &Api, url: &str, headers: &HeaderMap) -> reqwest::RequestBuilder {
    let request = api.client.get(url).header(FORWARDED, &api.instance);
    match headers.get(header::AUTHORIZATION) {
        Some(authorization) => request.header(header::AUTHORIZATION, authorization),
        None => request,
    }
}

async fn fetch_peer_list(api: &Api, peer: &Member, headers: &HeaderMap) -> Result<Vec<PipelineSummary>, String> {
    let url = format!("{}/api/pipelines?local=true", peer.url.trim_end_matches('/'));
    let response = to_peer(api, &url, headers)
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
    let asked = api.ask_opened(
        |reply| Query::Pipeline { id: id.clone(), reply },
        |a| matches!(a, Answer::Opening { .. }),
    );
    let answer = match asked.await {
        Ok(a) => a,
        Err(response) => return response,
    };
    match answer {
        Answer::Found(view) => (StatusCode::OK, json_type(), view.to_string()).into_response(),
        Answer::Missing => error(
            StatusCode::NOT_FOUND,
            &format!("no pipeline {id:?}: no config or sensor for it has arrived"),
        ),
        Answer::Opening { partition } => error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("pipeline {id:?} is in partition {partition}, whose state is being restored here; retry shortly"),
        ),
        Answer::NotOwned { partition } => {
            if let Some(from) = headers.get(FORWARDED) {
                let from = from.to_str().unwrap_or("?");
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("{from} forwarded pipeline {id:?} here, but partition {partition} is not owned here (a rebalance is moving it); retry"),
                );
            }
            match api.directory.owner(partition, api.directory.now()) {
                Some(owner) => forward(&api, &owner, &id, &headers).await,
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
async fn forward(api: &Api, owner: &Member, id: &str, headers: &HeaderMap) -> Response {
    let url = format!(
        "{}/api/pipelines/{}",
        owner.url.trim_end_matches('/'),
        url::form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
    );
    let sent = to_peer(api, &url, headers).send().await;
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

/// `POST /api/pipelines/{id}/rerun` and `/cancel`: the body names the execution.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ExecutionRequest {
    /// `YYYY-MM-DD`, or `YYYY-MM-DDTHH` for an hourly execution.
    date: String,
    schedule: Option<String>,
    reason: Option<String>,
    requested_by: Option<String>,
    /// `rerun`: although no input changed.
    #[serde(default)]
    force: bool,
    /// `rerun`: of a date older than the execution retention, on purpose.
    #[serde(default)]
    backfill: bool,
}

async fn rerun(api: State<Api>, id: Path<String>, grant: Extension<Grant>, body: Bytes) -> Response {
    command(api, id, grant, body, CommandKind::Rerun).await
}

async fn cancel(api: State<Api>, id: Path<String>, grant: Extension<Grant>, body: Bytes) -> Response {
    command(api, id, grant, body, CommandKind::Cancel).await
}

/// Publishes a rerun or cancel to the commands topic, as `sluice rerun|cancel` does; the
/// pipeline's owner answers with RERUN_ACCEPTED/REJECTED or RUN_CANCELLED on the events topic.
async fn command(
    State(api): State<Api>,
    Path(id): Path<String>,
    Extension(grant): Extension<Grant>,
    body: Bytes,
    kind: CommandKind,
) -> Response {
    if let Some(refused) = refuses_writes(&api, grant) {
        return refused;
    }
    let record = match command_record(&api, &id, kind, &body) {
        Ok(record) => record,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    match api.publishing.command(&record).await {
        Ok((partition, offset)) => (
            StatusCode::ACCEPTED,
            json_type(),
            json!({
                "command": kind.name(),
                "pipelineId": id,
                "topic": api.publishing.commands,
                "partition": partition,
                "offset": offset,
                "answer": "the pipeline's owner answers on the events topic (RERUN_ACCEPTED, RERUN_REJECTED or RUN_CANCELLED)",
            })
            .to_string(),
        )
            .into_response(),
        Err(e) => error(StatusCode::BAD_GATEWAY, &format!("publishing the {} command: {e:#}", kind.name())),
    }
}

/// Why a request that writes (a command, a reading) is refused, if it is: the API is
/// read-only, or the token may only read.
fn refuses_writes(api: &Api, grant: Grant) -> Option<Response> {
    if !api.access.allows_writes() {
        return Some(error(
            StatusCode::FORBIDDEN,
            "the API is read-only: start `sluice run` with --api-write-token-file to allow reruns, cancels and readings",
        ));
    }
    (grant != Grant::Write).then(|| error(StatusCode::FORBIDDEN, "this token may read but not write"))
}

/// Most readings one `POST /api/sensors` takes.
pub const MAX_READINGS: usize = 1_000;

/// `POST /api/sensors`: readings from producers that cannot speak Kafka (a Lambda, an
/// Airflow task, a shell script), in the sensors topic's JSON form: one record, or an array
/// of at most [`MAX_READINGS`]. Each is checked as the processor checks it, and stamped with
/// the processor's time when it has no `timestamp`; one that fails refuses the whole request
/// (400, naming each by its index), so a request is published whole or not at all, and
/// nothing is published that the processor would dead-letter. 202 says where each landed.
async fn sensors(State(api): State<Api>, Extension(grant): Extension<Grant>, body: Bytes) -> Response {
    if let Some(refused) = refuses_writes(&api, grant) {
        return refused;
    }
    let records = match readings(&body, api.directory.now()) {
        Ok(records) => records,
        Err(Refused::Body(why)) => return error(StatusCode::BAD_REQUEST, &why),
        Err(Refused::Readings(problems)) => return refused_readings(problems),
    };
    let publishing = &api.publishing;
    let encoded = futures::future::join_all(records.iter().map(|r| publishing.encode_reading(r))).await;
    let problems: Vec<(usize, String)> = (encoded.iter().enumerate())
        .filter_map(|(index, e)| e.as_ref().err().map(|reason| (index, reason.clone())))
        .collect();
    if !problems.is_empty() {
        return refused_readings(problems);
    }
    let encoded: Vec<Vec<u8>> = encoded.into_iter().flatten().collect();
    let sent =
        futures::future::join_all((records.iter().zip(&encoded)).map(|(r, v)| publishing.reading(&r.pipeline_id, v)))
            .await;
    let mut landed = Vec::new();
    let mut failed = Vec::new();
    for (index, (record, result)) in records.iter().zip(sent).enumerate() {
        match result {
            Ok((partition, offset)) => landed.push(json!({
                "index": index, "pipelineId": record.pipeline_id, "partition": partition, "offset": offset,
            })),
            Err(e) => failed.push(json!({"index": index, "reason": format!("{e:#}")})),
        }
    }
    let status = match failed.is_empty() {
        true => StatusCode::ACCEPTED,
        // The broker took some and not others: say which, so a retry can send the rest.
        false => StatusCode::BAD_GATEWAY,
    };
    let body = json!({"published": landed, "failed": failed, "topic": publishing.sensors});
    (status, json_type(), body.to_string()).into_response()
}

/// 400 for readings the processor would refuse, each named by its index.
fn refused_readings(problems: Vec<(usize, String)>) -> Response {
    let problems: Vec<Value> = (problems.into_iter())
        .map(|(index, reason)| json!({"index": index, "reason": reason}))
        .collect();
    let body = json!({"error": "readings the processor would refuse; none was published", "problems": problems});
    (StatusCode::BAD_REQUEST, json_type(), body.to_string()).into_response()
}

/// Why a `POST /api/sensors` body is refused.
#[derive(Debug)]
enum Refused {
    /// Not JSON, not an object or array, or too many readings.
    Body(String),
    /// Readings the processor would refuse: (index, why).
    Readings(Vec<(usize, String)>),
}

/// The readings a `POST /api/sensors` body holds, each checked and stamped at `now`.
fn readings(body: &[u8], now: chrono::DateTime<chrono::Utc>) -> Result<Vec<SensorRecord>, Refused> {
    let shape = "the body must be a sensor record ({\"pipelineId\", \"key\", \"data\", \"date\"?, \"hour\"?, \"timestamp\"?}) or an array of them";
    let values = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(values)) => values,
        Ok(value @ Value::Object(_)) => vec![value],
        Ok(_) => return Err(Refused::Body(shape.into())),
        Err(e) => return Err(Refused::Body(format!("{shape}: {e}"))),
    };
    if values.is_empty() || values.len() > MAX_READINGS {
        return Err(Refused::Body(format!(
            "{} readings: send 1 to {MAX_READINGS} per request",
            values.len()
        )));
    }
    let mut records = Vec::new();
    let mut problems = Vec::new();
    for (index, value) in values.into_iter().enumerate() {
        match producer_reading(value, now) {
            Ok(record) => records.push(record),
            Err(why) => problems.push((index, why.to_string())),
        }
    }
    match problems.is_empty() {
        true => Ok(records),
        false => Err(Refused::Readings(problems)),
    }
}

/// The command an [`ExecutionRequest`] body asks for; what is wrong with a body that is not
/// one (a bad request).
fn command_record(api: &Api, id: &str, kind: CommandKind, body: &[u8]) -> Result<CommandRecord, String> {
    let request: ExecutionRequest = serde_json::from_slice(body).map_err(|e| {
        format!("the body must be JSON {{\"date\": \"YYYY-MM-DD\", \"schedule\"?, \"reason\"?, \"requestedBy\"?, \"force\"?, \"backfill\"?}}: {e}")
    })?;
    let Ok(date) = request.date.parse::<ExecutionDate>() else {
        return Err(format!(
            "{:?} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH)",
            request.date
        ));
    };
    Ok(CommandRecord {
        pipeline_id: id.into(),
        command: kind,
        schedule_id: request.schedule,
        date: date.to_string(),
        reason: request.reason,
        requested_by: Some(request.requested_by.unwrap_or_else(|| format!("api@{}", api.instance))),
        subscriber: None,
        key: None,
        force: request.force && kind == CommandKind::Rerun,
        backfill: request.backfill && kind == CommandKind::Rerun,
    })
}

fn json_type() -> [(header::HeaderName, &'static str); 1] {
    [(header::CONTENT_TYPE, "application/json")]
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, json_type(), json!({"error": message}).to_string()).into_response()
}

/// Which partition of `partitions` holds `pipeline` (the inputs' key hash).
pub fn partition_of(pipeline: &str, partitions: i32) -> PartitionId {
    partition_for(pipeline.as_bytes(), partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339("2026-11-27T08:00:00Z")
            .unwrap()
            .to_utc()
    }

    #[test]
    fn a_reading_or_an_array_of_them_is_taken_stamped_with_the_processors_time() {
        let one = br#"{"pipelineId": "p", "key": "rows", "data": {"count": 5}, "date": "2026-11-26"}"#;
        let records = readings(one, now()).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].timestamp, Some(json!("2026-11-27T08:00:00+00:00")));
        let many = json!([
            {"pipelineId": "p", "key": "rows", "data": {"count": 5}},
            {"pipelineId": "q", "key": "ready", "data": {}, "timestamp": "2026-11-27T07:00:00Z"},
        ]);
        let records = readings(many.to_string().as_bytes(), now()).unwrap();
        assert_eq!(
            records[1].timestamp,
            Some(json!("2026-11-27T07:00:00Z")),
            "its own kept"
        );
    }

    #[test]
    fn one_reading_the_processor_would_refuse_refuses_the_request_naming_it() {
        let body = json!([
            {"pipelineId": "p", "key": "rows", "data": {}},
            {"pipelineId": "p", "key": "", "data": {}},
            {"pipelineId": "p", "key": "rows", "hour": "07"},
            {"key": "rows"},
        ]);
        let Err(Refused::Readings(problems)) = readings(body.to_string().as_bytes(), now()) else {
            panic!("accepted")
        };
        let indexes: Vec<usize> = problems.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, vec![1, 2, 3], "{problems:?}");
        assert!(problems[1].1.contains("date"), "{problems:?}");
        for (body, says) in [
            (b"not json".to_vec(), "must be a sensor record"),
            (b"[]".to_vec(), "0 readings"),
            (b"5".to_vec(), "must be a sensor record"),
            (
                json!(vec![json!({"pipelineId": "p", "key": "k"}); MAX_READINGS + 1])
                    .to_string()
                    .into_bytes(),
                "1001 readings",
            ),
        ] {
            match readings(&body, now()) {
                Err(Refused::Body(why)) => assert!(why.contains(says), "{why}"),
                other => panic!("{other:?}"),
            }
        }
    }
}

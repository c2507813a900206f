//! The dependency graph of one execution date, as the operator page draws it: the pipelines
//! that declare `dependsOn` or are named in one, each with its state for the date, the edges
//! upstream → downstream, and which upstreams hold a downstream back. It is made from the
//! pipeline list's summaries, which every instance gathers from all of them, so any instance
//! draws the whole graph.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use chrono::NaiveDate;
use serde::Serialize;

use super::status::PipelineSummary;
use crate::core::ids::PipelineId;

/// How many dates (with executions) the page offers to choose from.
const DATES: usize = 31;

/// The state of a node without an execution for the date (configured).
pub const NOT_STARTED: &str = "notStarted";
/// The state of an upstream no instance that answered knows.
pub const UNKNOWN: &str = "unknown";

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Graph {
    /// The date drawn (`YYYY-MM-DD`, or `YYYY-MM-DDTHH`).
    pub date: String,
    /// The days on which any node has an execution, newest first (the date drawn included).
    pub dates: Vec<String>,
    /// By id.
    pub nodes: Vec<Node>,
    /// By upstream, then downstream.
    pub edges: Vec<Edge>,
    /// The downstreams not started or waiting for the date whose upstreams have not
    /// completed it, by id.
    pub held_back: Vec<HeldBack>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub pipeline_id: PipelineId,
    /// The state of its execution for the date (as the list names states), else
    /// [`NOT_STARTED`], `unconfigured` (sensors only) or [`UNKNOWN`].
    pub state: String,
    /// The execution shown: the date itself, or an hourly pipeline's latest hour of the day.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_date: Option<String>,
    /// Its column: 0 for a pipeline with no upstream, else one more than its deepest upstream.
    pub depth: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Edge {
    pub from: String,
    pub to: String,
    /// `from` holds `to` back for the date.
    pub holding: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldBack {
    pub pipeline_id: PipelineId,
    pub state: String,
    /// The upstreams that have not completed the date.
    pub by: Vec<String>,
}

/// The graph of `date`, or by default of the latest day any node has an execution for
/// (`today` if none has), from every pipeline's summary.
pub fn graph<P: Borrow<PipelineSummary>>(pipelines: &[P], date: Option<&str>, today: NaiveDate) -> Graph {
    let by_id: BTreeMap<&str, &PipelineSummary> = pipelines
        .iter()
        .map(|p| (p.borrow().pipeline_id.as_str(), p.borrow()))
        .collect();
    let mut pairs: BTreeSet<(&str, &str)> = BTreeSet::new();
    for p in by_id.values() {
        for upstream in &p.depends_on {
            pairs.insert((upstream.as_str(), p.pipeline_id.as_str()));
        }
    }
    let ids: BTreeSet<&str> = pairs.iter().flat_map(|(from, to)| [*from, *to]).collect();
    let mut days: Vec<&str> = (ids.iter().filter_map(|id| by_id.get(id)))
        .flat_map(|p| p.executions.iter().map(|e| e.date.get(..10).unwrap_or(&e.date)))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .rev()
        .collect();
    let date = match date {
        Some(d) => d.to_string(),
        None => days
            .first()
            .map_or_else(|| today.format("%Y-%m-%d").to_string(), |d| d.to_string()),
    };
    let day = date.get(..10).unwrap_or(&date);
    if !days.contains(&day) {
        days.push(day);
        days.sort_unstable_by(|a, b| b.cmp(a));
    }
    days.truncate(DATES);

    let states: BTreeMap<&str, (String, Option<String>)> = ids
        .iter()
        .map(|id| {
            (
                *id,
                by_id
                    .get(id)
                    .map_or((UNKNOWN.to_string(), None), |p| state_on(p, &date)),
            )
        })
        .collect();
    let depth = depths(&ids, &pairs);
    let mut held_back = Vec::new();
    let mut holding = BTreeSet::new();
    for id in &ids {
        let state = states[id].0.as_str();
        if state != NOT_STARTED && state != "waiting" {
            continue;
        }
        let by: Vec<String> = (pairs.iter())
            .filter(|(from, to)| to == id && states[from].0 != "completed")
            .map(|(from, _)| from.to_string())
            .collect();
        if by.is_empty() {
            continue;
        }
        holding.extend(by.iter().map(|from| (from.clone(), id.to_string())));
        held_back.push(HeldBack {
            pipeline_id: PipelineId::from(*id),
            state: state.to_string(),
            by,
        });
    }
    Graph {
        dates: days.into_iter().map(str::to_string).collect(),
        nodes: (ids.iter())
            .map(|id| Node {
                pipeline_id: PipelineId::from(*id),
                state: states[id].0.clone(),
                execution_date: states[id].1.clone(),
                depth: depth[id],
                owner: by_id.get(id).and_then(|p| p.owner.clone()),
            })
            .collect(),
        edges: (pairs.iter())
            .map(|(from, to)| Edge {
                from: from.to_string(),
                to: to.to_string(),
                holding: holding.contains(&(from.to_string(), to.to_string())),
            })
            .collect(),
        held_back,
        date,
    }
}

/// The state of `p`'s execution for `date` and that execution's date: the date's own, else
/// for a day the latest hour of it (an hourly pipeline), for an hour its day (a daily one).
fn state_on(p: &PipelineSummary, date: &str) -> (String, Option<String>) {
    let day = date.get(..10).unwrap_or(date);
    // Executions are newest first: the first hour of the day found is its latest.
    let found = (p.executions.iter().find(|e| e.date == date))
        .or_else(|| (date.len() > 10).then(|| p.executions.iter().find(|e| e.date == day))?)
        .or_else(|| {
            (date.len() == 10).then(|| p.executions.iter().find(|e| e.date.starts_with(&format!("{day}T"))))?
        });
    match found {
        Some(e) => (e.state.clone(), Some(e.date.clone())),
        None if p.configured => (NOT_STARTED.to_string(), None),
        None => ("unconfigured".to_string(), None),
    }
}

/// Each node's longest path from a node without upstreams; a cycle (configs can name one)
/// stops growing after as many rounds as there are nodes.
fn depths<'a>(ids: &BTreeSet<&'a str>, pairs: &BTreeSet<(&'a str, &'a str)>) -> BTreeMap<&'a str, usize> {
    let mut depth: BTreeMap<&str, usize> = ids.iter().map(|id| (*id, 0)).collect();
    for _ in 0..ids.len() {
        let mut changed = false;
        for (from, to) in pairs {
            let d = depth[from] + 1;
            if d > depth[to] && d < ids.len() {
                depth.insert(to, d);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    depth
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::core::status::ExecutionSummary;

    fn summary(id: &str, depends_on: &[&str], executions: &[(&str, &str)]) -> PipelineSummary {
        PipelineSummary {
            pipeline_id: id.into(),
            configured: true,
            owner: Some("data".into()),
            description: None,
            dry_run: false,
            depends_on: depends_on.iter().map(|d| (*d).into()).collect(),
            executions: (executions.iter())
                .map(|(date, state)| ExecutionSummary {
                    schedule_id: "stream".into(),
                    date: date.to_string(),
                    state: state.to_string(),
                    attempt: 1,
                    since: Utc.with_ymd_and_hms(2026, 11, 20, 3, 0, 0).unwrap(),
                    run_id: None,
                    reason: None,
                })
                .collect(),
            next_timer: None,
        }
    }

    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 11, 22).unwrap()
    }

    fn states(g: &Graph) -> Vec<(&str, &str, usize)> {
        (g.nodes.iter())
            .map(|n| (n.pipeline_id.as_str(), n.state.as_str(), n.depth))
            .collect()
    }

    #[test]
    fn a_chain_with_fan_in_names_the_upstream_that_holds_a_downstream_back() {
        let pipelines = [
            summary(
                "bronze",
                &[],
                &[("2026-11-21", "completed"), ("2026-11-20", "completed")],
            ),
            summary(
                "silver",
                &["bronze"],
                &[("2026-11-21", "waiting"), ("2026-11-20", "completed")],
            ),
            summary("ref", &[], &[("2026-11-21", "completed")]),
            summary("gold", &["silver", "ref"], &[("2026-11-20", "completed")]),
            summary("alone", &[], &[("2026-11-22", "running")]),
        ];
        // By default the latest day a node of the graph has an execution for (not alone's).
        let g = graph(&pipelines, None, today());
        assert_eq!(g.date, "2026-11-21");
        assert_eq!(g.dates, ["2026-11-21", "2026-11-20"]);
        assert_eq!(
            states(&g),
            [
                ("bronze", "completed", 0),
                ("gold", NOT_STARTED, 2),
                ("ref", "completed", 0),
                ("silver", "waiting", 1)
            ]
        );
        let edges: Vec<(&str, &str, bool)> = (g.edges.iter())
            .map(|e| (e.from.as_str(), e.to.as_str(), e.holding))
            .collect();
        assert_eq!(
            edges,
            [
                ("bronze", "silver", false),
                ("ref", "gold", false),
                ("silver", "gold", true)
            ]
        );
        assert_eq!(
            g.held_back,
            [HeldBack {
                pipeline_id: "gold".into(),
                state: NOT_STARTED.into(),
                by: vec!["silver".into()]
            }]
        );

        // The day before, everything completed: nothing is held back.
        let g = graph(&pipelines, Some("2026-11-20"), today());
        assert!(g.held_back.is_empty() && g.edges.iter().all(|e| !e.holding), "{g:?}");
        assert_eq!(g.nodes[2].state, NOT_STARTED, "ref did not run that day");
        // A day nothing ran: every upstream holds its downstreams back, and the day is offered.
        let g = graph(&pipelines, Some("2026-11-22"), today());
        assert_eq!(g.dates[0], "2026-11-22");
        assert_eq!(g.held_back.len(), 2, "{g:?}");
        let held: Vec<(&str, &[String])> = (g.held_back.iter())
            .map(|h| (h.pipeline_id.as_str(), h.by.as_slice()))
            .collect();
        assert_eq!(
            held,
            [
                ("gold", &["ref".to_string(), "silver".to_string()][..]),
                ("silver", &["bronze".to_string()][..])
            ]
        );
    }

    #[test]
    fn unknown_upstreams_hourly_executions_and_cycles() {
        let pipelines = [
            summary(
                "hourly",
                &["missing"],
                &[("2026-11-21T14", "running"), ("2026-11-21T13", "completed")],
            ),
            summary("daily", &["hourly"], &[("2026-11-21", "waiting")]),
            summary("a", &["b"], &[]),
            summary("b", &["a"], &[]),
        ];
        let g = graph(&pipelines, Some("2026-11-21"), today());
        let hourly = g.nodes.iter().find(|n| n.pipeline_id == "hourly").unwrap();
        assert_eq!(
            (hourly.state.as_str(), hourly.execution_date.as_deref()),
            ("running", Some("2026-11-21T14")),
            "an hourly pipeline shows its latest hour of the day"
        );
        let missing = g.nodes.iter().find(|n| n.pipeline_id == "missing").unwrap();
        assert_eq!((missing.state.as_str(), missing.depth), (UNKNOWN, 0));
        assert_eq!(g.held_back[0].pipeline_id, "a");
        assert!(g
            .held_back
            .iter()
            .any(|h| h.pipeline_id == "daily" && h.by == ["hourly"]));
        // An hour of a daily pipeline: its day.
        let g = graph(&pipelines, Some("2026-11-21T13"), today());
        let daily = g.nodes.iter().find(|n| n.pipeline_id == "daily").unwrap();
        assert_eq!(daily.execution_date.as_deref(), Some("2026-11-21"));
        assert!(
            g.held_back.iter().all(|h| h.pipeline_id != "daily"),
            "hour 13 completed"
        );
        // The cycle's depths stay below the node count.
        assert!(g.nodes.iter().all(|n| n.depth < g.nodes.len()), "{g:?}");
    }

    #[test]
    fn without_dependencies_there_is_no_graph_and_the_date_is_today() {
        let g = graph(&[summary("alone", &[], &[("2026-11-20", "completed")])], None, today());
        assert_eq!((g.date.as_str(), g.nodes.len(), g.dates.len()), ("2026-11-22", 0, 1));
    }
}

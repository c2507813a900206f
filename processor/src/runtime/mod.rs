//! The runtime: thin plumbing around [`crate::core`]. It reads records and fires timers,
//! hands them to the decider, and carries out its decisions (state, events, timers,
//! effects). No business rule lives here.

pub mod access;
pub mod api;
pub mod backoff;
pub mod changelog;
pub mod clock;
pub mod codec;
mod collector;
pub mod effects;
pub mod error;
pub mod forwarding;
pub mod http;
pub mod input;
pub mod instances;
pub mod instruments;
pub mod jobs;
pub mod kafka;
pub mod msk_iam;
pub mod observability;
pub mod opening;
pub mod outputs;
pub mod processor;
mod read_models;
mod rebalance;
pub mod recent;
mod shutdown;
pub mod store;
pub mod summaries;
mod tasks;
pub mod telemetry;
pub mod topics;
pub mod ui;

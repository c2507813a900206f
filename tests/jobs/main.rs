//! Job types end to end: the real `sluice` binary on the real broker, triggering jobs on
//! loopback servers that speak each target's documented protocol (Airflow, Databricks, a
//! plain HTTP endpoint), on moto for the AWS types, and on the broker for `kafka` jobs.

#[path = "../support/mod.rs"]
mod support;

mod aws;
mod basics;
mod orchestrators;
mod secrets;

/// The execution of `schedule` on `date`, a canonical date.
fn execution(schedule: &str, date: &str) -> sluice::core::execution::ExecutionId {
    sluice::core::execution::ExecutionId::of(schedule, date).expect("a canonical execution date")
}

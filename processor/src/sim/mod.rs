//! Deterministic simulators, in the spirit of FoundationDB's and TigerBeetle's (VOPR).
//! [`world`] runs the processor's own partition task (`core::task`) for several instances
//! and partitions under a seeded fault schedule and checks the invariants after each run;
//! [`driver`] drives the task over an in-memory [`log`] with no faults (the steady bench,
//! fast tests). Same seed, same run: a failing seed replays exactly (`SLUICE_SIM_SEED`).

pub mod driver;
pub mod log;
pub mod store;
pub mod world;

pub use world::{run, Breach, Historic, Outcomes};

//! `databricks` job tests (being written).

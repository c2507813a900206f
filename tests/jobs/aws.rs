//! `aws` job tests (being written).

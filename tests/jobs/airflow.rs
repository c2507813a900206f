//! `airflow` job tests (being written).

//! The runtime's errors, sorted by what it does about them: a [`Transient`](Error::Transient)
//! one is retried with backoff for as long as it lasts (a broker that does not answer, a
//! store still locked by a process letting go of it); a [`Fatal`] one stops what it
//! interrupts (a partition's opening, or the run), with its cause typed. Each error is sorted
//! where it arises, from the typed error of the library that raised it, so nothing later
//! has to guess by downcasting or by reading messages.

use rdkafka::error::{KafkaError, RDKafkaError};
use rdkafka::types::RDKafkaErrorCode;

use super::changelog::StateAhead;
use super::kafka::ProduceError;
use super::opening::{Cancelled, InputAhead};
use super::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Worth another attempt.
    #[error(transparent)]
    Transient(#[from] anyhow::Error),
    /// No retry mends it.
    #[error(transparent)]
    Fatal(#[from] Fatal),
}

/// Why no retry mends an error.
#[derive(Debug, thiserror::Error)]
pub enum Fatal {
    /// The state belongs to a changelog topic that was recreated.
    #[error(transparent)]
    StateAhead(#[from] StateAhead),
    /// The state belongs to an input topic that was recreated.
    #[error(transparent)]
    InputAhead(#[from] InputAhead),
    /// The partition was revoked while it was being opened.
    #[error(transparent)]
    Cancelled(#[from] Cancelled),
    /// The local state is corrupt or unreadable (see [`StoreError::is_transient`]).
    #[error(transparent)]
    Store(StoreError),
    /// The transactional producer was fenced, failed for good, or the broker has no
    /// transactions.
    #[error("transaction failed and cannot be retried: {0} (a fenced producer means another instance took over with the same --instance; a broker without transaction support needs --guarantee effectively-once)")]
    Transaction(RDKafkaError),
    /// The producer is in librdkafka's fatal state and could not be replaced.
    #[error("{0} (a fenced producer means another instance took over with the same --instance)")]
    Producer(Box<ProduceError>),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e.is_transient() {
            true => Error::Transient(e.into()),
            false => Error::Fatal(Fatal::Store(e)),
        }
    }
}

impl From<KafkaError> for Error {
    /// A client error outside a transaction: the client retries what it can itself, and
    /// what it gives up on (a timeout, a broker away) may pass.
    fn from(e: KafkaError) -> Self {
        Error::Transient(e.into())
    }
}

impl From<ProduceError> for Error {
    /// Transient unless the producer is in a fatal state (see [`ProduceError::fatal`]).
    fn from(e: ProduceError) -> Self {
        match e.fatal {
            Some(_) => Error::Fatal(Fatal::Producer(Box::new(e))),
            None => Error::Transient(e.into()),
        }
    }
}

impl Error {
    /// A transactional call's error: fatal when librdkafka says so, when it can be neither
    /// retried nor aborted, or when the broker lacks the API (it will not grow one on retry);
    /// anything else is aborted and retried.
    pub fn of_transaction(e: KafkaError) -> Self {
        let KafkaError::Transaction(r) = &e else {
            return Error::from(e);
        };
        let unsupported = matches!(
            r.code(),
            RDKafkaErrorCode::UnsupportedFeature | RDKafkaErrorCode::UnsupportedVersion
        );
        if r.is_fatal() || (!r.is_retriable() && !r.txn_requires_abort()) || unsupported {
            let KafkaError::Transaction(r) = e else { unreachable!() };
            return Error::Fatal(Fatal::Transaction(r));
        }
        Error::from(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn corrupt() -> StoreError {
        StoreError::Corrupt {
            what: "a timer key".into(),
            path: PathBuf::from("/state/partition-0"),
            detail: "garbage".into(),
        }
    }

    #[test]
    fn a_store_error_is_fatal_unless_waiting_may_mend_it() {
        assert!(matches!(Error::from(corrupt()), Error::Fatal(Fatal::Store(_))));
        let locked = StoreError::Create {
            path: PathBuf::from("/state/partition-0"),
            source: std::io::Error::other("busy"),
        };
        assert!(matches!(Error::from(locked), Error::Transient(_)));
    }

    #[test]
    fn a_store_locked_by_another_process_is_transient_and_a_foreign_format_is_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let _held = super::super::store::PartitionStore::open(dir.path(), 0).unwrap();
        let locked = super::super::store::PartitionStore::open(dir.path(), 0).err().unwrap();
        assert!(matches!(Error::from(locked), Error::Transient(_)));
        let foreign = dir.path().join("partition-1");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::write(foreign.join("CURRENT"), "MANIFEST-000099\n").unwrap();
        std::fs::write(foreign.join("MANIFEST-000099"), b"not a manifest").unwrap();
        let broken = super::super::store::PartitionStore::open(dir.path(), 1).err().unwrap();
        assert!(
            matches!(Error::from(broken), Error::Fatal(Fatal::Store(_))),
            "a broken store must not be retried"
        );
    }

    #[test]
    fn a_transactional_call_no_retry_mends_is_fatal() {
        // A real librdkafka error, no broker needed: a transaction begun before the
        // producer's transactions were initialised can be neither retried nor aborted.
        let producer: rdkafka::producer::BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:9")
            .set("transactional.id", "sluice-error-test")
            .create()
            .unwrap();
        let e = rdkafka::producer::Producer::begin_transaction(&producer).unwrap_err();
        assert!(matches!(Error::of_transaction(e), Error::Fatal(Fatal::Transaction(_))));
    }

    #[test]
    fn a_transaction_error_outside_a_transaction_call_is_transient() {
        let e = KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut);
        assert!(matches!(Error::of_transaction(e), Error::Transient(_)));
    }

    #[test]
    fn a_corrupt_store_says_so_and_where() {
        let e = Error::from(corrupt());
        assert!(
            e.to_string()
                .starts_with("corrupt state: a timer key in /state/partition-0"),
            "{e}"
        );
    }
}

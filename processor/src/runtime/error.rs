//! The runtime's errors, sorted by what it does about them: a [`Transient`](Error::Transient)
//! one is retried with backoff for as long as it lasts (a broker that does not answer, a
//! store still locked by a process letting go of it); a [`Fatal`] one stops what it
//! interrupts (a partition's opening, or the run), with its cause typed. Each error is sorted
//! where it arises, from the typed error of the library that raised it, so nothing later
//! has to guess by downcasting or by reading messages. A run that ends in error either
//! [`Stop`]s on purpose (a zombie, partitions added, a fenced client, an input not even
//! whose rejection fits) or fails.

use rdkafka::error::{KafkaError, RDKafkaError};
use rdkafka::types::RDKafkaErrorCode;

use super::changelog::StateAhead;
use super::kafka::ProduceError;
use super::opening::{Cancelled, InputAhead};
use super::store::StoreError;
use crate::core::task::{PartitionsAdded, TaskError, Zombie};

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

/// Why a run stopped on purpose, before anything of the batch under way counted: not a
/// failure of the processor but a state of the world it must not go on in. Logged as
/// `stop=<name>`, beside the words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// A newer owner's fence: this instance lost its partitions without being told. A
    /// restart restores what it owns afresh.
    Zombie,
    /// The input topics grew partitions at run time (see the README's "Partitions").
    PartitionsAdded,
    /// A Kafka client in librdkafka's fatal state: fenced by another process with the same
    /// `--instance`, or by the broker.
    FatalClient,
    /// Not even an input's rejection fits the limits (a limit set below what any event
    /// needs): a person must raise it.
    OutputTooLarge,
}

impl Stop {
    /// The stop `e` is, if it is one (whatever context was added on the way up).
    pub fn of(e: &anyhow::Error) -> Option<Stop> {
        e.chain().find_map(|cause| {
            if let Some(task) = cause.downcast_ref::<TaskError>() {
                return match task {
                    TaskError::Zombie(_) => Some(Stop::Zombie),
                    TaskError::PartitionsAdded(_) => Some(Stop::PartitionsAdded),
                    TaskError::EvenItsRejection { .. } => Some(Stop::OutputTooLarge),
                    _ => None,
                };
            }
            if cause.is::<Zombie>() {
                return Some(Stop::Zombie);
            }
            if cause.is::<PartitionsAdded>() {
                return Some(Stop::PartitionsAdded);
            }
            // A transaction refused for good without librdkafka's fatal state (a broker
            // without transactions) is a failure: no other process's doing.
            let fatal = (cause.downcast_ref::<Fatal>()).or_else(|| match cause.downcast_ref::<Error>() {
                Some(Error::Fatal(fatal)) => Some(fatal),
                _ => None,
            });
            let fenced = match fatal {
                Some(Fatal::Transaction(r)) => r.is_fatal(),
                Some(Fatal::Producer(_)) => true,
                _ => false,
            };
            (fenced || cause.is::<FatalClient>()).then_some(Stop::FatalClient)
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Stop::Zombie => "zombie",
            Stop::PartitionsAdded => "partitions_added",
            Stop::FatalClient => "fatal_client",
            Stop::OutputTooLarge => "output_too_large",
        }
    }
}

/// A Kafka client of this process in librdkafka's fatal state (see [`Stop::FatalClient`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FatalClient(pub String);

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
    use crate::core::limits::OverLimit;
    use crate::core::partitioning::PartitionId;
    use std::path::PathBuf;

    #[test]
    fn a_stop_is_told_from_a_failure_whatever_context_it_carries() {
        let stop = |e: anyhow::Error| Stop::of(&e.context("processing a batch").context("running"));
        let p = PartitionId::new;
        assert_eq!(stop(TaskError::from(Zombie(vec![p(1)])).into()), Some(Stop::Zombie));
        assert_eq!(stop(Zombie(vec![p(0), p(2)]).into()), Some(Stop::Zombie));
        let added = PartitionsAdded {
            partitions: 3,
            assigned: p(4),
        };
        assert_eq!(stop(TaskError::from(added).into()), Some(Stop::PartitionsAdded));
        assert_eq!(stop(FatalClient("fenced".into()).into()), Some(Stop::FatalClient));
        let produce_error = |fatal: Option<&str>| ProduceError {
            topic: "sluice.events".into(),
            source: KafkaError::MessageProduction(RDKafkaErrorCode::ProducerFenced),
            fatal: fatal.map(Into::into),
        };
        let fenced_producer = Error::from(produce_error(Some("fenced")));
        assert_eq!(stop(fenced_producer.into()), Some(Stop::FatalClient));
        let refused = Error::from(produce_error(None));
        assert_eq!(stop(refused.into()), None, "retried, not a stop");
        let over = TaskError::EvenItsRejection {
            pipeline: "p".into(),
            reason: OverLimit::Message {
                what: "an event",
                len: 200,
                limit: 100,
            },
        };
        assert_eq!(stop(over.into()), Some(Stop::OutputTooLarge));
        let went_back = TaskError::ChangelogWentBack(p(0), "sluice.changelog".into());
        assert_eq!(stop(went_back.into()), None, "a failure, not a stop");
        assert_eq!(stop(Error::from(corrupt()).into()), None);
        assert_eq!(stop(anyhow::anyhow!("anything else")), None);
        assert_eq!(Stop::OutputTooLarge.name(), "output_too_large");
    }

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
        let _held = super::super::store::PartitionStore::open(dir.path(), PartitionId::new(0)).unwrap();
        let locked = super::super::store::PartitionStore::open(dir.path(), PartitionId::new(0))
            .err()
            .unwrap();
        assert!(matches!(Error::from(locked), Error::Transient(_)));
        let foreign = dir.path().join("partition-1");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::write(foreign.join("CURRENT"), "MANIFEST-000099\n").unwrap();
        std::fs::write(foreign.join("MANIFEST-000099"), b"not a manifest").unwrap();
        let broken = super::super::store::PartitionStore::open(dir.path(), PartitionId::new(1))
            .err()
            .unwrap();
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

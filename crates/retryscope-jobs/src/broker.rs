//! The broker behind the worker: a small trait, so that a second broker
//! (RabbitMQ, SQS, a PostgreSQL queue) is one module, as [`nats`](crate::nats) is.

use bytes::Bytes;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::time::Duration;

/// One delivery of one message, to be settled exactly once by the worker.
pub trait Delivery: Send + Sync + 'static {
    /// The subject (queue, topic) the message was published to.
    fn subject(&self) -> &str;
    /// The message body.
    fn payload(&self) -> &Bytes;
    /// A header's value, if present and text.
    fn header(&self, name: &str) -> Option<&str>;
    /// The broker's id of the message (JetStream: the stream sequence).
    fn message_id(&self) -> String;
    /// How often the broker has delivered this message, this delivery included.
    fn delivered(&self) -> u64;
    /// Done: never deliver it again.
    fn ack(&self) -> impl Future<Output = Result<(), BrokerError>> + Send;
    /// Not now: deliver it again after `delay`.
    fn nak(&self, delay: Duration) -> impl Future<Output = Result<(), BrokerError>> + Send;
    /// Still working on it: restart the redelivery timer.
    fn in_progress(&self) -> impl Future<Output = Result<(), BrokerError>> + Send;
    /// Never deliver it again, without it being done (after it was dead-lettered).
    fn term(&self) -> impl Future<Output = Result<(), BrokerError>> + Send;
}

/// A message to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Where to publish it.
    pub subject: String,
    /// Its body.
    pub payload: Bytes,
    /// Its headers, in order.
    pub headers: Vec<(String, String)>,
    /// The id the broker de-duplicates publishes by (JetStream: `Nats-Msg-Id`).
    pub dedup_id: Option<String>,
}

/// What the broker said about a stored publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// Where it was stored (JetStream: the stream sequence).
    pub sequence: u64,
    /// Whether the broker had it already (same de-duplication id within its window).
    pub duplicate: bool,
}

/// A queue the worker pulls jobs from and publishes retries and dead letters to.
pub trait Broker: Send + Sync + 'static {
    /// One delivery.
    type Delivery: Delivery;

    /// Up to `max` deliveries, waiting at most `wait` for the first.
    fn fetch(
        &self,
        max: usize,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<Self::Delivery>, BrokerError>> + Send;

    /// Publishes a job (a first attempt or a retry) and waits until the broker stored it.
    fn publish(&self, message: Outgoing) -> impl Future<Output = Result<Published, BrokerError>> + Send;

    /// Publishes a dead letter (its subject is the job's) to the dead-letter
    /// store and waits until the broker stored it.
    fn publish_dead(&self, message: Outgoing) -> impl Future<Output = Result<Published, BrokerError>> + Send;

    /// How long a delivery may stay unsettled before the broker delivers it again.
    fn ack_wait(&self) -> Duration;

    /// How often the broker delivers a message at most (`None`: without bound).
    fn max_deliver(&self) -> Option<u64>;
}

/// A stored dead letter, as the dead-letter store lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDead {
    /// Its id in the dead-letter store (JetStream: the stream sequence).
    pub id: u64,
    /// Its subject in the dead-letter store.
    pub subject: String,
    /// Its body (the job's).
    pub payload: Bytes,
    /// Its headers.
    pub headers: Vec<(String, String)>,
}

/// Where dead letters are kept, to list, inspect and remove them.
pub trait DeadLetterStore: Send + Sync + 'static {
    /// Up to `limit` dead letters, oldest first, from id `from` on.
    fn list_dead(
        &self,
        from: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<StoredDead>, BrokerError>> + Send;
    /// One dead letter, if it is still there.
    fn get_dead(&self, id: u64) -> impl Future<Output = Result<Option<StoredDead>, BrokerError>> + Send;
    /// Removes one dead letter; `false` if it was gone already.
    fn remove_dead(&self, id: u64) -> impl Future<Output = Result<bool, BrokerError>> + Send;
    /// How many dead letters are kept.
    fn dead_depth(&self) -> impl Future<Output = Result<u64, BrokerError>> + Send;
    /// The name of the store (JetStream: the dead-letter stream): the
    /// `messaging.destination.name` of `retryscope.job.dead_letter.depth`.
    fn dead_letters_name(&self) -> &str;
}

/// A broker operation failed. Its source is the client's error.
#[derive(Debug)]
pub struct BrokerError {
    operation: &'static str,
    source: Box<dyn Error + Send + Sync>,
}

impl BrokerError {
    /// `operation` (a short name such as `"fetch"`) failed with `source`.
    pub fn new(operation: &'static str, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self { operation, source: source.into() }
    }

    /// The operation that failed.
    pub const fn operation(&self) -> &'static str {
        self.operation
    }
}

impl fmt::Display for BrokerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the broker's {} failed", self.operation)
    }
}

impl Error for BrokerError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

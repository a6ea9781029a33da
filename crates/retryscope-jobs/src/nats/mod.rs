//! The NATS JetStream broker: a durable pull consumer on a job stream, a
//! dead-letter stream beside it, publishes de-duplicated by `Nats-Msg-Id`.
//!
//! Works with nats-server 2.9 and later: it uses none of the 2.10+ APIs.

mod delivery;

pub use delivery::NatsDelivery;

use crate::broker::{Broker, BrokerError, DeadLetterStore, Outgoing, Published, StoredDead};
use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::message::PublishMessage as Publish;
use async_nats::jetstream::stream::{self, Stream};
use async_nats::jetstream::{self, Context};
use futures_util::StreamExt;
use std::fmt;
use std::time::Duration;

/// Settings of a [`NatsQueue`]: stream, consumer and dead-letter names.
#[derive(Debug, Clone)]
#[must_use = "a queue is made by `NatsQueue::open`"]
pub struct NatsQueueConfig {
    stream: String,
    subjects: Vec<String>,
    consumer: String,
    dead_stream: String,
    dead_prefix: String,
    ack_wait: Duration,
    duplicate_window: Duration,
    max_ack_pending: i64,
}

impl NatsQueueConfig {
    /// A queue on stream `stream` holding `subjects`, consumed by the durable
    /// consumer `consumer`; dead letters in stream `<stream>_DEAD` under
    /// `dead.<subject>`. AckWait 30 s, de-duplication window 2 min.
    pub fn new(
        stream: impl Into<String>,
        subjects: impl IntoIterator<Item = impl Into<String>>,
        consumer: impl Into<String>,
    ) -> Self {
        let stream = stream.into();
        Self {
            dead_stream: format!("{stream}_DEAD"),
            dead_prefix: format!("dead_{}", stream.to_ascii_lowercase()),
            stream,
            subjects: subjects.into_iter().map(Into::into).collect(),
            consumer: consumer.into(),
            ack_wait: Duration::from_secs(30),
            duplicate_window: Duration::from_secs(120),
            max_ack_pending: 1_000,
        }
    }

    /// How long a delivery may stay unsettled before JetStream delivers it
    /// again; a running job sends in-progress acks well within it.
    pub fn ack_wait(mut self, ack_wait: Duration) -> Self {
        self.ack_wait = ack_wait;
        self
    }

    /// How long JetStream remembers a `Nats-Msg-Id`: a producer's duplicate
    /// within it is stored once.
    pub fn duplicate_window(mut self, window: Duration) -> Self {
        self.duplicate_window = window;
        self
    }

    /// Names the dead-letter stream and its subject prefix.
    pub fn dead_letters(mut self, stream: impl Into<String>, prefix: impl Into<String>) -> Self {
        self.dead_stream = stream.into();
        self.dead_prefix = prefix.into();
        self
    }

    /// How many deliveries may be unsettled at once across every worker.
    pub fn max_ack_pending(mut self, max: i64) -> Self {
        self.max_ack_pending = max;
        self
    }
}

/// A job queue on NATS JetStream: implements [`Broker`] (for workers and
/// producers) and [`DeadLetterStore`].
#[derive(Clone)]
pub struct NatsQueue {
    js: Context,
    consumer: PullConsumer,
    dead: Stream,
    dead_stream: String,
    dead_prefix: String,
    ack_wait: Duration,
    max_deliver: u64,
}

impl fmt::Debug for NatsQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsQueue")
            .field("dead_prefix", &self.dead_prefix)
            .field("ack_wait", &self.ack_wait)
            .field("max_deliver", &self.max_deliver)
            .finish_non_exhaustive()
    }
}

impl NatsQueue {
    /// Creates (or opens) the streams and the durable consumer, its
    /// `max_deliver` [`MAX_DELIVER`](crate::MAX_DELIVER) whatever the policy:
    /// each retry is a new message, so the deliveries one message needs do
    /// not grow with the attempts.
    ///
    /// # Errors
    ///
    /// When JetStream refuses a stream or the consumer.
    pub async fn open(client: async_nats::Client, config: NatsQueueConfig) -> Result<Self, BrokerError> {
        let js = jetstream::new(client);
        let jobs = js
            .get_or_create_stream(stream::Config {
                name: config.stream.clone(),
                subjects: config.subjects.clone(),
                duplicate_window: config.duplicate_window,
                ..Default::default()
            })
            .await
            .map_err(|e| BrokerError::new("create_stream", e))?;
        let dead = js
            .get_or_create_stream(stream::Config {
                name: config.dead_stream.clone(),
                subjects: vec![format!("{}.>", config.dead_prefix)],
                ..Default::default()
            })
            .await
            .map_err(|e| BrokerError::new("create_dead_stream", e))?;
        let max_deliver = crate::MAX_DELIVER;
        let consumer: PullConsumer = jobs
            .get_or_create_consumer(
                &config.consumer,
                pull::Config {
                    durable_name: Some(config.consumer.clone()),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: config.ack_wait,
                    max_deliver: i64::try_from(max_deliver).unwrap_or(i64::MAX),
                    max_ack_pending: config.max_ack_pending,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| BrokerError::new("create_consumer", e))?;
        Ok(Self {
            js,
            consumer,
            dead,
            dead_stream: config.dead_stream,
            dead_prefix: config.dead_prefix,
            ack_wait: config.ack_wait,
            max_deliver,
        })
    }

    /// Opens an existing queue (streams and consumer made by [`open`](Self::open)),
    /// changing nothing: what an operator's tool does to list, inspect and
    /// replay dead letters. `config`'s names are read; its other settings are
    /// the consumer's own.
    ///
    /// # Errors
    ///
    /// When a stream or the consumer does not exist.
    pub async fn attach(client: async_nats::Client, config: &NatsQueueConfig) -> Result<Self, BrokerError> {
        let js = jetstream::new(client);
        let jobs = js.get_stream(&config.stream).await.map_err(|e| BrokerError::new("get_stream", e))?;
        let dead =
            js.get_stream(&config.dead_stream).await.map_err(|e| BrokerError::new("get_dead_stream", e))?;
        let mut consumer: PullConsumer =
            jobs.get_consumer(&config.consumer).await.map_err(|e| BrokerError::new("get_consumer", e))?;
        let info = consumer.info().await.map_err(|e| BrokerError::new("consumer_info", e))?;
        let (ack_wait, max_deliver) =
            (info.config.ack_wait, u64::try_from(info.config.max_deliver).unwrap_or(u64::MAX));
        Ok(Self {
            js,
            consumer,
            dead,
            dead_stream: config.dead_stream.clone(),
            dead_prefix: config.dead_prefix.clone(),
            ack_wait,
            max_deliver,
        })
    }

    /// The JetStream context, for what this type does not wrap.
    pub fn context(&self) -> &Context {
        &self.js
    }

    async fn send(&self, operation: &'static str, message: Outgoing) -> Result<Published, BrokerError> {
        let mut headers = HeaderMap::new();
        for (name, value) in &message.headers {
            headers.insert(name.as_str(), value.as_str());
        }
        let mut publish = Publish::build().payload(message.payload).headers(headers);
        if let Some(id) = &message.dedup_id {
            publish = publish.message_id(id);
        }
        let ack = self
            .js
            .send_publish(message.subject, publish)
            .await
            .map_err(|e| BrokerError::new(operation, e))?
            .await
            .map_err(|e| BrokerError::new(operation, e))?;
        Ok(Published { sequence: ack.sequence, duplicate: ack.duplicate })
    }
}

impl Broker for NatsQueue {
    type Delivery = NatsDelivery;

    async fn fetch(&self, max: usize, wait: Duration) -> Result<Vec<NatsDelivery>, BrokerError> {
        let mut batch = self
            .consumer
            .fetch()
            .max_messages(max)
            .expires(wait)
            .messages()
            .await
            .map_err(|e| BrokerError::new("fetch", e))?;
        let mut out = Vec::with_capacity(max);
        while let Some(message) = batch.next().await {
            match message {
                Ok(message) => out.push(NatsDelivery::new(message)),
                // What came before the error is ours to settle; the rest is redelivered.
                Err(e) if out.is_empty() => return Err(BrokerError::new("fetch", e)),
                Err(_) => break,
            }
        }
        Ok(out)
    }

    async fn publish(&self, message: Outgoing) -> Result<Published, BrokerError> {
        self.send("publish", message).await
    }

    async fn publish_dead(&self, message: Outgoing) -> Result<Published, BrokerError> {
        let subject = format!("{}.{}", self.dead_prefix, message.subject);
        self.send("publish_dead", Outgoing { subject, ..message }).await
    }

    fn ack_wait(&self) -> Duration {
        self.ack_wait
    }

    fn max_deliver(&self) -> Option<u64> {
        Some(self.max_deliver)
    }
}

fn stored(message: async_nats::jetstream::message::StreamMessage) -> StoredDead {
    let headers = message
        .headers
        .iter()
        .flat_map(|(name, values)| values.iter().map(move |v| (name.to_string(), v.as_str().to_owned())))
        .collect();
    StoredDead {
        id: message.sequence,
        subject: message.subject.to_string(),
        payload: message.payload,
        headers,
    }
}

fn is_not_found(error: &async_nats::jetstream::stream::RawMessageError) -> bool {
    matches!(error.kind(), async_nats::jetstream::stream::RawMessageErrorKind::NoMessageFound)
}

impl DeadLetterStore for NatsQueue {
    async fn list_dead(&self, from: u64, limit: usize) -> Result<Vec<StoredDead>, BrokerError> {
        let filter = format!("{}.>", self.dead_prefix);
        let mut out = Vec::new();
        let mut next = from.max(1);
        while out.len() < limit {
            match self.dead.raw_message_builder().sequence(next).next_by_subject(filter.clone()).send().await
            {
                Ok(message) => {
                    next = message.sequence + 1;
                    out.push(stored(message));
                }
                Err(e) if is_not_found(&e) => break,
                Err(e) => return Err(BrokerError::new("list_dead", e)),
            }
        }
        Ok(out)
    }

    async fn get_dead(&self, id: u64) -> Result<Option<StoredDead>, BrokerError> {
        match self.dead.get_raw_message(id).await {
            Ok(message) => Ok(Some(stored(message))),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(BrokerError::new("get_dead", e)),
        }
    }

    async fn remove_dead(&self, id: u64) -> Result<bool, BrokerError> {
        match self.dead.delete_message(id).await {
            Ok(deleted) => Ok(deleted),
            Err(e) if e.to_string().contains("not found") => Ok(false),
            Err(e) => Err(BrokerError::new("remove_dead", e)),
        }
    }

    async fn dead_depth(&self) -> Result<u64, BrokerError> {
        let info = self.dead.get_info().await.map_err(|e| BrokerError::new("dead_depth", e))?;
        Ok(info.state.messages)
    }

    fn dead_letters_name(&self) -> &str {
        &self.dead_stream
    }
}

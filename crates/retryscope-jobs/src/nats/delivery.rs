//! One JetStream delivery, settled through the [`Delivery`] trait.

use crate::broker::{BrokerError, Delivery};
use async_nats::jetstream::{AckKind, Message};
use bytes::Bytes;
use std::time::Duration;

/// A message a JetStream pull consumer delivered.
#[derive(Debug)]
pub struct NatsDelivery {
    message: Message,
    sequence: u64,
    delivered: u64,
}

impl NatsDelivery {
    pub(crate) fn new(message: Message) -> Self {
        // A message without JetStream metadata (it cannot come from a pull
        // consumer) counts as a first delivery of sequence 0.
        let (sequence, delivered) = message
            .info()
            .map(|info| (info.stream_sequence, u64::try_from(info.delivered).unwrap_or(1)))
            .unwrap_or((0, 1));
        Self { message, sequence, delivered }
    }

    /// The underlying message.
    pub fn message(&self) -> &Message {
        &self.message
    }

    async fn settle(&self, operation: &'static str, kind: AckKind) -> Result<(), BrokerError> {
        self.message.ack_with(kind).await.map_err(|e| BrokerError::new(operation, e))
    }
}

impl Delivery for NatsDelivery {
    fn subject(&self) -> &str {
        self.message.subject.as_str()
    }

    fn payload(&self) -> &Bytes {
        &self.message.payload
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.message.headers.as_ref()?.get(name).map(|v| v.as_str())
    }

    fn message_id(&self) -> String {
        self.sequence.to_string()
    }

    fn delivered(&self) -> u64 {
        self.delivered
    }

    async fn ack(&self) -> Result<(), BrokerError> {
        // A double ack: the server confirms it, so a lost ack is seen here
        // (and the key store settles the redelivery) rather than assumed away.
        self.message.double_ack().await.map_err(|e| BrokerError::new("ack", e))
    }

    async fn nak(&self, delay: Duration) -> Result<(), BrokerError> {
        self.settle("nak", AckKind::Nak(Some(delay))).await
    }

    async fn in_progress(&self) -> Result<(), BrokerError> {
        self.settle("in_progress", AckKind::Progress).await
    }

    async fn term(&self) -> Result<(), BrokerError> {
        self.settle("term", AckKind::Term).await
    }
}

//! The processed-key store, through the idempotency crate's store trait: a
//! job whose work completed is recorded under its key, so that a redelivery
//! (the ack was lost, the worker died before it) is acked, not run again.

use retryscope_idempotency::store::{Claim, Completion, EntryState, Ticket};
use retryscope_idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore};
use std::time::Duration;

/// What the store said about a job's key.
pub(crate) enum Claimed {
    /// Run it; settle the ticket after.
    Run(Option<Ticket>),
    /// It completed before: ack it.
    Done,
    /// Another worker holds it, the store is full or unreachable: try later.
    Later(Duration),
}

pub(crate) struct Keys<S> {
    pub(crate) store: Option<S>,
    /// The broker's AckWait: a claim lasts the execution's timeout plus
    /// this, so a worker that dies while running frees it.
    pub(crate) ack_wait: Duration,
    /// How long a completed key is remembered.
    pub(crate) ttl: Duration,
}

impl<S: IdempotencyStore> Keys<S> {
    /// Claims `key` for an execution that may run for `timeout`.
    pub(crate) async fn claim(
        &self,
        key: Option<&str>,
        subject: &str,
        payload: &[u8],
        timeout: Duration,
    ) -> Claimed {
        let lease = timeout.saturating_add(self.ack_wait);
        let (Some(store), Some(key)) = (&self.store, key) else { return Claimed::Run(None) };
        let Some(key) = store_key(key) else {
            tracing::warn!(target: retryscope_otel::names::TARGET, key, "a job key the store cannot hold runs without de-duplication");
            return Claimed::Run(None);
        };
        // The job's subject and body are its fingerprint: a key is the job's
        // identity, so a different body under it is still the same job.
        let fingerprint = Fingerprint::of(&http::Method::POST, subject, payload);
        match store.claim(&key, fingerprint, lease).await {
            Ok(Claim::Claimed(ticket)) => Claimed::Run(Some(ticket)),
            Ok(Claim::Held(entry)) => match entry.state {
                EntryState::InFlight => Claimed::Later(lease.min(Duration::from_secs(5))),
                EntryState::Completed(_) | EntryState::NotReplayable => Claimed::Done,
            },
            Ok(Claim::Full { retry_after }) => Claimed::Later(retry_after),
            Err(error) => {
                tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, "the processed-key store failed: the job waits");
                Claimed::Later(Duration::from_secs(1))
            }
        }
    }

    pub(crate) async fn complete(&self, ticket: Option<Ticket>) {
        if let (Some(store), Some(ticket)) = (&self.store, ticket)
            && let Err(error) = store.complete(&ticket, Completion::NotReplayable, self.ttl).await
        {
            // The job is acked anyway: only a lost ack on top would run it twice.
            tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, "the processed-key store did not record a completed job");
        }
    }

    pub(crate) async fn release(&self, ticket: Option<Ticket>) {
        if let (Some(store), Some(ticket)) = (&self.store, ticket)
            && let Err(error) = store.release(&ticket).await
        {
            tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, "the processed-key store did not free a job key (its lease will)");
        }
    }
}

/// The key as the store's type, which parses a structured-field string.
fn store_key(key: &str) -> Option<IdempotencyKey> {
    let mut quoted = String::with_capacity(key.len() + 2);
    quoted.push('"');
    for c in key.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    IdempotencyKey::parse(quoted.as_bytes()).ok()
}

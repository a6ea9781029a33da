//! The processed-key store, through the idempotency crate's store trait: a
//! job whose work completed is recorded under its key, so that a redelivery
//! (the ack was lost, the worker died before it) is acked, not run again.
//!
//! While a handler runs, its key is *claimed*, and the claim lives by
//! heartbeat: it lasts [`PERIODS_PER_CLAIM`] renewal periods and is renewed
//! every period ([`renewal_period`]: a third of the broker's AckWait, between
//! [`MIN_RENEWAL`] and [`MAX_RENEWAL`]), so a slow handler keeps its claim for
//! as long as it runs, and a crashed worker's claim runs out within the
//! AckWait, when the broker delivers its job again.

use retryscope_idempotency::store::{Claim, Completion, EntryState, Ticket};
use retryscope_idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore};
use std::time::Duration;

/// What the store said about a job's key.
pub(crate) enum Claimed {
    /// Run it; settle the ticket after.
    Run(Option<Ticket>),
    /// It completed before: ack it.
    Done,
    /// Another worker's live claim holds it: try again in a renewal period.
    Elsewhere(Duration),
    /// The store is full or unreachable: try later.
    Later(Duration),
}

/// A claim lasts this many renewal periods. Renewals start every period,
/// each given half a period: after the last that succeeded, the next may
/// fail (a slow store, a lost reply) and the one after still renews in time.
pub(crate) const PERIODS_PER_CLAIM: u32 = 3;
/// The shortest renewal period (a store round trip each).
pub(crate) const MIN_RENEWAL: Duration = Duration::from_millis(10);
/// The longest renewal period, whatever the AckWait: a claim outlives its
/// worker by 30 s at most.
pub(crate) const MAX_RENEWAL: Duration = Duration::from_secs(10);

/// How often a running job's claim is renewed: a third of the AckWait (the
/// period of its in-progress acks), bounded.
pub(crate) fn renewal_period(ack_wait: Duration) -> Duration {
    (ack_wait / 3).clamp(MIN_RENEWAL, MAX_RENEWAL)
}

pub(crate) struct Keys<S> {
    pub(crate) store: Option<S>,
    /// How often a running job's claim is renewed ([`renewal_period`]).
    pub(crate) renew_every: Duration,
    /// How long a completed key is remembered.
    pub(crate) ttl: Duration,
}

impl<S: IdempotencyStore> Keys<S> {
    /// How long a claim lasts unless renewed.
    pub(crate) fn lease(&self) -> Duration {
        self.renew_every.saturating_mul(PERIODS_PER_CLAIM)
    }

    /// Claims `key` for one execution, for [`lease`](Self::lease);
    /// [`renewing`](Self::renewing) renews it while the handler runs.
    pub(crate) async fn claim(&self, key: Option<&str>, subject: &str, payload: &[u8]) -> Claimed {
        let lease = self.lease();
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
                // Live, or its worker died less than a claim ago: once it runs
                // out (no renewal for a claim's length) the next look takes it.
                EntryState::InFlight => Claimed::Elsewhere(self.renew_every),
                EntryState::Completed(_) | EntryState::NotReplayable => Claimed::Done,
            },
            Ok(Claim::Full { retry_after }) => Claimed::Later(retry_after),
            Err(error) => {
                tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, "the processed-key store failed: the job waits");
                Claimed::Later(Duration::from_secs(1))
            }
        }
    }

    /// Runs `work` while the claim of `ticket` is renewed every renewal
    /// period ([`renewing`](retryscope_idempotency::store::renewing)), each
    /// renewal given half a period: while the handler runs, and while what
    /// settles a failed attempt — its retry or its dead letter stored, the
    /// attempt record raised — waits on a restarting broker for longer than
    /// a claim (a redelivery that took the lapsed claim before the record
    /// was raised would run the attempt again).
    pub(crate) async fn renewing<T>(&self, ticket: Option<&Ticket>, work: impl Future<Output = T>) -> T {
        let (Some(store), Some(ticket)) = (&self.store, ticket) else { return work.await };
        let (lease, every) = (self.lease(), self.renew_every);
        retryscope_idempotency::store::renewing(store, ticket, lease, every, every / 2, work).await
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
pub(super) fn store_key(key: &str) -> Option<IdempotencyKey> {
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

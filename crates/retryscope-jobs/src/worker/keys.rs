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
            // Unreachable: the hashed form is always a key the store holds.
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

/// The key as the store's type, which parses a structured-field string of
/// printable ASCII, at most 255 characters: the key itself where it is one,
/// else `sha256:<hex>` of it (as a job-keyed call's key is hashed), the same
/// in every worker. A key the store could not hold as written ran without
/// de-duplication: a redelivery ran the handler again.
pub(super) fn store_key(key: &str) -> Option<IdempotencyKey> {
    literal_key(key).or_else(|| {
        use sha2::Digest;
        use std::fmt::Write;
        let mut hashed = String::with_capacity(7 + 64);
        hashed.push_str("sha256:");
        for byte in sha2::Sha256::digest(key.as_bytes()) {
            // Writing to a String cannot fail.
            let _ = write!(hashed, "{byte:02x}");
        }
        literal_key(&hashed)
    })
}

fn literal_key(key: &str) -> Option<IdempotencyKey> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key has a form the store holds: as written where it can be, else
    /// hashed, the same for the same key.
    #[test]
    fn a_key_the_store_cannot_hold_as_written_is_stored_by_its_hash() {
        assert_eq!(store_key("order-7").map(|k| k.as_str().to_owned()), Some("order-7".to_owned()));
        let long = "k".repeat(300);
        for key in ["commande-é", "tab\there", long.as_str(), ""] {
            let stored = store_key(key).unwrap_or_else(|| panic!("{key:?} has no stored form"));
            assert!(
                stored.as_str().starts_with("sha256:") && stored.as_str().len() == 71,
                "{key:?}: {stored:?}"
            );
            assert_eq!(store_key(key), Some(stored), "{key:?}: the same in every worker");
        }
        assert_ne!(store_key("commande-é"), store_key("commande-è"));
    }

    /// A duplicate of a job whose key is not printable ASCII waits on the
    /// first's claim, as any keyed job's does. (Both ran: the key went
    /// unclaimed.)
    #[tokio::test]
    async fn a_duplicate_of_a_non_ascii_key_waits_on_the_first_claim() {
        let keys = Keys {
            store: Some(retryscope_idempotency::MemoryStore::default()),
            renew_every: Duration::from_secs(1),
            ttl: Duration::from_secs(60),
        };
        let first = keys.claim(Some("commande-é"), "orders", b"sku=1").await;
        assert!(matches!(first, Claimed::Run(Some(_))));
        let second = keys.claim(Some("commande-é"), "orders", b"sku=1").await;
        assert!(matches!(second, Claimed::Elsewhere(_)));
    }
}

//! The attempt record: beside each job key's claim, the key store keeps the
//! highest attempt a worker ran or scheduled for the job, so that a delivery
//! of an older attempt — its ack lost to a broker restart or a crash after
//! the retry that replaced it was stored — is acked and dropped
//! ([`JobOutcome::Superseded`]), not run a time more than scheduled.
//!
//! Only a keyed job has a record: a keyless one has nothing to record it
//! under, and runs as often as the broker delivers it. The record expires
//! with the processed key's TTL, and is raised (never lowered) by one atomic
//! store operation, [`IdempotencyStore::raise_mark`].

use super::keys::{Keys, store_key};
use crate::broker::Delivery;
use crate::job::JobOutcome;
use crate::meta::JobMeta;
use retryscope_idempotency::IdempotencyStore;
use std::time::Duration;

/// What the attempt record said about a delivery.
pub(crate) enum Admitted {
    /// No later attempt was run or scheduled: this one may run (and is now
    /// the record, so an older one that comes later is dropped).
    Current,
    /// A later attempt was already run or scheduled: the record's mark.
    Superseded(u64),
    /// The store failed: try later.
    Later(Duration),
}

/// A job's attempt as a mark. Replays rank above attempts: a replayed dead
/// letter is attempt 1 again, one replay more, and later than every attempt
/// before its replay.
pub(crate) fn mark(meta: &JobMeta) -> u64 {
    (u64::from(meta.replays) << 32) | u64::from(meta.attempt)
}

/// The `(replays, attempt)` a mark stands for, for the log.
fn unmark(mark: u64) -> (u64, u64) {
    (mark >> 32, mark & u64::from(u32::MAX))
}

impl<S: IdempotencyStore> Keys<S> {
    /// Records that the delivery's attempt is about to run, unless a later
    /// one was already run or scheduled. Called under the job key's claim,
    /// as [`scheduled`](Self::scheduled) is: the claim orders the two, so a
    /// delivery that waited on the claim of the attempt it duplicates sees
    /// the retry that attempt recorded.
    pub(crate) async fn admit(&self, meta: &JobMeta) -> Admitted {
        let (Some(store), Some(key)) = (&self.store, meta.key.as_deref().and_then(store_key)) else {
            return Admitted::Current;
        };
        let own = mark(meta);
        match store.raise_mark(&key, own, self.ttl).await {
            Ok(Some(recorded)) if recorded > own => Admitted::Superseded(recorded),
            Ok(_) => Admitted::Current,
            Err(error) => {
                tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, "the job-key store did not answer for the attempt record: the job waits");
                Admitted::Later(Duration::from_secs(1))
            }
        }
    }

    /// Records that `next` is scheduled (its message is stored), while the
    /// attempt before it still holds the claim: from now on a redelivery of
    /// an earlier attempt is dropped. A failure is logged and the retry goes
    /// on: the record is a guard against the broker's redelivery, and
    /// without it an old attempt that comes again runs (as before the record).
    pub(crate) async fn scheduled(&self, next: &JobMeta) {
        let failed = "the job-key store did not record a scheduled attempt: a redelivery of the one before may run again";
        self.raise(next, next.attempt, failed).await;
    }

    /// Records that the job's attempts ended in the dead letters (its letter
    /// is stored), while its last attempt `last` still holds the claim: the
    /// record is raised past every attempt of this replay, so a redelivery
    /// of that attempt (its `Term` lost to a broker restart) is dropped, not
    /// run again into a second letter. A replay from the dead letters ranks
    /// higher, and runs. A failure is logged, as for a scheduled retry.
    pub(crate) async fn dead_lettered(&self, last: &JobMeta) {
        let ended = JobMeta { attempt: u32::MAX, ..last.clone() };
        let failed = "the job-key store did not record a dead-lettered job: a redelivery of its last attempt may run again";
        self.raise(&ended, last.attempt, failed).await;
    }

    /// Raises the record to `meta`'s mark; logs `failed` if the store fails.
    async fn raise(&self, meta: &JobMeta, attempt: u32, failed: &str) {
        let (Some(store), Some(key)) = (&self.store, meta.key.as_deref().and_then(store_key)) else {
            return;
        };
        if let Err(error) = store.raise_mark(&key, mark(meta), self.ttl).await {
            tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, key = key.as_str(), attempt, "{failed}");
        }
    }
}

/// Acks and drops a delivery of an attempt older than the recorded one.
pub(crate) async fn drop_superseded<D: Delivery>(delivery: &D, meta: &JobMeta, recorded: u64) -> JobOutcome {
    let (replays, attempt) = unmark(recorded);
    tracing::info!(target: retryscope_otel::names::TARGET,
        subject = delivery.subject(), key = meta.key.as_deref(), attempt = meta.attempt, replays = meta.replays,
        recorded_attempt = attempt, recorded_replays = replays,
        "a delivery of an attempt older than one already run or scheduled is acked and dropped"
    );
    match delivery.ack().await {
        Ok(()) => JobOutcome::Superseded,
        Err(_) => JobOutcome::Unsettled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(replays: u32, attempt: u32) -> JobMeta {
        JobMeta { replays, attempt, ..JobMeta::first(Some("k".into())) }
    }

    #[test]
    fn a_replay_ranks_above_every_attempt_before_it() {
        assert!(mark(&meta(0, 2)) > mark(&meta(0, 1)));
        assert!(mark(&meta(1, 1)) > mark(&meta(0, u32::MAX)));
        assert_eq!(unmark(mark(&meta(7, 3))), (7, 3));
    }

    #[tokio::test]
    async fn an_older_attempt_is_superseded_once_a_later_one_is_scheduled_and_a_keyless_job_never() {
        let keys = Keys {
            store: Some(retryscope_idempotency::MemoryStore::default()),
            renew_every: Duration::from_secs(1),
            ttl: Duration::from_secs(60),
        };
        assert!(matches!(keys.admit(&meta(0, 1)).await, Admitted::Current));
        keys.scheduled(&meta(0, 2)).await;
        assert!(matches!(keys.admit(&meta(0, 1)).await, Admitted::Superseded(2)));
        assert!(matches!(keys.admit(&meta(0, 2)).await, Admitted::Current), "the scheduled attempt runs");
        assert!(matches!(keys.admit(&meta(1, 1)).await, Admitted::Current), "a replay runs");
        assert!(matches!(keys.admit(&meta(0, 3)).await, Admitted::Superseded(_)), "older than the replay");
        let keyless = JobMeta { key: None, ..meta(0, 1) };
        assert!(matches!(keys.admit(&keyless).await, Admitted::Current));
    }

    #[tokio::test]
    async fn a_dead_lettered_job_s_last_attempt_is_superseded_and_its_replay_is_not() {
        let keys = Keys {
            store: Some(retryscope_idempotency::MemoryStore::default()),
            renew_every: Duration::from_secs(1),
            ttl: Duration::from_secs(60),
        };
        assert!(matches!(keys.admit(&meta(0, 3)).await, Admitted::Current));
        keys.dead_lettered(&meta(0, 3)).await;
        assert!(matches!(keys.admit(&meta(0, 3)).await, Admitted::Superseded(_)), "its Term lost: dropped");
        assert!(matches!(keys.admit(&meta(1, 1)).await, Admitted::Current), "its replay runs");
    }
}

//! What a handler is given, and what a worker reports.

use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// One attempt of one job, as the handler sees it.
#[derive(Debug, Clone)]
pub struct Job {
    /// The job key, if the producer gave one.
    pub key: Option<Arc<str>>,
    /// The subject the job was published to.
    pub subject: Arc<str>,
    /// The job's body.
    pub payload: Bytes,
    /// This attempt's number, from 1 (a replay starts again at 1).
    pub attempt: u32,
    /// When the first attempt ran.
    pub first_attempt_at: SystemTime,
    /// How often the job was replayed from the dead letters.
    pub replays: u32,
}

/// A boxed handler future.
pub type HandlerFuture<E> = Pin<Box<dyn Future<Output = Result<(), E>> + Send + 'static>>;

/// The user's job handler: any `Fn(Job) -> impl Future<Output = Result<(), E>>`.
pub trait Handler<E>: Send + Sync + 'static {
    /// Runs one attempt.
    fn call(&self, job: Job) -> HandlerFuture<E>;
}

impl<F, Fut, E> Handler<E> for F
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
{
    fn call(&self, job: Job) -> HandlerFuture<E> {
        Box::pin(self(job))
    }
}

/// How one delivery ended: `retryscope.job.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobOutcome {
    /// The handler succeeded; the job is acked.
    Succeeded,
    /// The handler failed transiently; the next attempt is queued with a run-at.
    Retried,
    /// The dependency is down or paced (breaker, pacer, budget): the job did
    /// not run and waits, without the hold counting as an attempt.
    Held,
    /// The job is in the dead letters.
    DeadLettered,
    /// The job's key was already processed: acked without running.
    Deduplicated,
    /// The delivery came before the job's run-at: put back until then.
    Waiting,
    /// The broker failed while the delivery was settled, or the job was
    /// abandoned at shutdown after the grace period: it will come again.
    Unsettled,
    /// Another worker's live claim holds the job's key (it is running there,
    /// or that worker died less than a claim ago): put back for one renewal
    /// period, without counting an attempt. Not the dependency's hold.
    ClaimedElsewhere,
    /// A delivery of an attempt older than one a worker already ran or
    /// scheduled for the same job key (its ack was lost to a broker restart
    /// or a crash after the retry that replaced it was stored): acked and
    /// dropped, not run. Only keyed jobs are tracked.
    Superseded,
    /// A dead letter was queued again as attempt 1 ([`dead::replay`](crate::dead::replay)):
    /// reported by the replay, not by a worker's delivery.
    Replayed,
}

impl JobOutcome {
    /// Every outcome.
    pub const ALL: [JobOutcome; 10] = [
        JobOutcome::Succeeded,
        JobOutcome::Retried,
        JobOutcome::Held,
        JobOutcome::DeadLettered,
        JobOutcome::Deduplicated,
        JobOutcome::Waiting,
        JobOutcome::Unsettled,
        JobOutcome::Replayed,
        JobOutcome::ClaimedElsewhere,
        JobOutcome::Superseded,
    ];

    /// The attribute value.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobOutcome::Succeeded => "succeeded",
            JobOutcome::Retried => "retried",
            JobOutcome::Held => "held",
            JobOutcome::DeadLettered => "dead_lettered",
            JobOutcome::Deduplicated => "deduplicated",
            JobOutcome::Waiting => "waiting",
            JobOutcome::Unsettled => "unsettled",
            JobOutcome::Replayed => "replayed",
            JobOutcome::ClaimedElsewhere => "claimed_elsewhere",
            JobOutcome::Superseded => "superseded",
        }
    }

    const fn index(self) -> usize {
        match self {
            JobOutcome::Succeeded => 0,
            JobOutcome::Retried => 1,
            JobOutcome::Held => 2,
            JobOutcome::DeadLettered => 3,
            JobOutcome::Deduplicated => 4,
            JobOutcome::Waiting => 5,
            JobOutcome::Unsettled => 6,
            JobOutcome::Replayed => 7,
            JobOutcome::ClaimedElsewhere => 8,
            JobOutcome::Superseded => 9,
        }
    }
}

/// Counts of what a worker did, shared with whoever asks.
#[derive(Debug, Default)]
pub struct WorkerStats {
    outcomes: [AtomicU64; JobOutcome::ALL.len()],
    executions: AtomicU64,
    taken_over: AtomicU64,
}

impl WorkerStats {
    pub(crate) fn record(&self, outcome: JobOutcome) {
        self.outcomes[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn executed(&self) {
        self.executions.fetch_add(1, Ordering::Relaxed);
    }

    /// Deliveries that ended with `outcome`.
    pub fn count(&self, outcome: JobOutcome) -> u64 {
        self.outcomes[outcome.index()].load(Ordering::Relaxed)
    }

    pub(crate) fn took_over(&self) {
        self.taken_over.fetch_add(1, Ordering::Relaxed);
    }

    /// Job key claims this worker took over from a worker that stopped
    /// renewing them (crashed or stalled), before running the job again.
    pub fn claims_taken_over(&self) -> u64 {
        self.taken_over.load(Ordering::Relaxed)
    }

    /// Handler calls made.
    pub fn executions(&self) -> u64 {
        self.executions.load(Ordering::Relaxed)
    }
}

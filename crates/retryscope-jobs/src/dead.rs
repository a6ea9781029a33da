//! Dead letters: why a job was given up, what it carried, and how to list,
//! inspect and replay it.

use crate::broker::{Broker, BrokerError, DeadLetterStore, Outgoing, Published, StoredDead};
use crate::meta::{self, JobMeta};
use crate::telemetry;
use bytes::Bytes;
use retryscope::StopReason;
use std::fmt;
use std::time::SystemTime;
use tracing::Instrument;

/// The header holding why the job is dead ([`DeadReason::as_str`]).
pub const REASON_HEADER: &str = "Retryscope-Dead-Reason";
/// The header holding the last error's text (at most [`MAX_ERROR_LEN`] bytes).
pub const ERROR_HEADER: &str = "Retryscope-Dead-Error";
/// The header holding the last error's `error.type`.
pub const ERROR_TYPE_HEADER: &str = "Retryscope-Dead-Error-Type";
/// The header holding the subject the job was published to.
pub const SUBJECT_HEADER: &str = "Retryscope-Original-Subject";
/// The header holding when the last attempt ran, in Unix milliseconds.
pub const LAST_ATTEMPT_HEADER: &str = "Retryscope-Last-Attempt";
/// The W3C trace-context header carried over from the job.
pub const TRACEPARENT: &str = "traceparent";
/// The longest error text kept in a dead letter: a header, not a log.
pub const MAX_ERROR_LEN: usize = 512;

/// Why a job went to the dead letters: `retryscope.job.dead_reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadReason {
    /// The handler's failure was classified as permanent.
    Permanent,
    /// The failure was transient, but the job is not safe to run again.
    Unrepeatable,
    /// Every attempt the policy allows has run.
    AttemptsExhausted,
    /// The policy's deadline, counted from the first attempt, has passed or
    /// the next wait would cross it.
    DeadlineExceeded,
    /// The dependency asked for a wait longer than the policy allows.
    HintTooLong,
    /// The job's retryscope headers do not parse.
    InvalidJobMetadata,
    /// The broker delivered the message as often as it will, each time without
    /// the worker settling it (the worker died or the handler outlived every
    /// in-progress ack): given up rather than dropped silently.
    MaxDeliveries,
}

impl DeadReason {
    /// Every reason, for dashboards and alerts.
    pub const ALL: [DeadReason; 7] = [
        DeadReason::Permanent,
        DeadReason::Unrepeatable,
        DeadReason::AttemptsExhausted,
        DeadReason::DeadlineExceeded,
        DeadReason::HintTooLong,
        DeadReason::InvalidJobMetadata,
        DeadReason::MaxDeliveries,
    ];

    /// The attribute and header value.
    pub const fn as_str(self) -> &'static str {
        match self {
            DeadReason::Permanent => "permanent",
            DeadReason::Unrepeatable => "unrepeatable",
            DeadReason::AttemptsExhausted => "attempts_exhausted",
            DeadReason::DeadlineExceeded => "deadline_exceeded",
            DeadReason::HintTooLong => "hint_too_long",
            DeadReason::InvalidJobMetadata => "invalid_job_metadata",
            DeadReason::MaxDeliveries => "max_deliveries",
        }
    }

    /// The reason a header value names.
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == value)
    }

    /// The dead-letter reason for an engine stop, `None` for the stops that
    /// are holds (budget, breaker, pacer, another layer): a hold never kills a job.
    pub const fn from_stop(reason: StopReason) -> Option<Self> {
        match reason {
            StopReason::Permanent => Some(DeadReason::Permanent),
            StopReason::Unrepeatable => Some(DeadReason::Unrepeatable),
            StopReason::AttemptsExhausted => Some(DeadReason::AttemptsExhausted),
            StopReason::DeadlineExceeded => Some(DeadReason::DeadlineExceeded),
            StopReason::HintTooLong { .. } => Some(DeadReason::HintTooLong),
            _ => None,
        }
    }
}

impl fmt::Display for DeadReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job given up: what it carried and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The subject the job was published to (where a replay sends it).
    pub subject: String,
    /// The job's body.
    pub payload: Bytes,
    /// The job's bookkeeping as of its last attempt (`attempt` is the number
    /// of attempts made).
    pub meta: JobMeta,
    /// Why it is dead.
    pub reason: DeadReason,
    /// The last error's `error.type`, if an attempt failed.
    pub error_type: Option<String>,
    /// The last error's text, cut to [`MAX_ERROR_LEN`] bytes.
    pub last_error: Option<String>,
    /// When the last attempt ran (or the job was given up without one).
    pub last_attempt_at: SystemTime,
    /// The W3C `traceparent` of the job's producer, if it sent one.
    pub traceparent: Option<String>,
}

impl DeadLetter {
    /// The message that stores this dead letter; its subject is the job's,
    /// which the broker maps to its dead-letter store
    /// ([`Broker::publish_dead`]).
    pub fn to_outgoing(&self) -> Outgoing {
        let mut headers: Vec<(String, String)> =
            self.meta.to_headers().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        headers.push((REASON_HEADER.to_owned(), self.reason.as_str().to_owned()));
        headers.push((SUBJECT_HEADER.to_owned(), self.subject.clone()));
        headers.push((LAST_ATTEMPT_HEADER.to_owned(), meta::millis(self.last_attempt_at).to_string()));
        if let Some(kind) = &self.error_type {
            headers.push((ERROR_TYPE_HEADER.to_owned(), kind.clone()));
        }
        if let Some(error) = &self.last_error {
            headers.push((ERROR_HEADER.to_owned(), header_safe(error)));
        }
        if let Some(trace) = &self.traceparent {
            headers.push((TRACEPARENT.to_owned(), trace.clone()));
        }
        Outgoing { subject: self.subject.clone(), payload: self.payload.clone(), headers, dedup_id: None }
    }

    /// Reads a stored dead letter back.
    ///
    /// # Errors
    ///
    /// [`meta::InvalidMeta`] when its headers are not a dead letter's.
    pub fn from_stored(stored: &StoredDead) -> Result<Self, meta::InvalidMeta> {
        let header = |name: &str| {
            stored.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
        };
        let meta = JobMeta::read(header)?.unwrap_or_else(|| JobMeta::first(None));
        let reason = header(REASON_HEADER)
            .and_then(DeadReason::parse)
            .ok_or(meta::InvalidMeta { header: REASON_HEADER })?;
        let subject = header(SUBJECT_HEADER).ok_or(meta::InvalidMeta { header: SUBJECT_HEADER })?.to_owned();
        let last_attempt_at = header(LAST_ATTEMPT_HEADER)
            .and_then(|v| v.parse().ok())
            .map(meta::from_millis)
            .ok_or(meta::InvalidMeta { header: LAST_ATTEMPT_HEADER })?;
        Ok(Self {
            subject,
            payload: stored.payload.clone(),
            meta,
            reason,
            error_type: header(ERROR_TYPE_HEADER).map(str::to_owned),
            last_error: header(ERROR_HEADER).map(str::to_owned),
            last_attempt_at,
            traceparent: header(TRACEPARENT).map(str::to_owned),
        })
    }
}

/// An error's text as a header value: one line, at most [`MAX_ERROR_LEN`] bytes.
pub(crate) fn header_safe(text: &str) -> String {
    let mut out: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if out.len() > MAX_ERROR_LEN {
        let mut end = MAX_ERROR_LEN;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
    }
    out
}

/// A dead letter as listed: its id in the store, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its id in the dead-letter store.
    pub id: u64,
    /// The dead letter, or why its headers could not be read.
    pub letter: Result<DeadLetter, meta::InvalidMeta>,
}

/// Lists up to `limit` dead letters from id `from` on, oldest first.
///
/// # Errors
///
/// The broker's, if it cannot be read.
pub async fn list<D: DeadLetterStore>(
    store: &D,
    from: u64,
    limit: usize,
) -> Result<Vec<Listed>, BrokerError> {
    let stored = store.list_dead(from, limit).await?;
    Ok(stored.iter().map(|s| Listed { id: s.id, letter: DeadLetter::from_stored(s) }).collect())
}

/// One dead letter, if it is still there.
///
/// # Errors
///
/// The broker's, if it cannot be read.
pub async fn inspect<D: DeadLetterStore>(store: &D, id: u64) -> Result<Option<Listed>, BrokerError> {
    Ok(store.get_dead(id).await?.map(|s| Listed { id: s.id, letter: DeadLetter::from_stored(&s) }))
}

/// What a replay did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replayed {
    /// The job is queued again as attempt 1, under its key, and the dead
    /// letter removed.
    Queued {
        /// Where the broker stored the job.
        published: Published,
        /// The job's key.
        key: Option<String>,
        /// How often the job has now been replayed.
        replays: u32,
    },
    /// No dead letter has that id.
    NotFound,
    /// The dead letter's headers do not say where the job goes.
    Unreadable(meta::InvalidMeta),
}

/// Replays a dead letter: publishes the job to its subject again as attempt 1
/// (a fresh deadline), with its key and one more replay counted, waits until
/// the broker stored it, then removes the dead letter. A crash between the
/// two leaves both; the job key makes the second run of a job that completed
/// a no-op.
///
/// # Errors
///
/// The broker's, if the publish or the removal fails.
///
/// A replay is visible in telemetry: a PRODUCER span `replay <subject>`
/// (linked to the job's producer) and `retryscope.job.deliveries` with outcome
/// `replayed` (docs/telemetry.md, *Jobs*).
pub async fn replay<B: Broker + DeadLetterStore>(broker: &B, id: u64) -> Result<Replayed, BrokerError> {
    let Some(stored) = broker.get_dead(id).await? else { return Ok(Replayed::NotFound) };
    let letter = match DeadLetter::from_stored(&stored) {
        Ok(letter) => letter,
        Err(invalid) => return Ok(Replayed::Unreadable(invalid)),
    };
    let replays = letter.meta.replays.saturating_add(1);
    let span = telemetry::replay_span(id, &letter, replays);
    let replayed = requeue(broker, id, letter, replays, &span).instrument(span.clone()).await;
    span.record("retryscope.job.outcome", if replayed.is_ok() { "replayed" } else { "failed" });
    replayed
}

/// The replay's publish and removal, under its span.
async fn requeue<B: Broker + DeadLetterStore>(
    broker: &B,
    id: u64,
    letter: DeadLetter,
    replays: u32,
    span: &tracing::Span,
) -> Result<Replayed, BrokerError> {
    let meta = JobMeta { replays, ..JobMeta::first(letter.meta.key.clone()) };
    let mut headers: Vec<(String, String)> =
        meta.to_headers().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    if let Some(trace) = &letter.traceparent {
        headers.push((TRACEPARENT.to_owned(), trace.clone()));
    }
    // A replay is a new message: the key's own id is inside the broker's
    // de-duplication window perhaps, and a second replay must not be dropped either.
    let dedup_id = letter.meta.key.as_ref().map(|key| format!("{key}#replay-{replays}-{id}"));
    let published = broker
        .publish(Outgoing {
            subject: letter.subject.clone(),
            payload: letter.payload.clone(),
            headers,
            dedup_id,
        })
        .await?;
    span.record("messaging.message.id", published.sequence);
    broker.remove_dead(id).await?;
    telemetry::replayed(&letter.subject);
    Ok(Replayed::Queued { published, key: letter.meta.key, replays })
}

//! What a job carries between attempts: its key, attempt count, first-attempt
//! time, previous delay and run-at, as message headers.
//!
//! A broker's own delivery count cannot tell a hold (the dependency was down,
//! the job never ran) from an attempt, and a NATS `Nak` cannot change headers:
//! so a retry is a new message whose headers say which attempt it is, and the
//! original is acked once that message is stored.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The header naming the job's key (also sent as `Nats-Msg-Id` on first publish).
pub const KEY_HEADER: &str = "Retryscope-Job-Key";
/// The header holding the number of the attempt the message is for, from 1.
pub const ATTEMPT_HEADER: &str = "Retryscope-Attempt";
/// The header holding when the first attempt ran, in Unix milliseconds.
pub const FIRST_ATTEMPT_HEADER: &str = "Retryscope-First-Attempt";
/// The header holding the delay before this attempt, in milliseconds.
pub const PREVIOUS_DELAY_HEADER: &str = "Retryscope-Previous-Delay";
/// The header holding when this attempt may run, in Unix milliseconds.
pub const RUN_AT_HEADER: &str = "Retryscope-Run-At";
/// The header counting how often the job was replayed from the dead letters.
pub const REPLAYS_HEADER: &str = "Retryscope-Replays";

/// The headers retryscope writes, in the order above.
pub const ALL_HEADERS: [&str; 6] =
    [KEY_HEADER, ATTEMPT_HEADER, FIRST_ATTEMPT_HEADER, PREVIOUS_DELAY_HEADER, RUN_AT_HEADER, REPLAYS_HEADER];

/// A job's bookkeeping, read from or written to its message's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobMeta {
    /// The job key, if the producer gave one.
    pub key: Option<String>,
    /// The attempt this message is for, from 1.
    pub attempt: u32,
    /// When the first attempt ran (`None` until it has).
    pub first_attempt_at: Option<SystemTime>,
    /// The delay the job waited before this attempt (`None` for the first).
    pub previous_delay: Option<Duration>,
    /// When this attempt may run (`None`: at once).
    pub run_at: Option<SystemTime>,
    /// How often the job was replayed from the dead letters.
    pub replays: u32,
}

impl JobMeta {
    /// A fresh job's bookkeeping: attempt 1, not yet run.
    pub fn first(key: Option<String>) -> Self {
        Self { key, attempt: 1, first_attempt_at: None, previous_delay: None, run_at: None, replays: 0 }
    }

    /// Reads the bookkeeping from `header` (a header look-up by name). `Ok(None)`
    /// when the message carries none of retryscope's attempt headers (a job
    /// published by another producer: attempt 1).
    ///
    /// # Errors
    ///
    /// [`InvalidMeta`] naming the first header whose value does not parse.
    pub fn read<'h>(header: impl Fn(&str) -> Option<&'h str>) -> Result<Option<Self>, InvalidMeta> {
        let key = header(KEY_HEADER).map(str::to_owned);
        let Some(attempt) = header(ATTEMPT_HEADER) else {
            // Only the key (a fresh job from our producer) or nothing at all.
            return Ok(key.map(|key| Self::first(Some(key))));
        };
        let attempt = match attempt.trim().parse::<u32>() {
            Ok(n) if n >= 1 => n,
            _ => return Err(InvalidMeta { header: ATTEMPT_HEADER }),
        };
        let first_attempt_at = parse_opt(&header, FIRST_ATTEMPT_HEADER)?.map(from_millis);
        let previous_delay = parse_opt(&header, PREVIOUS_DELAY_HEADER)?.map(Duration::from_millis);
        let run_at = parse_opt(&header, RUN_AT_HEADER)?.map(from_millis);
        let replays = parse_opt(&header, REPLAYS_HEADER)?
            .map_or(Ok(0), u32::try_from)
            .map_err(|_| InvalidMeta { header: REPLAYS_HEADER })?;
        if attempt > 1 && first_attempt_at.is_none() {
            // A retry that does not say when the job started cannot be held to its deadline.
            return Err(InvalidMeta { header: FIRST_ATTEMPT_HEADER });
        }
        Ok(Some(Self { key, attempt, first_attempt_at, previous_delay, run_at, replays }))
    }

    /// The headers to write, as `(name, value)` pairs.
    pub fn to_headers(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::with_capacity(ALL_HEADERS.len());
        if let Some(key) = &self.key {
            out.push((KEY_HEADER, key.clone()));
        }
        out.push((ATTEMPT_HEADER, self.attempt.to_string()));
        if let Some(at) = self.first_attempt_at {
            out.push((FIRST_ATTEMPT_HEADER, millis(at).to_string()));
        }
        if let Some(delay) = self.previous_delay {
            out.push((PREVIOUS_DELAY_HEADER, delay.as_millis().to_string()));
        }
        if let Some(at) = self.run_at {
            out.push((RUN_AT_HEADER, millis(at).to_string()));
        }
        if self.replays > 0 {
            out.push((REPLAYS_HEADER, self.replays.to_string()));
        }
        out
    }
}

fn parse_opt<'h>(
    header: &impl Fn(&str) -> Option<&'h str>,
    name: &'static str,
) -> Result<Option<u64>, InvalidMeta> {
    match header(name) {
        None => Ok(None),
        Some(value) => value.trim().parse::<u64>().map(Some).map_err(|_| InvalidMeta { header: name }),
    }
}

/// Unix milliseconds of `at` (0 before the epoch).
pub fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The time `ms` Unix milliseconds stand for (saturating far in the future).
pub fn from_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .unwrap_or(UNIX_EPOCH + Duration::from_secs(u32::MAX.into()))
}

/// A retryscope header whose value does not parse: the job is dead-lettered
/// with reason [`invalid_job_metadata`](crate::DeadReason::InvalidJobMetadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidMeta {
    /// The header at fault.
    pub header: &'static str,
}

impl fmt::Display for InvalidMeta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the job's {} header is malformed", self.header)
    }
}

impl std::error::Error for InvalidMeta {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> Result<Option<JobMeta>, InvalidMeta> {
        let map: HashMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        JobMeta::read(|name| map.get(name).map(String::as_str))
    }

    #[test]
    fn a_message_without_headers_has_no_bookkeeping() {
        assert_eq!(read(&[]), Ok(None));
    }

    #[test]
    fn bookkeeping_survives_a_round_trip_through_headers() {
        let meta = JobMeta {
            key: Some("order-7".into()),
            attempt: 3,
            first_attempt_at: Some(from_millis(1_700_000_000_123)),
            previous_delay: Some(Duration::from_millis(400)),
            run_at: Some(from_millis(1_700_000_001_000)),
            replays: 1,
        };
        let headers: HashMap<String, String> =
            meta.to_headers().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        assert_eq!(JobMeta::read(|name| headers.get(name).map(String::as_str)), Ok(Some(meta)));
    }

    #[test]
    fn malformed_headers_are_named_never_panicked_on() {
        assert_eq!(read(&[(ATTEMPT_HEADER, "two")]), Err(InvalidMeta { header: ATTEMPT_HEADER }));
        assert_eq!(read(&[(ATTEMPT_HEADER, "0")]), Err(InvalidMeta { header: ATTEMPT_HEADER }));
        assert_eq!(read(&[(ATTEMPT_HEADER, "2")]), Err(InvalidMeta { header: FIRST_ATTEMPT_HEADER }));
        assert_eq!(
            read(&[(ATTEMPT_HEADER, "2"), (FIRST_ATTEMPT_HEADER, "-5")]),
            Err(InvalidMeta { header: FIRST_ATTEMPT_HEADER })
        );
        assert_eq!(
            read(&[(ATTEMPT_HEADER, "1"), (REPLAYS_HEADER, "99999999999")]),
            Err(InvalidMeta { header: REPLAYS_HEADER })
        );
    }
}

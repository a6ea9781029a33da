//! What a response says about pace, from untrusted headers, through the pacer.
//!
//! The first byte chooses the status (429, 503 or 200); the rest is header
//! lines `name: value`, split on newlines, over the headers the pacer reads.
//!
//! Properties: reading is total; only a 429 or 503 closes the dependency
//! (`not_before`); a pacer that learned the signal never holds a call longer
//! than `MAX_PACE` plus the widest spread, and reports a finite, non-negative
//! rate.
#![no_main]

use http::header::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use retryscope::clock::ManualClock;
use retryscope::hints::pace_signal;
use retryscope::pace::MAX_PACE;
use retryscope::{HINT_SPREAD_MAX, Pacer, Policy, Retryable};
use std::time::{Duration, UNIX_EPOCH};

const NAMES: [&str; 7] = [
    "ratelimit",
    "ratelimit-policy",
    "retry-after",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let status = [429, 503, 200][usize::from(which % 3)];
    let mut headers = HeaderMap::new();
    for (i, line) in rest.split(|b| *b == b'\n').enumerate() {
        let name = HeaderName::from_static(NAMES[i % NAMES.len()]);
        if let Ok(value) = HeaderValue::from_bytes(line) {
            headers.append(name, value);
        }
    }
    let now = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let signal = pace_signal(status, &headers, now);
    if status == 200 {
        assert!(signal.not_before.is_none(), "{headers:?}");
    }
    assert_eq!(signal.throttled, status == 429);

    let clock = ManualClock::new();
    let pacer = Pacer::with_clock(clock.clone());
    pacer.learn(&signal);
    let rate = pacer.allowed_rate();
    assert!(rate.is_none_or(|r| r.is_finite() && r >= 0.0), "{rate:?}");
    let policy = Policy::builder().max_attempts(1).no_deadline().no_attempt_timeout().build().expect("policy");
    let start = clock.elapsed();
    let sent = (|| Ok::<(), std::io::Error>(())).retry(policy).pacer(&pacer).call_with(&clock, |d| clock.advance(d));
    assert!(sent.is_ok());
    let held = clock.elapsed() - start;
    assert!(held <= MAX_PACE + HINT_SPREAD_MAX, "held {held:?} for {headers:?}");
});

//! What a response says about pace, from untrusted headers, through the pacer.
//!
//! The first byte chooses the status (429, 503, 200 or 403); the rest is
//! header values, split on newlines, each line the value of the next of the
//! headers the pacer reads (`NAMES`, in turn).
//!
//! Properties: reading is total; only a 429, a 503 or GitHub's 403 (with
//! `x-ratelimit-resource`) closes the dependency with a server's wait
//! (`not_before`), any other status only with an exhausted quota's reset (a
//! `RateLimit`-source hint); a pacer that learned the signal never holds a call longer
//! than a day (the pacer's longest pace) plus the widest spread, and reports a finite, non-negative
//! rate.
#![no_main]

use retryscope::dependency::Dependency;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use retryscope::clock::ManualClock;
use retryscope::hints::pace_signal;
use retryscope::{DelaySource, Hint, Pacer, Policy, Retryable};
use std::time::{Duration, UNIX_EPOCH};

/// The longest wait or quota window the pacer takes from a hint (`Pacer`'s
/// limits table).
const MAX_PACE: Duration = Duration::from_secs(24 * 60 * 60);
/// The widest random spread on top of a server's hint (`Hint`'s docs).
const HINT_SPREAD_MAX: Duration = Duration::from_secs(5);

const NAMES: [&str; 17] = [
    "ratelimit",
    "ratelimit-policy",
    "retry-after",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    // The vendors' dialects (hints::quota's table), after the seven above so
    // that the older seeds keep their meaning.
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
    "retry-after-ms",
    "x-ratelimit-resource",
];

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let status = [429, 503, 200, 403][usize::from(which % 4)];
    let mut headers = HeaderMap::new();
    for (i, line) in rest.split(|b| *b == b'\n').enumerate() {
        let name = HeaderName::from_static(NAMES[i % NAMES.len()]);
        if let Ok(value) = HeaderValue::from_bytes(line) {
            headers.append(name, value);
        }
    }
    let now = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let signal = pace_signal(status, &headers, now);
    if status == 200 || (status == 403 && !headers.contains_key("x-ratelimit-resource")) {
        let quota_gate = |hint: Hint| hint.source == DelaySource::RateLimit;
        assert!(signal.not_before.is_none_or(quota_gate), "{headers:?}");
    }
    assert_eq!(signal.throttled, status == 429);

    let clock = ManualClock::new();
    let pacer = Pacer::with_clock(clock.clone());
    pacer.learn(&signal);
    let rate = pacer.allowed_rate();
    assert!(rate.is_none_or(|r| r.is_finite() && r >= 0.0), "{rate:?}");
    let policy = Policy::builder().max_attempts(1).no_deadline().no_attempt_timeout().build().expect("policy");
    let start = clock.elapsed();
    let paced = Dependency::new("fuzz").with_pacer(pacer.clone());
    let sent = (|| Ok::<(), std::io::Error>(())).retry(policy).dependency(&paced).call_with(&clock, |d| clock.advance(d));
    assert!(sent.is_ok());
    let held = clock.elapsed() - start;
    assert!(held <= MAX_PACE + HINT_SPREAD_MAX, "held {held:?} for {headers:?}");
});

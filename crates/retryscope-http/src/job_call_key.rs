//! The idempotency key of a call made inside a job's handler: the job's key
//! and the call's ordinal in that execution of the handler,
//! `<job key>/<n>` (`order-7781/1`, `order-7781/2`, …), the same on every
//! run of the job as long as the handler makes its keyed calls in the same
//! order (see [`retryscope::jobs`] for what breaks that).
//!
//! A job key that cannot stand in an RFC 8941 String of at most
//! [`MAX_IDEMPOTENCY_KEY_LEN`] bytes with its ordinal — longer than
//! [`LITERAL_JOB_KEY_MAX`] bytes, or holding a byte outside printable ASCII —
//! is hashed instead, deterministically, so that every worker derives the
//! same key: `sha256:<64 lowercase hex digits of SHA-256(job key)>/<n>`. The
//! form depends on the job key alone, never on the ordinal, so one job's
//! calls all take the same form.
//!
//! ```
//! use retryscope_http::job_call_key::derive;
//!
//! assert_eq!(derive("order-7781", 2), "order-7781/2");
//! let hashed = derive(&"k".repeat(300), 1);
//! assert!(hashed.starts_with("sha256:") && hashed.ends_with("/1") && hashed.len() == 73);
//! ```

use crate::KeyChoice;
use http::HeaderValue;
use retryscope::classify::MAX_IDEMPOTENCY_KEY_LEN;
use retryscope::jobs::JobCall;
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// The longest job key used as it is: room is left for `/` and the ten
/// digits of the largest ordinal.
pub const LITERAL_JOB_KEY_MAX: usize = MAX_IDEMPOTENCY_KEY_LEN - 1 - 10;

/// The key (before sf-string quoting) of call `ordinal` of the job `job_key`.
pub fn derive(job_key: &str, ordinal: u32) -> String {
    let literal = job_key.len() <= LITERAL_JOB_KEY_MAX && job_key.bytes().all(|b| (0x20..=0x7e).contains(&b));
    if literal {
        return format!("{job_key}/{ordinal}");
    }
    let digest = Sha256::digest(job_key.as_bytes());
    let mut key = String::with_capacity(7 + 64 + 11);
    key.push_str("sha256:");
    for byte in digest {
        // Writing to a String cannot fail.
        let _ = write!(key, "{byte:02x}");
    }
    let _ = write!(key, "/{ordinal}");
    key
}

/// The header value of `call`: its key as an sf-string, quoted as
/// [`KeyChoice::new`] quotes a caller's. `None` cannot happen: `derive` gives
/// 1 to 255 bytes of printable ASCII.
pub(crate) fn header_value(call: &JobCall) -> Option<HeaderValue> {
    let choice = KeyChoice::new(&derive(call.job_key(), call.ordinal())).ok()?;
    choice.value().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use retryscope::jobs::{JobKeyScope, next_call};

    fn call(job_key: &str, ordinals: usize) -> Vec<HeaderValue> {
        let scoped = JobKeyScope::new(job_key.into(), async move {
            (0..ordinals).filter_map(|_| next_call()).filter_map(|c| header_value(&c)).collect::<Vec<_>>()
        });
        let mut scoped = std::pin::pin!(scoped);
        match std::future::Future::poll(
            scoped.as_mut(),
            &mut std::task::Context::from_waker(std::task::Waker::noop()),
        ) {
            std::task::Poll::Ready(values) => values,
            std::task::Poll::Pending => Vec::new(),
        }
    }

    #[test]
    fn each_call_of_a_job_gets_its_ordinal_quoted_and_escaped() {
        assert_eq!(call("order-7781", 2), [r#""order-7781/1""#, r#""order-7781/2""#]);
        assert_eq!(call(r#"a"b\c"#, 1), [r#""a\"b\\c/1""#]);
    }

    #[test]
    fn a_key_that_cannot_stand_as_it_is_is_hashed_the_same_way_every_time() {
        let longest = "k".repeat(LITERAL_JOB_KEY_MAX);
        let literal = derive(&longest, u32::MAX);
        assert_eq!(literal.len(), MAX_IDEMPOTENCY_KEY_LEN);
        assert!(literal.starts_with("kkk"));
        let long = "k".repeat(LITERAL_JOB_KEY_MAX + 1);
        assert_eq!(derive(&long, 1), derive(&long, 1));
        assert_ne!(derive(&long, 1), derive(&long, 2));
        assert!(derive(&long, 1).starts_with("sha256:"));
        // SHA-256("clé"), so that the form never drifts between versions.
        assert_eq!(
            derive("clé", 3),
            "sha256:51cbcf30514d0802eb5c60a018f384ea3fb9b69307c554ee63ecb43177594de4/3"
        );
        assert!(derive("a\tb", 1).starts_with("sha256:"));
    }
}

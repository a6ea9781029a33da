//! The presets: settings from the field, for the common kinds of call.

use super::{Jitter, Policy, Settings};
use std::time::Duration;

impl Policy {
    /// For calls somebody is waiting on: 4 attempts, 200 ms base delay doubling up
    /// to 5 s, full jitter, each attempt cut at 5 s, and a 15 s deadline over
    /// attempts and waits.
    ///
    /// The attempt timeout leaves room inside the deadline for at least one
    /// retry after an attempt that never answers (5 s, at most 200 ms of wait,
    /// then 5 s more: under 15 s): a stalled server costs the caller one
    /// attempt, not the whole call.
    ///
    /// ```
    /// use retryscope::Policy;
    /// use std::time::Duration;
    ///
    /// let policy = Policy::interactive();
    /// assert_eq!(policy.max_attempts(), 4);
    /// assert_eq!(policy.attempt_timeout(), Some(Duration::from_secs(5)));
    /// assert_eq!(policy.deadline(), Some(Duration::from_secs(15)));
    /// ```
    pub const fn interactive() -> Self {
        Settings {
            max_attempts: 4,
            base_delay: Duration::from_millis(200),
            multiplier: 2.0,
            max_delay: Duration::from_secs(5),
            jitter: Jitter::Full,
            deadline: Some(Duration::from_secs(15)),
            attempt_timeout: Some(Duration::from_secs(5)),
            max_server_delay: Duration::from_secs(60),
            hint_headroom: None,
            throttled_base_delay: None,
            throttled_max_delay: None,
            wait_out_refusal: false,
        }
        .policy()
    }

    /// For background work: 8 attempts, 1 s base delay doubling up to 60 s, full
    /// jitter, each attempt cut at 60 s, and a 10 minute deadline over attempts
    /// and waits.
    ///
    /// Nobody waits on background work, but something always does: a worker
    /// slot, a lease, a queue message's visibility timeout. Ten minutes bound
    /// the worst case (eight stalled attempts would take eight minutes, plus
    /// the waits) without cutting an ordinary retry sequence short.
    ///
    /// ```
    /// use retryscope::Policy;
    /// use std::time::Duration;
    ///
    /// let policy = Policy::background();
    /// assert_eq!(policy.max_attempts(), 8);
    /// assert_eq!(policy.attempt_timeout(), Some(Duration::from_secs(60)));
    /// assert_eq!(policy.deadline(), Some(Duration::from_secs(600)));
    /// ```
    pub const fn background() -> Self {
        Settings {
            max_attempts: 8,
            base_delay: Duration::from_secs(1),
            multiplier: 2.0,
            max_delay: Duration::from_secs(60),
            jitter: Jitter::Full,
            deadline: Some(Duration::from_secs(10 * 60)),
            attempt_timeout: Some(Duration::from_secs(60)),
            max_server_delay: Duration::from_secs(300),
            hint_headroom: None,
            throttled_base_delay: None,
            throttled_max_delay: None,
            wait_out_refusal: false,
        }
        .policy()
    }

    /// The AWS SDKs' standard retry mode as updated in 2026 ("retries 2.1",
    /// the default since November 2026): 3 attempts, full jitter, a base of
    /// 50 ms after a transient failure and of 1 s after a throttling answer
    /// (429, `RESOURCE_EXHAUSTED`), each doubling up to 20 s, and an
    /// `x-amz-retry-after` honoured within [backoff, backoff + 5 s]
    /// ([`hint_headroom`](crate::PolicyBuilder::hint_headroom)). The deadline and
    /// attempt timeout are [`interactive`](Self::interactive)'s (the SDKs
    /// leave them to the caller).
    ///
    /// Pair it with [`RetryQuota::aws_2026`](crate::budget::RetryQuota::aws_2026)
    /// as the dependency's budget, the same behaviour's quota (500 tokens, 14
    /// a transient retry, 5 a throttled one). For a long poll (SQS
    /// `ReceiveMessage`), whose caller calls again at once, add
    /// [`wait_out_refusal`](crate::PolicyBuilder::wait_out_refusal), as the SDKs do
    /// for those operations: an empty quota then still leaves the call its
    /// backoff before it fails.
    ///
    /// ```
    /// use retryscope::Policy;
    /// use std::time::Duration;
    ///
    /// let policy = Policy::aws_2026();
    /// assert_eq!(policy.base_delay(), Duration::from_millis(50));
    /// assert_eq!(policy.throttled_base_delay(), Duration::from_secs(1));
    /// assert_eq!(policy.max_delay(), Duration::from_secs(20));
    /// assert_eq!(policy.hint_headroom(), Some(Duration::from_secs(5)));
    /// let long_poll = policy.to_builder().wait_out_refusal(true).build()?;
    /// assert!(long_poll.waits_out_refusal());
    /// # Ok::<(), retryscope::PolicyError>(())
    /// ```
    pub const fn aws_2026() -> Self {
        Settings {
            max_attempts: 3,
            base_delay: Duration::from_millis(50),
            multiplier: 2.0,
            max_delay: Duration::from_secs(20),
            jitter: Jitter::Full,
            deadline: Some(Duration::from_secs(15)),
            attempt_timeout: Some(Duration::from_secs(5)),
            max_server_delay: Duration::from_secs(60),
            hint_headroom: Some(Duration::from_secs(5)),
            throttled_base_delay: Some(Duration::from_secs(1)),
            throttled_max_delay: Some(Duration::from_secs(20)),
            wait_out_refusal: false,
        }
        .policy()
    }
}

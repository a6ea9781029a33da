//! The retry policy: how many attempts, how long to wait, when to give up.
//!
//! A [`Policy`] is a small, validated, `Copy` value. Build one with
//! [`Policy::builder`], or start from a preset: [`Policy::interactive`] for calls a
//! person is waiting on, [`Policy::background`] for work nobody watches.

mod cause;
mod error;
mod presets;

pub use error::PolicyError;

use crate::setting::SettingValue;
use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

/// The longest delay, deadline or timeout a [`Policy`] accepts (one day). A
/// process that sleeps longer between attempts is almost certainly the victim of
/// a unit mistake (milliseconds given as seconds).
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest delay, deadline or timeout a [`JobPolicy`](crate::jobs::JobPolicy)
/// accepts (28 days): a job queue stores a run-at time instead of sleeping, and
/// job retries often span days.
pub const MAX_JOB_DURATION: Duration = Duration::from_secs(28 * 24 * 60 * 60);

/// A validated retry policy.
///
/// ```
/// use retryscope::{Jitter, Policy};
/// use std::time::Duration;
///
/// let policy = Policy::builder()
///     .max_attempts(5)
///     .base_delay(Duration::from_millis(100))
///     .max_delay(Duration::from_secs(2))
///     .jitter(Jitter::Full)
///     .deadline(Duration::from_secs(10))
///     .build()?;
/// assert_eq!(policy.max_attempts(), 5);
/// # Ok::<(), retryscope::PolicyError>(())
/// ```
///
/// Every retry copies its policy, so a policy is kept small: its durations are
/// whole nanoseconds (validated durations are at most [`MAX_JOB_DURATION`], far
/// below `u64::MAX` nanoseconds).
#[derive(Clone, Copy, PartialEq)]
pub struct Policy {
    max_attempts: u32,
    multiplier: f64,
    jitter: Jitter,
    base_delay: Nanos,
    max_delay: Nanos,
    max_server_delay: Nanos,
    deadline: Option<NonZeroU64>,
    attempt_timeout: Option<NonZeroU64>,
    hint_headroom: Option<NonZeroU64>,
    /// The base and cap after a throttling answer; `None`: the base and cap
    /// of every other failure (see [`cause`]).
    throttled_base_delay: Option<NonZeroU64>,
    throttled_max_delay: Option<NonZeroU64>,
    /// Whether a retry the budget refuses still waits its backoff before the
    /// call fails (long polls; see [`cause`]).
    wait_out_refusal: bool,
}

/// A duration in whole nanoseconds.
type Nanos = u64;

/// A policy's settings as given, before validation: what a [`PolicyBuilder`]
/// holds, so that an error can quote any value exactly.
#[derive(Debug, Clone, Copy)]
struct Settings {
    max_attempts: u32,
    base_delay: Duration,
    multiplier: f64,
    max_delay: Duration,
    jitter: Jitter,
    deadline: Option<Duration>,
    attempt_timeout: Option<Duration>,
    max_server_delay: Duration,
    hint_headroom: Option<Duration>,
    throttled_base_delay: Option<Duration>,
    throttled_max_delay: Option<Duration>,
    wait_out_refusal: bool,
}

/// `d` in nanoseconds, saturating (only validated durations are stored, and
/// they fit).
const fn nanos(d: Duration) -> Nanos {
    let n = d.as_nanos();
    if n > u64::MAX as u128 { u64::MAX } else { n as u64 }
}

/// A positive duration in nanoseconds; `None` for zero or none.
const fn positive_nanos(d: Option<Duration>) -> Option<NonZeroU64> {
    match d {
        Some(d) => NonZeroU64::new(nanos(d)),
        None => None,
    }
}

const fn duration(n: Option<NonZeroU64>) -> Option<Duration> {
    match n {
        Some(n) => Some(Duration::from_nanos(n.get())),
        None => None,
    }
}

impl Settings {
    /// The policy these settings describe; they must have been validated.
    const fn policy(self) -> Policy {
        Policy {
            max_attempts: self.max_attempts,
            multiplier: self.multiplier,
            jitter: self.jitter,
            base_delay: nanos(self.base_delay),
            max_delay: nanos(self.max_delay),
            max_server_delay: nanos(self.max_server_delay),
            deadline: positive_nanos(self.deadline),
            attempt_timeout: positive_nanos(self.attempt_timeout),
            hint_headroom: positive_nanos(self.hint_headroom),
            throttled_base_delay: positive_nanos(self.throttled_base_delay),
            throttled_max_delay: positive_nanos(self.throttled_max_delay),
            wait_out_refusal: self.wait_out_refusal,
        }
    }
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("max_attempts", &self.max_attempts)
            .field("base_delay", &self.base_delay())
            .field("multiplier", &self.multiplier)
            .field("max_delay", &self.max_delay())
            .field("jitter", &self.jitter)
            .field("deadline", &self.deadline())
            .field("attempt_timeout", &self.attempt_timeout())
            .field("max_server_delay", &self.max_server_delay())
            .field("hint_headroom", &self.hint_headroom())
            .field("throttled_base_delay", &duration(self.throttled_base_delay))
            .field("throttled_max_delay", &duration(self.throttled_max_delay))
            .field("wait_out_refusal", &self.wait_out_refusal)
            .finish()
    }
}

impl Policy {
    /// A builder starting from the [`interactive`](Self::interactive) settings.
    pub const fn builder() -> PolicyBuilder {
        Self::interactive().to_builder()
    }

    /// A builder starting from this policy's settings.
    pub const fn to_builder(self) -> PolicyBuilder {
        PolicyBuilder { settings: self.settings() }
    }

    /// This policy's settings, as a builder holds them.
    const fn settings(self) -> Settings {
        Settings {
            max_attempts: self.max_attempts,
            base_delay: self.base_delay(),
            multiplier: self.multiplier,
            max_delay: self.max_delay(),
            jitter: self.jitter,
            deadline: self.deadline(),
            attempt_timeout: self.attempt_timeout(),
            max_server_delay: self.max_server_delay(),
            hint_headroom: self.hint_headroom(),
            throttled_base_delay: duration(self.throttled_base_delay),
            throttled_max_delay: duration(self.throttled_max_delay),
            wait_out_refusal: self.wait_out_refusal,
        }
    }

    /// Attempts allowed, counting the first (≥ 1).
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The delay before the first retry, before jitter.
    pub const fn base_delay(&self) -> Duration {
        Duration::from_nanos(self.base_delay)
    }

    /// The factor by which the delay grows with each retry (≥ 1; 1 keeps the delay constant).
    pub const fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// The cap: no computed delay is longer.
    pub const fn max_delay(&self) -> Duration {
        Duration::from_nanos(self.max_delay)
    }

    /// How delays are randomised.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The total time allowed for all attempts and waits, if bounded.
    pub const fn deadline(&self) -> Option<Duration> {
        duration(self.deadline)
    }

    /// This policy with its deadline brought forward to `limit` when that is
    /// sooner: what a caller's own timeout makes of the call. The attempts and
    /// waits then fit in `limit` together; each attempt is cut to what is left
    /// of it, and a wait that cannot fit ends the call at once.
    ///
    /// ```
    /// use retryscope::Policy;
    /// use std::time::Duration;
    ///
    /// let call = Policy::interactive().with_deadline_within(Duration::from_millis(500));
    /// assert_eq!(call.deadline(), Some(Duration::from_millis(500)));
    /// // A longer limit leaves the policy's own deadline.
    /// let call = Policy::interactive().with_deadline_within(Duration::from_secs(60));
    /// assert_eq!(call.deadline(), Some(Duration::from_secs(15)));
    /// ```
    #[must_use]
    pub const fn with_deadline_within(mut self, limit: Duration) -> Self {
        let limit = nanos(limit);
        let sooner = match self.deadline {
            Some(deadline) if deadline.get() <= limit => deadline.get(),
            _ => limit,
        };
        // A zero limit leaves no time at all; the smallest deadline says the same.
        self.deadline = match NonZeroU64::new(sooner) {
            Some(n) => Some(n),
            None => Some(NonZeroU64::MIN),
        };
        self
    }

    /// The time allowed for one attempt, if bounded (clipped to what is left of
    /// the deadline).
    pub const fn attempt_timeout(&self) -> Option<Duration> {
        duration(self.attempt_timeout)
    }

    /// The longest server-requested wait (`Retry-After`, `RateLimit`) the engine
    /// honours; a longer one stops retrying at once.
    pub const fn max_server_delay(&self) -> Duration {
        Duration::from_nanos(self.max_server_delay)
    }

    /// How much longer than its own backoff the policy waits on a server's
    /// hint: a longer hint is cut to the backoff plus this, instead of being
    /// honoured whole; `None` (the presets): honoured whole, up to
    /// [`max_server_delay`](Self::max_server_delay).
    pub const fn hint_headroom(&self) -> Option<Duration> {
        duration(self.hint_headroom)
    }

    /// Whether the policy has a deadline or an attempt timeout: whether an
    /// attempt needs the time at all.
    pub(crate) const fn is_timed(&self) -> bool {
        self.deadline.is_some() || self.attempt_timeout.is_some()
    }

    /// The policy the driver runs a hedged call under: `copies` attempts
    /// (the first included) within `deadline`, each cut at `attempt_timeout`,
    /// all checked by the hedge's builder. Its backoff is never used: a copy
    /// goes after the hedge's delay, not after a failure's wait.
    pub(crate) const fn of_copies(
        copies: u32,
        deadline: Option<Duration>,
        attempt_timeout: Option<Duration>,
    ) -> Self {
        let mut settings = Self::interactive().settings();
        settings.max_attempts = copies;
        settings.deadline = deadline;
        settings.attempt_timeout = attempt_timeout;
        settings.policy()
    }
}

/// How a backoff delay is randomised.
///
/// `d` is the capped exponential delay `min(cap, base · multiplier^n)`:
///
/// | variant | delay |
/// |---|---|
/// | [`Jitter::None`] | `d` |
/// | [`Jitter::Full`] | `U(0, d)` |
/// | [`Jitter::Equal`] | `d/2 + U(0, d/2)` |
/// | [`Jitter::Decorrelated`] | `min(cap, U(base, prev · 3))` |
/// | [`Jitter::Proportional`]`(f)` | `U(u - f · d, u)` with `u = min(cap, d + f · d)` |
/// | [`Jitter::Grpc`] | `U(0.8 · d, 1.2 · d)` |
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// The plain exponential delay. Clients that failed together retry together:
    /// use only where a single client talks to a dependency.
    None,
    /// Uniform between zero and the exponential delay. The best spread, the fewest
    /// calls in the AWS experiment; the default.
    #[default]
    Full,
    /// Half the exponential delay plus a uniform share of the other half: never
    /// retries very early.
    Equal,
    /// Uniform between the base and three times the previous delay, capped.
    Decorrelated,
    /// The exponential delay plus up to `f` times itself; `f` ≥ 0. Near the cap
    /// the window of width `f · d` slides below the cap instead of being clipped
    /// at it, so clients that reached the cap together keep their spread rather
    /// than all waiting exactly the cap.
    Proportional(f64),
    /// gRFC A6's backoff: the exponential delay times a uniform factor in
    /// `[0.8, 1.2]` ("Jitter of plus or minus 0.2 is applied to the backoff
    /// delay", since grpc/proposal#452). As A6 notes, the wait may then be
    /// "slightly lower than `initialBackoff` or slightly higher than
    /// `maxBackoff`": this is the one variant that may exceed the cap, by up to
    /// a fifth. The gRPC service config's policies use it.
    Grpc,
}

impl Jitter {
    /// Whether this variant's parameter is usable (`f` finite and ≥ 0).
    pub(crate) fn is_valid(self) -> bool {
        match self {
            Jitter::Proportional(f) => f.is_finite() && f >= 0.0,
            _ => true,
        }
    }
}

impl Default for Policy {
    /// The [`interactive`](Policy::interactive) preset.
    fn default() -> Self {
        Self::interactive()
    }
}

/// Builds a [`Policy`]; [`build`](Self::build) rejects unusable settings.
#[derive(Debug, Clone, Copy)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct PolicyBuilder {
    settings: Settings,
}

impl PolicyBuilder {
    /// Attempts allowed, counting the first. Must be at least 1 (1 = no retries).
    pub const fn max_attempts(mut self, attempts: u32) -> Self {
        self.settings.max_attempts = attempts;
        self
    }

    /// The delay before the first retry, before jitter. Must be > 0.
    pub const fn base_delay(mut self, delay: Duration) -> Self {
        self.settings.base_delay = delay;
        self
    }

    /// The growth factor per retry. Must be finite and above 0: 1 keeps the delay
    /// constant, and below 1 each retry waits less than the one before (towards
    /// zero, never below it), as gRFC A6's `backoffMultiplier` allows.
    pub const fn multiplier(mut self, multiplier: f64) -> Self {
        self.settings.multiplier = multiplier;
        self
    }

    /// The cap on computed delays. Must be ≥ the base delay. ([`Jitter::Grpc`]
    /// may wait up to a fifth above it, as gRFC A6 specifies.)
    pub const fn max_delay(mut self, delay: Duration) -> Self {
        self.settings.max_delay = delay;
        self
    }

    /// How delays are randomised.
    pub const fn jitter(mut self, jitter: Jitter) -> Self {
        self.settings.jitter = jitter;
        self
    }

    /// Bounds attempts and waits together. Must be > 0.
    pub const fn deadline(mut self, deadline: Duration) -> Self {
        self.settings.deadline = Some(deadline);
        self
    }

    /// Removes the deadline: attempts and delays bound the total time.
    pub const fn no_deadline(mut self) -> Self {
        self.settings.deadline = None;
        self
    }

    /// Bounds each attempt. Must be > 0.
    pub const fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.settings.attempt_timeout = Some(timeout);
        self
    }

    /// Removes the per-attempt timeout: an attempt may then run until the
    /// deadline, or forever without one. Say so only for operations that
    /// bound themselves (a client with its own read timeout).
    pub const fn no_attempt_timeout(mut self) -> Self {
        self.settings.attempt_timeout = None;
        self
    }

    /// The longest server-requested wait that is honoured; longer hints stop
    /// retrying at once.
    pub const fn max_server_delay(mut self, delay: Duration) -> Self {
        self.settings.max_server_delay = delay;
        self
    }

    /// Waits on a server's hint (`Retry-After`, `x-amz-retry-after`, a
    /// `RateLimit` reset, gRPC pushback) at most `headroom` longer than the
    /// backoff the policy computed: a longer hint is cut to backoff +
    /// `headroom`, not refused. The AWS 2026 retry behaviour honours
    /// `x-amz-retry-after` within [backoff, backoff + 5 s]; with this set, a
    /// hint shorter than the backoff still waits the backoff, as always.
    ///
    /// ```
    /// use retryscope::Policy;
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder().hint_headroom(Duration::from_secs(5)).build()?;
    /// assert_eq!(policy.hint_headroom(), Some(Duration::from_secs(5)));
    /// # Ok::<(), retryscope::PolicyError>(())
    /// ```
    pub const fn hint_headroom(mut self, headroom: Duration) -> Self {
        self.settings.hint_headroom = Some(headroom);
        self
    }

    /// Checks the settings and returns the policy. Durations are bounded by
    /// [`MAX_DURATION`].
    pub fn build(self) -> Result<Policy, PolicyError> {
        self.validate(MAX_DURATION)
    }

    pub(crate) fn validate(self, limit: Duration) -> Result<Policy, PolicyError> {
        let p = self.settings;
        let positive = |setting, value: Duration| {
            if value.is_zero() || value > limit {
                Err(PolicyError::out_of_range(setting, value, limit))
            } else {
                Ok(())
            }
        };
        if p.max_attempts == 0 {
            return Err(PolicyError::ZeroAttempts);
        }
        positive("base_delay", p.base_delay)?;
        positive("max_delay", p.max_delay)?;
        if let Some(deadline) = p.deadline {
            positive("deadline", deadline)?;
        }
        if let Some(timeout) = p.attempt_timeout {
            positive("attempt_timeout", timeout)?;
        }
        if let Some(headroom) = p.hint_headroom {
            positive("hint_headroom", headroom)?;
        }
        if p.max_server_delay > limit {
            return Err(PolicyError::out_of_range("max_server_delay", p.max_server_delay, limit));
        }
        if !(p.multiplier.is_finite() && p.multiplier > 0.0) {
            return Err(PolicyError::OutOfRange {
                setting: "multiplier",
                value: SettingValue::Number(p.multiplier),
                limit: SettingValue::Number(0.0),
            });
        }
        if p.base_delay > p.max_delay {
            return Err(PolicyError::BaseAboveCap { base: p.base_delay, cap: p.max_delay });
        }
        cause::validate(&p, limit)?;
        if !p.jitter.is_valid() {
            return Err(PolicyError::Jitter(p.jitter));
        }
        Ok(p.policy())
    }
}

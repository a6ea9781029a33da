//! Retry budgets: fleet-level caps on how many retries may start.
//!
//! Two [`Throttle`] implementations:
//!
//! - [`RetryBudget`] caps retries to a fraction of recent requests plus a small
//!   floor, over a sliding window (Finagle / linkerd style). This is the default
//!   the design calls for: 10 % of requests plus 10 retries per second over 10 s.
//! - [`TokenBucket`] is gRPC's retry throttling (gRFC A6): failures drain a
//!   bucket, successes refill it, and retries stop while it is half empty or
//!   worse.
//!
//! Both are cheap to clone (clones share state), `Send + Sync`, and lock-free:
//! every operation is a few atomic loads and compare-exchanges, never a lock.

use crate::sync::{AtomicU64, CachePadded, Ordering, lane_count, lane_hint};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, GuardClock, Timeline};
use crate::throttle::Throttle;
use crate::window::{Ledger, Reserved, SlotLength, SlottedWindow};

/// Fixed-point scale: budgets count in thousandths of a token so that
/// fractional deposits (`ratio` per request) stay integral inside atomics.
const MILLI: u64 = 1_000;

/// The shortest window a [`RetryBudget`] accepts.
pub const MIN_WINDOW: Duration = Duration::from_secs(1);
/// The longest window a [`RetryBudget`] accepts.
pub const MAX_WINDOW: Duration = Duration::from_secs(3_600);
/// The largest `min_per_second` a [`RetryBudget`] accepts.
pub const MAX_MIN_PER_SECOND: u32 = 1_000_000;
/// The largest `max_tokens` a [`TokenBucket`] accepts (gRPC's own limit).
pub const MAX_TOKENS: u32 = 1_000;

/// A setting a budget builder refused.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BudgetError {
    /// `ratio` must be a number in `0..=1`.
    Ratio(f64),
    /// `min_per_second` must be at most [`MAX_MIN_PER_SECOND`].
    MinPerSecond(u32),
    /// `window` must be within [`MIN_WINDOW`]`..=`[`MAX_WINDOW`].
    Window(Duration),
    /// `max_tokens` must be within `1..=`[`MAX_TOKENS`].
    MaxTokens(u32),
    /// `token_ratio` must be a number in `0.001..=1`.
    TokenRatio(f64),
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ratio(v) => write!(f, "retry budget ratio must be within 0..=1, got {v}"),
            Self::MinPerSecond(v) => {
                write!(f, "retry budget min_per_second must be at most {MAX_MIN_PER_SECOND}, got {v}")
            }
            Self::Window(v) => {
                write!(f, "retry budget window must be within {MIN_WINDOW:?}..={MAX_WINDOW:?}, got {v:?}")
            }
            Self::MaxTokens(v) => {
                write!(f, "token bucket max_tokens must be within 1..={MAX_TOKENS}, got {v}")
            }
            Self::TokenRatio(v) => {
                write!(f, "token bucket token_ratio must be within 0.001..=1, got {v}")
            }
        }
    }
}

impl std::error::Error for BudgetError {}

/// Converts a ratio already known to lie in `0..=1` to thousandths, rounding
/// to nearest so that e.g. `0.1` is exactly 100 whatever its binary error.
fn to_milli(ratio: f64) -> u64 {
    // In range by the callers' validation, so the cast cannot truncate.
    (ratio * MILLI as f64).round() as u64
}

// ---------------------------------------------------------------------------
// RetryBudget
// ---------------------------------------------------------------------------

/// The index of the one counter in each of the budget's windows.
const COUNT: usize = 0;

/// Retries capped to a fraction of requests plus a floor, over a sliding window.
///
/// Every logical request deposits `ratio` tokens, every retry withdraws one, and
/// a reserve of `min_per_second × window` tokens is always there on top, so
/// low-traffic clients can still retry. Deposits and withdrawals both expire
/// when they leave the window, which slides in steps of a tenth of its length:
/// an event made at time `t` counts until the first step boundary strictly
/// after `t + 0.9·window`, so for more than `0.9·window` and at most `window`.
///
/// # Guarantee
///
/// At every instant, the retries still inside the window never exceed the
/// reserve plus the deposits still inside it. Because a retry stays inside the
/// window at least as long as any deposit that paid for it, each deposit pays
/// for at most one retry, and at most `reserve` retries paid by the reserve are
/// inside the window at any time. Hence, with `ratio` rounded to the nearest
/// thousandth, over any span of `T` seconds:
///
/// ```text
/// retries ≤ ratio · requests + min_per_second · (T + 1.1 · window)
/// ```
///
/// where `requests` counts those made in the span and the window before it, and
/// the `1.1 · window` term is the reserve available at the start plus one slot
/// of step granularity. With a frozen clock the bound is exact:
/// `ratio · requests + min_per_second · window` retries, however many threads
/// compete: two threads never both take the last token, because a withdrawal
/// is a compare-exchange against the balance it checked — on one word every
/// withdrawal competes for, so the same holds for threads on either side of a
/// slot boundary, and no retry is refused while a token is left.
///
/// Time is the clock's [coarse reading](Clock::now_coarse): on Linux with the
/// default clock, the kernel's tick-granular monotonic clock, which trails
/// [`Instant::now`](std::time::Instant::now) by at most one tick (1–10 ms).
/// The bound holds exactly in that time; measured on the precise clock, a span
/// `T` may hold up to two ticks more of it, which adds at most
/// `min_per_second · 2 ticks` (0.2 of a retry at the defaults and 10 ms ticks)
/// to the right-hand side. Clocks driven by hand ([`ManualClock`](crate::clock::ManualClock),
/// tokio's paused clock) are read exactly.
///
/// Clones share one budget: give a clone to every client of the same
/// dependency. A request only writes a counter of its own thread's *lane*
/// (one of several, each on its own cache lines), so requests on different
/// cores do not contend; a retry check sums the lanes only when the sum it
/// remembers from earlier in the same slot does not cover the retry.
///
/// # Example
///
/// ```
/// use retryscope::budget::RetryBudget;
/// use retryscope::clock::ManualClock;
/// use retryscope::throttle::Throttle;
/// use std::time::Duration;
///
/// let budget = RetryBudget::builder()
///     .ratio(0.2)
///     .min_per_second(0)
///     .window(Duration::from_secs(10))
///     .clock(ManualClock::new())
///     .build()?;
/// for _ in 0..10 {
///     budget.request_started();
/// }
/// // Ten requests at 20 % pay for two retries.
/// assert!(budget.try_acquire_retry());
/// assert!(budget.try_acquire_retry());
/// assert!(!budget.try_acquire_retry());
/// # Ok::<(), retryscope::budget::BudgetError>(())
/// ```
#[derive(Clone)]
pub struct RetryBudget {
    inner: Arc<BudgetInner>,
}

struct BudgetInner {
    /// Where the windows' epochs are counted from, on the clock's coarse
    /// reading.
    time: Timeline,
    /// Deposits in milli-tokens, one window per lane: a request writes only
    /// its thread's lane. The deposits in the budget are their sum.
    deposits: Box<[CachePadded<SlottedWindow<1>>]>,
    /// Whole withdrawals, in one ledger every retry competes for: a withdrawal
    /// is a compare-exchange on its head word, which is what keeps the bound
    /// exact.
    withdrawals: Ledger,
    /// The slots of the windows, for the retry checks; requests use their
    /// lane's.
    slot: CachePadded<SlotLength>,
    /// The deposits a retry check last summed over the lanes, so that the
    /// next checks in the same slot need not read every lane again.
    deposits_seen: DepositsSeen,
    /// Milli-tokens each request deposits.
    deposit: u32,
    /// Milli-tokens always available on top of the deposits.
    reserve: u64,
    settings: BudgetSettings,
}

/// The settings as given, kept for `Debug`.
#[derive(Debug, Clone, Copy)]
struct BudgetSettings {
    ratio: f64,
    min_per_second: u32,
    window: Duration,
}

impl Default for BudgetSettings {
    fn default() -> Self {
        Self { ratio: 0.1, min_per_second: 10, window: Duration::from_secs(10) }
    }
}

impl BudgetSettings {
    fn validate(self) -> Result<Self, BudgetError> {
        if !(0.0..=1.0).contains(&self.ratio) {
            // NaN fails `contains` too.
            return Err(BudgetError::Ratio(self.ratio));
        }
        if self.min_per_second > MAX_MIN_PER_SECOND {
            return Err(BudgetError::MinPerSecond(self.min_per_second));
        }
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&self.window) {
            return Err(BudgetError::Window(self.window));
        }
        Ok(self)
    }
}

impl RetryBudget {
    /// The default budget (10 % of requests, 10 retries per second, 10 s window)
    /// on tokio's clock.
    #[must_use]
    pub fn new() -> Self {
        Self::assemble(BudgetSettings::default(), GuardClock::default())
    }

    /// A builder starting from the defaults.
    #[must_use]
    pub fn builder() -> RetryBudgetBuilder {
        RetryBudgetBuilder::default()
    }

    /// Builds from settings that are already valid: `validate` bounds every
    /// product below well inside `u32`/`u64`.
    fn assemble(settings: BudgetSettings, clock: GuardClock) -> Self {
        let window_millis = u64::try_from(settings.window.as_millis()).unwrap_or(u64::MAX);
        let inner = BudgetInner {
            deposits: (0..lane_count()).map(|_| CachePadded(SlottedWindow::new(settings.window))).collect(),
            withdrawals: Ledger::default(),
            slot: CachePadded(SlotLength::new(settings.window)),
            deposits_seen: DepositsSeen::default(),
            time: clock.start(),
            deposit: u32::try_from(to_milli(settings.ratio)).unwrap_or(u32::MAX),
            // retries/s × ms = thousandths of a retry.
            reserve: u64::from(settings.min_per_second).saturating_mul(window_millis),
            settings,
        };
        Self { inner: Arc::new(inner) }
    }

    /// The current slot of the windows, read from the clock's coarse reading.
    fn epoch(&self) -> u64 {
        let inner = &*self.inner;
        inner.slot.epoch(inner.time.coarse_nanos())
    }

    /// Milli-tokens deposited in the window ending at `epoch`, over all lanes.
    fn deposits(&self, epoch: u64) -> u64 {
        self.inner.deposits.iter().map(|lane| lane.totals(epoch)[COUNT]).sum()
    }

    /// Milli-tokens available given the milli-tokens deposited and the whole
    /// withdrawals in a window (may be negative when withdrawals outlive the
    /// deposits that paid for them).
    fn balance(&self, deposits: u64, withdrawals: u64) -> i128 {
        i128::from(self.inner.reserve) + i128::from(deposits) - i128::from(withdrawals) * i128::from(MILLI)
    }

    /// Deposits in the window ending at `epoch` that cover a withdrawal on
    /// top of `withdrawals`, if there are enough.
    ///
    /// Tries the deposits summed earlier in the same slot first: deposits are
    /// only ever added inside a slot, so that sum is a lower bound of the
    /// deposits in the window now, and a withdrawal it covers is covered.
    /// Only when it does not cover one are the lanes summed again; that sum
    /// decides exactly, and is remembered for the next checks.
    fn covering_deposits(&self, epoch: u64, withdrawals: u64) -> Option<u64> {
        let covers = |deposits| self.balance(deposits, withdrawals) >= i128::from(MILLI);
        let seen = &self.inner.deposits_seen;
        if let Some(deposits) = seen.get(epoch).filter(|&d| covers(d)) {
            return Some(deposits);
        }
        let deposits = self.deposits(epoch);
        seen.set(epoch, deposits);
        covers(deposits).then_some(deposits)
    }

    /// Withdraws one token if the balance holds one, as one linearizable step:
    /// the ledger's compare-exchange succeeds only if no withdrawal slipped in
    /// since the withdrawals the decision counted.
    fn withdraw(&self) -> bool {
        let epoch = self.epoch();
        let ledger = &self.inner.withdrawals;
        loop {
            let reading = ledger.read(epoch);
            if self.covering_deposits(reading.epoch, reading.total).is_none() {
                return false;
            }
            match ledger.reserve(reading) {
                Reserved::Yes => return true,
                Reserved::Full => return false,
                // Another withdrawal came first: decide again.
                Reserved::Raced => {}
            }
        }
    }
}

/// A sum of the deposit lanes and the slot it was taken in, packed in one
/// word: the slot's epoch in the high 36 bits (unambiguous for 2^36 slots,
/// over 200 years at the shortest slot), whole tokens in the low 28, rounded
/// down and saturating, so the word never claims more than was summed.
#[derive(Default)]
struct DepositsSeen(CachePadded<AtomicU64>);

const SEEN_TOKEN_BITS: u32 = 28;
const SEEN_TOKEN_MASK: u64 = (1 << SEEN_TOKEN_BITS) - 1;
const SEEN_EPOCH_MASK: u64 = (1 << (64 - SEEN_TOKEN_BITS)) - 1;

impl DepositsSeen {
    /// Milli-tokens summed in slot `epoch`, or `None` if the last sum was
    /// taken in another slot.
    fn get(&self, epoch: u64) -> Option<u64> {
        let word = self.0.load(Ordering::SeqCst);
        (word >> SEEN_TOKEN_BITS == epoch & SEEN_EPOCH_MASK).then(|| (word & SEEN_TOKEN_MASK) * MILLI)
    }

    /// Remembers `deposits` milli-tokens summed in slot `epoch`. Racing sums
    /// may overwrite each other: any of them is a lower bound for its slot.
    fn set(&self, epoch: u64, deposits: u64) {
        let tokens = (deposits / MILLI).min(SEEN_TOKEN_MASK);
        self.0.store(((epoch & SEEN_EPOCH_MASK) << SEEN_TOKEN_BITS) | tokens, Ordering::SeqCst);
    }
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.inner.settings;
        f.debug_struct("RetryBudget")
            .field("ratio", &s.ratio)
            .field("min_per_second", &s.min_per_second)
            .field("window", &s.window)
            .field("available", &self.available())
            .finish()
    }
}

impl Throttle for RetryBudget {
    /// Deposits `ratio` tokens.
    fn request_started(&self) {
        let inner = &*self.inner;
        // The lane count is a power of two.
        let lane = &inner.deposits[lane_hint() & (inner.deposits.len() - 1)];
        // The lane's own slot hint: written only by the lane's threads.
        let epoch = lane.epoch(inner.time.coarse_nanos());
        lane.add(epoch, COUNT, inner.deposit);
    }

    /// Outcomes do not matter to this budget: only requests and retries do.
    fn attempt_finished(&self, _success: bool) {}

    /// Withdraws one token if a whole token is available.
    fn try_acquire_retry(&self) -> bool {
        self.withdraw()
    }

    /// Whole retries available right now.
    fn available(&self) -> f64 {
        let reading = self.inner.withdrawals.read(self.epoch());
        let deposits = self.deposits(reading.epoch);
        let whole = self.balance(deposits, reading.total).max(0) / i128::from(MILLI);
        whole as f64
    }
}

/// Builds a [`RetryBudget`]; see [`RetryBudget::builder`].
#[derive(Clone, Default)]
pub struct RetryBudgetBuilder {
    settings: BudgetSettings,
    clock: Option<GuardClock>,
}

impl RetryBudgetBuilder {
    /// Tokens each request deposits, in `0..=1` (default 0.1). `0` leaves only
    /// the `min_per_second` floor. Applied with a resolution of 0.001.
    #[must_use]
    pub fn ratio(mut self, ratio: f64) -> Self {
        self.settings.ratio = ratio;
        self
    }

    /// Retries per second always allowed regardless of traffic (default 10), at
    /// most [`MAX_MIN_PER_SECOND`]. The floor is `min_per_second × window`
    /// retries per window.
    #[must_use]
    pub fn min_per_second(mut self, min_per_second: u32) -> Self {
        self.settings.min_per_second = min_per_second;
        self
    }

    /// How long deposits and withdrawals count (default 10 s), within
    /// [`MIN_WINDOW`]`..=`[`MAX_WINDOW`].
    #[must_use]
    pub fn window(mut self, window: Duration) -> Self {
        self.settings.window = window;
        self
    }

    /// The clock to read time from (default: tokio's, `TokioClock`, with the `tokio` feature; else the system's).
    #[must_use]
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Some(GuardClock::new(clock));
        self
    }

    /// Validates the settings and builds the budget.
    ///
    /// # Errors
    ///
    /// [`BudgetError`] naming the first setting out of range.
    pub fn build(self) -> Result<RetryBudget, BudgetError> {
        let settings = self.settings.validate()?;
        Ok(RetryBudget::assemble(settings, self.clock.unwrap_or_default()))
    }
}

impl fmt::Debug for RetryBudgetBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudgetBuilder")
            .field("settings", &self.settings)
            .field("custom_clock", &self.clock.is_some())
            .finish()
    }
}

// ---------------------------------------------------------------------------
// TokenBucket
// ---------------------------------------------------------------------------

/// gRPC-style retry throttling (gRFC A6).
///
/// The bucket holds up to `max_tokens` and starts full. Every failed attempt
/// takes one token (not below zero), every successful attempt gives back
/// `token_ratio` (not above `max_tokens`). Retries are allowed only while more
/// than half the bucket is left; a permitted retry costs nothing more, because
/// the failure that caused it has already paid. Tokens are kept with three
/// decimals, as in gRPC.
///
/// Unlike [`RetryBudget`] this reacts to *failures*, not to request volume: a
/// healthy dependency never throttles, a failing one stops retries after
/// `max_tokens / 2` net failures.
///
/// # Example
///
/// ```
/// use retryscope::budget::TokenBucket;
/// use retryscope::throttle::Throttle;
///
/// let bucket = TokenBucket::builder().max_tokens(10).token_ratio(0.5).build()?;
/// for _ in 0..5 {
///     bucket.attempt_finished(false);
/// }
/// // 5 tokens left: not more than half of 10, so no retries.
/// assert!(!bucket.try_acquire_retry());
/// bucket.attempt_finished(true); // 5.5 tokens
/// assert!(bucket.try_acquire_retry());
/// # Ok::<(), retryscope::budget::BudgetError>(())
/// ```
#[derive(Clone)]
pub struct TokenBucket {
    inner: Arc<BucketInner>,
}

struct BucketInner {
    /// Current tokens, in thousandths.
    tokens: AtomicU64,
    /// Capacity, in thousandths.
    max: u64,
    /// Refill per success, in thousandths.
    refill: u64,
}

impl TokenBucket {
    /// A bucket of 100 tokens refilled 0.1 per success.
    #[must_use]
    pub fn new() -> Self {
        Self::assemble(100, 100)
    }

    /// A builder starting from the defaults (100 tokens, ratio 0.1).
    #[must_use]
    pub fn builder() -> TokenBucketBuilder {
        TokenBucketBuilder::default()
    }

    fn assemble(max_tokens: u32, refill: u64) -> Self {
        let max = u64::from(max_tokens) * MILLI;
        let inner = BucketInner { tokens: AtomicU64::new(max), max, refill };
        Self { inner: Arc::new(inner) }
    }

    /// Current tokens, in thousandths.
    fn tokens(&self) -> u64 {
        self.inner.tokens.load(Ordering::Acquire)
    }

    /// Applies `change` to the token count atomically.
    fn adjust(&self, change: impl Fn(u64) -> u64) {
        // A change that leaves the count as it is (a success on a full bucket)
        // writes nothing: writing the same value back would still bounce the
        // cache line between threads.
        let _ = self.inner.tokens.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
            let next = change(t);
            (next != t).then_some(next)
        });
    }
}

impl Default for TokenBucket {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("tokens", &(self.tokens() as f64 / MILLI as f64))
            .field("max_tokens", &(self.inner.max / MILLI))
            .field("token_ratio", &(self.inner.refill as f64 / MILLI as f64))
            .finish()
    }
}

impl Throttle for TokenBucket {
    /// Requests do not matter to this bucket: only attempt outcomes do.
    fn request_started(&self) {}

    /// A failure takes one token, a success gives back `token_ratio`.
    fn attempt_finished(&self, success: bool) {
        if success {
            let (refill, max) = (self.inner.refill, self.inner.max);
            self.adjust(|t| t.saturating_add(refill).min(max));
        } else {
            self.adjust(|t| t.saturating_sub(MILLI));
        }
    }

    /// Allowed while more than half the bucket is left; costs nothing.
    fn try_acquire_retry(&self) -> bool {
        self.tokens() * 2 > self.inner.max
    }

    /// Tokens above the half-way mark, in (fractional) tokens, never negative.
    fn available(&self) -> f64 {
        let above = (self.tokens() * 2).saturating_sub(self.inner.max);
        above as f64 / (2 * MILLI) as f64
    }
}

/// Builds a [`TokenBucket`]; see [`TokenBucket::builder`].
#[derive(Debug, Clone, Copy)]
pub struct TokenBucketBuilder {
    max_tokens: u32,
    token_ratio: f64,
}

impl Default for TokenBucketBuilder {
    fn default() -> Self {
        Self { max_tokens: 100, token_ratio: 0.1 }
    }
}

impl TokenBucketBuilder {
    /// Capacity, within `1..=`[`MAX_TOKENS`] (default 100).
    #[must_use]
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Tokens each success gives back, within `0.001..=1` (default 0.1),
    /// rounded to three decimals.
    #[must_use]
    pub fn token_ratio(mut self, token_ratio: f64) -> Self {
        self.token_ratio = token_ratio;
        self
    }

    /// Validates the settings and builds the bucket.
    ///
    /// # Errors
    ///
    /// [`BudgetError`] naming the first setting out of range.
    pub fn build(self) -> Result<TokenBucket, BudgetError> {
        if !(1..=MAX_TOKENS).contains(&self.max_tokens) {
            return Err(BudgetError::MaxTokens(self.max_tokens));
        }
        // Ratios that round to zero thousandths would never refill.
        if !(0.0..=1.0).contains(&self.token_ratio) || to_milli(self.token_ratio) == 0 {
            return Err(BudgetError::TokenRatio(self.token_ratio));
        }
        Ok(TokenBucket::assemble(self.max_tokens, to_milli(self.token_ratio)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use proptest::prelude::*;
    use std::sync::atomic::AtomicUsize;

    fn budget(clock: &ManualClock) -> RetryBudget {
        RetryBudget::builder().clock(clock.clone()).build().expect("default settings are valid")
    }

    /// One logical request that fails every time: retries until refused or
    /// three retries were made. Returns the retries granted.
    fn failing_request(budget: &RetryBudget) -> u64 {
        budget.request_started();
        (0..3).take_while(|_| budget.try_acquire_retry()).count() as u64
    }

    #[test]
    fn failure_storm_over_time_stays_within_the_bound() {
        let clock = ManualClock::new();
        let b = budget(&clock);
        let mut retries = 0;
        // 10,000 requests over 100 s.
        for _ in 0..10_000 {
            retries += failing_request(&b);
            clock.advance(Duration::from_millis(10));
        }
        // ratio · requests + floor · (elapsed + 1.1 · window) = 1,000 + 10 · 111.
        assert!(retries <= 2_110, "{retries} retries");
        // And the budget is not needlessly stingy: deposits plus a floor per
        // window were all spendable.
        assert!(retries >= 1_900, "{retries} retries");
    }

    #[test]
    fn frozen_clock_grants_exactly_ratio_plus_floor() {
        let clock = ManualClock::new();
        let b = budget(&clock);
        let retries: u64 = (0..10_000).map(|_| failing_request(&b)).sum();
        assert_eq!(retries, 1_000 + 100);
        assert_eq!(b.available(), 0.0);
    }

    #[test]
    fn deposits_expire_after_the_window() {
        let clock = ManualClock::new();
        let b =
            RetryBudget::builder().min_per_second(0).ratio(1.0).clock(clock.clone()).build().expect("valid");
        for _ in 0..5 {
            b.request_started();
        }
        assert_eq!(b.available(), 5.0);
        clock.advance(Duration::from_millis(9_999));
        assert_eq!(b.available(), 5.0);
        clock.advance(Duration::from_millis(1));
        assert_eq!(b.available(), 0.0);
        assert!(!b.try_acquire_retry());
    }

    #[test]
    fn withdrawals_expire_too() {
        let clock = ManualClock::new();
        let b = RetryBudget::builder().min_per_second(1).clock(clock.clone()).build().expect("valid");
        let spent = (0..100).take_while(|_| b.try_acquire_retry()).count();
        assert_eq!(spent, 10);
        clock.advance(Duration::from_secs(10));
        assert_eq!(b.available(), 10.0);
    }

    #[test]
    fn remembered_deposits_are_a_lower_bound_for_their_slot_only() {
        let seen = DepositsSeen::default();
        assert_eq!(seen.get(0), Some(0), "nothing summed yet: zero is a lower bound");
        seen.set(7, 12_345);
        // Rounded down to whole tokens.
        assert_eq!(seen.get(7), Some(12_000));
        assert_eq!(seen.get(6), None);
        assert_eq!(seen.get(8), None);
        assert_eq!(seen.get(7 + (1 << 36)), Some(12_000), "2^36 slots later: the documented horizon");
        // Saturates rather than wraps.
        seen.set(9, u64::MAX);
        assert_eq!(seen.get(9), Some(SEEN_TOKEN_MASK * MILLI));
    }

    #[test]
    fn a_stale_sum_never_refuses_a_retry_the_lanes_can_pay() {
        let clock = ManualClock::new();
        let b = RetryBudget::builder().ratio(1.0).min_per_second(0).clock(clock).build().expect("valid");
        b.request_started();
        assert!(b.try_acquire_retry(), "the first check sums the lanes");
        assert!(!b.try_acquire_retry());
        // Deposits after the remembered sum: the check falls back to the lanes.
        b.request_started();
        b.request_started();
        assert!(b.try_acquire_retry());
        assert!(b.try_acquire_retry());
        assert!(!b.try_acquire_retry());
    }

    #[test]
    fn a_sum_from_an_earlier_slot_is_not_trusted() {
        let clock = ManualClock::new();
        let b =
            RetryBudget::builder().ratio(1.0).min_per_second(0).clock(clock.clone()).build().expect("valid");
        for _ in 0..3 {
            b.request_started();
        }
        // Remembers three tokens deposited in the first slot.
        assert!(b.try_acquire_retry());
        clock.advance(Duration::from_secs(10));
        // They expired with their slot, and so did the retry.
        assert!(!b.try_acquire_retry());
        assert_eq!(b.available(), 0.0);
    }

    #[test]
    fn clones_share_state() {
        let clock = ManualClock::new();
        let b = RetryBudget::builder().min_per_second(1).clock(clock).build().expect("valid");
        let c = b.clone();
        assert!(c.try_acquire_retry());
        assert_eq!(b.available(), 9.0);
    }

    #[test]
    fn threads_never_overspend_on_a_frozen_clock() {
        let clock = ManualClock::new();
        let b = budget(&clock);
        for _ in 0..1_000 {
            b.request_started();
        }
        // 100 from deposits + 100 from the floor.
        let granted = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1_000 {
                        if b.try_acquire_retry() {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(granted.load(Ordering::Relaxed), 200);
        assert_eq!(b.available(), 0.0);
    }

    #[test]
    fn threads_mixing_requests_and_retries_stay_within_the_bound() {
        let clock = ManualClock::new();
        let b = budget(&clock);
        let granted = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..2_500 {
                        granted.fetch_add(failing_request(&b) as usize, Ordering::Relaxed);
                    }
                });
            }
        });
        // Every thread leaves only when refused, so nothing is left over.
        assert_eq!(granted.load(Ordering::Relaxed), 1_100);
    }

    #[test]
    fn builder_rejects_bad_settings() {
        let bad_ratios = [f64::NAN, -0.1, 1.5, f64::INFINITY];
        for ratio in bad_ratios {
            let err = RetryBudget::builder().ratio(ratio).build().expect_err("must reject");
            assert!(matches!(err, BudgetError::Ratio(_)), "{err}");
            assert!(err.to_string().contains("ratio"), "{err}");
        }
        for window in [Duration::ZERO, Duration::from_millis(999), Duration::from_secs(3_601)] {
            let err = RetryBudget::builder().window(window).build().expect_err("must reject");
            assert_eq!(err, BudgetError::Window(window));
            assert!(err.to_string().contains("window"), "{err}");
        }
        let err = RetryBudget::builder().min_per_second(u32::MAX).build().expect_err("must reject");
        assert_eq!(err, BudgetError::MinPerSecond(u32::MAX));
        for ratio in [0.0, 1.0] {
            assert!(RetryBudget::builder().ratio(ratio).build().is_ok());
        }
    }

    #[test]
    fn zero_ratio_leaves_only_the_floor() {
        let clock = ManualClock::new();
        let b = RetryBudget::builder()
            .ratio(0.0)
            .min_per_second(2)
            .window(Duration::from_secs(5))
            .clock(clock)
            .build()
            .expect("valid");
        let retries: u64 = (0..1_000).map(|_| failing_request(&b)).sum();
        assert_eq!(retries, 10);
    }

    proptest! {
        /// Any interleaving of requests, retries and clock steps keeps the
        /// documented long-run bound.
        #[test]
        fn long_run_bound_holds(steps in prop::collection::vec((0_u8..3, 0_u64..3_000), 1..400)) {
            let clock = ManualClock::new();
            let b = RetryBudget::builder()
                .ratio(0.25)
                .min_per_second(1)
                .window(Duration::from_secs(4))
                .clock(clock.clone())
                .build()
                .expect("valid");
            let (mut requests, mut retries) = (0_u64, 0_u64);
            for (op, millis) in steps {
                match op {
                    0 => { b.request_started(); requests += 1; }
                    1 => retries += u64::from(b.try_acquire_retry()),
                    _ => clock.advance(Duration::from_millis(millis)),
                }
            }
            // ratio · requests + min_per_second · (T + 1.1 · window).
            let elapsed_secs = clock.elapsed().as_secs_f64();
            let bound = 0.25 * requests as f64 + (elapsed_secs + 4.4);
            prop_assert!(retries as f64 <= bound, "{} > {}", retries, bound);
        }
    }

    #[test]
    fn token_bucket_starts_full() {
        let b = TokenBucket::builder().max_tokens(10).build().expect("valid");
        assert!(b.try_acquire_retry());
        assert_eq!(b.available(), 5.0);
    }

    #[test]
    fn token_bucket_stops_retries_at_half() {
        let b = TokenBucket::builder().max_tokens(10).token_ratio(0.1).build().expect("valid");
        for _ in 0..4 {
            b.attempt_finished(false);
        }
        // 6 tokens > 5: still allowed, and allowing costs nothing.
        assert!(b.try_acquire_retry());
        assert!(b.try_acquire_retry());
        assert_eq!(b.available(), 1.0);
        // The 5th failure leaves 5, which is not more than 10 / 2.
        b.attempt_finished(false);
        assert!(!b.try_acquire_retry());
        assert_eq!(b.available(), 0.0);
        // Recovery: one success at 0.1 makes 5.1 > 5.
        b.attempt_finished(true);
        assert!(b.try_acquire_retry());
        assert!((b.available() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn token_bucket_stays_within_zero_and_max() {
        let b = TokenBucket::builder().max_tokens(3).token_ratio(1.0).build().expect("valid");
        for _ in 0..10 {
            b.attempt_finished(false);
        }
        assert_eq!(b.tokens(), 0);
        // From empty, 2 successes reach 2 > 1.5.
        b.attempt_finished(true);
        assert!(!b.try_acquire_retry());
        b.attempt_finished(true);
        assert!(b.try_acquire_retry());
        for _ in 0..10 {
            b.attempt_finished(true);
        }
        assert_eq!(b.tokens(), 3 * MILLI);
    }

    #[test]
    fn token_bucket_rejects_bad_settings() {
        for max in [0, 1_001] {
            let err = TokenBucket::builder().max_tokens(max).build().expect_err("must reject");
            assert_eq!(err, BudgetError::MaxTokens(max));
            assert!(err.to_string().contains("max_tokens"), "{err}");
        }
        for ratio in [0.0, 0.0004, -1.0, 1.5, f64::NAN] {
            let err = TokenBucket::builder().token_ratio(ratio).build().expect_err("must reject");
            assert!(matches!(err, BudgetError::TokenRatio(_)), "{err}");
            assert!(err.to_string().contains("token_ratio"), "{err}");
        }
        assert!(TokenBucket::builder().max_tokens(1_000).token_ratio(0.001).build().is_ok());
    }
}

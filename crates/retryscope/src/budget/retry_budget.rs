//! [`RetryBudget`]: retries capped to a share of requests over a sliding window.

use crate::sync::{AtomicU64, CachePadded, Ordering, lane_count, lane_hint};
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::share::{BudgetShare, SharedBudget};
use super::{MAX_MIN_PER_SECOND, MAX_WINDOW, MILLI, MIN_WINDOW, to_milli};
use crate::budget::{Budget, RetryCause};
use crate::clock::{Clock, GuardClock, Timeline};
use crate::setting::SettingError;
use crate::setting::SettingValue;
use crate::window::{Ledger, Reserved, SlotLength, SlottedWindow};

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
/// # In a fleet
///
/// The bound above is one replica's. Over N replicas the ratio part adds up to
/// `ratio` of the fleet's requests, but the floor is N times
/// `min_per_second`. A budget shared with the fleet
/// ([`share_with`](Self::share_with), a [`BudgetShare`]) keeps the part of its
/// floor the share gives it — `1/N` while N replicas spend it — so that the
/// fleet's retries stay within `ratio · requests + min_per_second · (T + 1.1 ·
/// window)`, give or take the time the share takes to see a replica come or
/// go. Lowering the floor never takes back a retry already granted: a retry
/// inside the window that the smaller floor would not have paid for leaves
/// the balance short until it leaves the window.
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
/// use retryscope::RetryBudget;
/// use retryscope::clock::ManualClock;
/// use retryscope::budget::{Budget, RetryCause};
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
/// assert!(budget.try_acquire_retry(RetryCause::Transient));
/// assert!(budget.try_acquire_retry(RetryCause::Transient));
/// assert!(!budget.try_acquire_retry(RetryCause::Transient));
/// # Ok::<(), retryscope::SettingError>(())
/// ```
///
/// **Limits**:
///
/// | | value |
/// |---|---|
/// | The largest `min_per_second`. | 1,000,000 |
/// | The shortest and longest window. | 1 s, 1 h |
#[derive(Clone)]
pub struct RetryBudget {
    inner: Arc<BudgetInner>,
}

pub(super) struct BudgetInner {
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
    /// Milli-tokens always available on top of the deposits: the whole
    /// floor, or this replica's part of it while a [`BudgetShare`] divides
    /// it. An atomic only so that the share can set it from elsewhere; a
    /// retry check reads it with one load, as it read a plain field.
    reserve: AtomicU64,
    /// The whole floor, in milli-tokens: `min_per_second × window`.
    floor: u64,
    /// Among how many replicas the floor is divided now; 0 while it is not
    /// (no share, or a share that cannot tell).
    floor_replicas: AtomicU64,
    /// The fleet's share, once given ([`RetryBudget::share_with`]): held so
    /// that it lives as long as the budgets it divides.
    share: OnceLock<Arc<dyn BudgetShare>>,
    settings: BudgetSettings,
}

impl BudgetInner {
    /// Keeps `1/replicas` of the floor, or all of it with `None`.
    pub(super) fn divide_floor(&self, replicas: Option<u32>) {
        let divisor = u64::from(replicas.unwrap_or(1).max(1));
        // Relaxed: the reserve is a setting, not a guard of other memory; a
        // retry check that reads the old part a moment longer is as right as
        // one made a moment earlier.
        self.reserve.store(self.floor / divisor, Ordering::Relaxed);
        self.floor_replicas.store(replicas.map_or(0, u64::from), Ordering::Relaxed);
    }
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
    fn validate(self) -> Result<Self, SettingError> {
        if !(0.0..=1.0).contains(&self.ratio) {
            // NaN fails `contains` too.
            return Err(SettingError::budget("ratio", SettingValue::Number(self.ratio)));
        }
        if self.min_per_second > MAX_MIN_PER_SECOND {
            return Err(SettingError::budget("min_per_second", SettingValue::Count(self.min_per_second)));
        }
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&self.window) {
            return Err(SettingError::budget("window", SettingValue::Duration(self.window)));
        }
        Ok(self)
    }
}

impl RetryBudget {
    /// A builder starting from the defaults.
    #[must_use]
    pub fn builder() -> RetryBudgetBuilder {
        RetryBudgetBuilder::default()
    }

    /// Builds from settings that are already valid: `validate` bounds every
    /// product below well inside `u32`/`u64`.
    fn assemble(settings: BudgetSettings, clock: GuardClock) -> Self {
        let window_millis = u64::try_from(settings.window.as_millis()).unwrap_or(u64::MAX);
        // retries/s × ms = thousandths of a retry.
        let floor = u64::from(settings.min_per_second).saturating_mul(window_millis);
        let inner = BudgetInner {
            deposits: (0..lane_count()).map(|_| CachePadded(SlottedWindow::new(settings.window))).collect(),
            withdrawals: Ledger::default(),
            slot: CachePadded(SlotLength::new(settings.window)),
            deposits_seen: DepositsSeen::default(),
            time: clock.start(),
            deposit: u32::try_from(to_milli(settings.ratio)).unwrap_or(u32::MAX),
            reserve: AtomicU64::new(floor),
            floor,
            floor_replicas: AtomicU64::new(0),
            share: OnceLock::new(),
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

    /// The milli-tokens always available on top of the deposits now: one
    /// load, read once per decision.
    fn reserve(&self) -> u64 {
        // Relaxed: the reserve is a setting, not a guard of other memory; a
        // decision that reads the old part a moment longer is as right as
        // one made a moment earlier.
        self.inner.reserve.load(Ordering::Relaxed)
    }

    /// Milli-tokens available given the reserve, the milli-tokens deposited
    /// and the whole withdrawals in a window (may be negative when
    /// withdrawals outlive the deposits that paid for them).
    fn balance(reserve: u64, deposits: u64, withdrawals: u64) -> i128 {
        i128::from(reserve) + i128::from(deposits) - i128::from(withdrawals) * i128::from(MILLI)
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
        let reserve = self.reserve();
        let covers = |deposits| Self::balance(reserve, deposits, withdrawals) >= i128::from(MILLI);
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

    /// Shares this budget's floor with the other replicas of a fleet through
    /// `share`, as the budget of `dependency` (see [`BudgetShare`]): from now
    /// on the share sets which part of the floor this replica keeps. Once per
    /// budget: `false` (and nothing changes) when it is shared already.
    ///
    /// ```
    /// use retryscope::RetryBudget;
    /// use retryscope::budget::{BudgetShare, SharedBudget};
    /// use retryscope::clock::ManualClock;
    /// use retryscope::budget::Budget;
    /// use std::sync::Arc;
    ///
    /// /// A fleet of 4 replicas, as a store would report it.
    /// #[derive(Debug)]
    /// struct FourReplicas;
    /// impl BudgetShare for FourReplicas {
    ///     fn attach_budget(&self, _dependency: &str, budget: SharedBudget) {
    ///         budget.divide_floor(4);
    ///     }
    /// }
    ///
    /// let budget = RetryBudget::builder().ratio(0.0).min_per_second(10).clock(ManualClock::new()).build()?;
    /// assert_eq!(budget.available(), 100.0); // 10 a second over 10 s
    /// assert!(budget.share_with(Arc::new(FourReplicas), "payments:8443"));
    /// assert_eq!(budget.available(), 25.0); // this replica's quarter
    /// assert_eq!(budget.floor_replicas(), Some(4));
    /// # Ok::<(), retryscope::SettingError>(())
    /// ```
    pub fn share_with(&self, share: Arc<dyn BudgetShare>, dependency: &str) -> bool {
        if self.inner.share.set(Arc::clone(&share)).is_err() {
            return false;
        }
        share.attach_budget(dependency, SharedBudget { inner: Arc::downgrade(&self.inner) });
        true
    }

    /// Whether this budget is shared with a fleet ([`share_with`](Self::share_with)).
    #[cfg(test)]
    pub(crate) fn is_shared(&self) -> bool {
        self.inner.share.get().is_some()
    }

    /// Among how many replicas the floor is divided now: `None` while this
    /// budget keeps its whole floor (not shared, or its share cannot tell how
    /// many replicas there are).
    pub fn floor_replicas(&self) -> Option<u32> {
        let replicas = self.inner.floor_replicas.load(Ordering::Relaxed);
        (replicas > 0).then(|| u32::try_from(replicas).unwrap_or(u32::MAX))
    }
}

/// A sum of the deposit lanes and the slot it was taken in, packed in one
/// word: the slot's epoch in the high 36 bits (unambiguous for 2^36 slots,
/// over 200 years at the shortest slot), whole tokens in the low 28, rounded
/// down and saturating, so the word never claims more than was summed.
#[derive(Default)]
pub(super) struct DepositsSeen(CachePadded<AtomicU64>);

const SEEN_TOKEN_BITS: u32 = 28;
pub(super) const SEEN_TOKEN_MASK: u64 = (1 << SEEN_TOKEN_BITS) - 1;
const SEEN_EPOCH_MASK: u64 = (1 << (64 - SEEN_TOKEN_BITS)) - 1;

impl DepositsSeen {
    /// Milli-tokens summed in slot `epoch`, or `None` if the last sum was
    /// taken in another slot.
    pub(super) fn get(&self, epoch: u64) -> Option<u64> {
        let word = self.0.load(Ordering::SeqCst);
        (word >> SEEN_TOKEN_BITS == epoch & SEEN_EPOCH_MASK).then(|| (word & SEEN_TOKEN_MASK) * MILLI)
    }

    /// Remembers `deposits` milli-tokens summed in slot `epoch`. Racing sums
    /// may overwrite each other: any of them is a lower bound for its slot.
    pub(super) fn set(&self, epoch: u64, deposits: u64) {
        let tokens = (deposits / MILLI).min(SEEN_TOKEN_MASK);
        self.0.store(((epoch & SEEN_EPOCH_MASK) << SEEN_TOKEN_BITS) | tokens, Ordering::SeqCst);
    }
}

impl Default for RetryBudget {
    /// The default budget (10 % of requests, 10 retries per second, 10 s window)
    /// on tokio's clock.
    fn default() -> Self {
        Self::assemble(BudgetSettings::default(), GuardClock::default())
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
            .field("floor_replicas", &self.floor_replicas())
            .finish()
    }
}

impl Budget for RetryBudget {
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
    fn try_acquire_retry(&self, _cause: RetryCause) -> bool {
        self.withdraw()
    }

    /// Shares the `min_per_second` floor: [`RetryBudget::share_with`].
    fn share_floor(&self, share: Arc<dyn BudgetShare>, dependency: &str) -> bool {
        self.share_with(share, dependency)
    }

    /// Whole retries available right now.
    fn available(&self) -> f64 {
        let reading = self.inner.withdrawals.read(self.epoch());
        let deposits = self.deposits(reading.epoch);
        let whole = Self::balance(self.reserve(), deposits, reading.total).max(0) / i128::from(MILLI);
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
    /// most 1,000,000. The floor is `min_per_second × window`
    /// retries per window.
    #[must_use]
    pub fn min_per_second(mut self, min_per_second: u32) -> Self {
        self.settings.min_per_second = min_per_second;
        self
    }

    /// How long deposits and withdrawals count (default 10 s), within
    /// 1 s to 1 h.
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
    /// [`SettingError`] naming the first setting out of range.
    pub fn build(self) -> Result<RetryBudget, SettingError> {
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

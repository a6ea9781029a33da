//! When a hedged call's next copy goes: a fixed delay, or a percentile of
//! the dependency's recent latencies (the settings; the tracker that measures
//! them is `latency.rs`).

use std::time::Duration;

/// When the next copy of a hedged call goes out while the earlier ones are
/// still running.
///
/// [`Fixed`](Self::Fixed) waits the same delay every time;
/// [`percentile`](Self::percentile) waits as long as the given share of the
/// dependency's recent successful calls took, so that only the slowest calls
/// are hedged.
///
/// ```
/// use retryscope::hedge::HedgeDelay;
/// use std::time::Duration;
///
/// let fixed = HedgeDelay::Fixed(Duration::from_millis(50));
/// let p95 = HedgeDelay::percentile(0.95)
///     .fallback(Duration::from_millis(50))
///     .clamp(Duration::from_millis(5), Duration::from_millis(500));
/// # drop((fixed, p95));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use = "a delay does nothing until given to `HedgePolicyBuilder::delay`"]
pub enum HedgeDelay {
    /// The same delay before every copy after the first. Zero sends every
    /// copy at once (gRFC A6's `hedgingDelay: "0s"`).
    Fixed(Duration),
    /// A percentile of the dependency's recent latencies.
    Percentile(PercentileDelay),
}

impl HedgeDelay {
    /// The `quantile` (above 0, below 1: `0.95` for p95) of the latencies of
    /// the dependency's recent successful copies, with the defaults of
    /// [`PercentileDelay`]; refine it with its methods.
    pub const fn percentile(quantile: f64) -> Self {
        HedgeDelay::Percentile(PercentileDelay::new(quantile))
    }

    /// With `fallback` as the delay while too few latencies are known (a
    /// percentile delay); a fixed delay is unchanged.
    pub const fn fallback(self, fallback: Duration) -> Self {
        match self {
            HedgeDelay::Percentile(p) => HedgeDelay::Percentile(PercentileDelay { fallback, ..p }),
            fixed => fixed,
        }
    }

    /// Keeps a percentile delay within `[min, max]` whatever the latencies say
    /// (a fixed delay is unchanged).
    pub const fn clamp(self, min: Duration, max: Duration) -> Self {
        match self {
            HedgeDelay::Percentile(p) => HedgeDelay::Percentile(PercentileDelay { min, max, ..p }),
            fixed => fixed,
        }
    }

    /// Uses a percentile only once its window holds `samples` latencies
    /// (a fixed delay is unchanged).
    pub const fn min_samples(self, samples: u32) -> Self {
        match self {
            HedgeDelay::Percentile(p) => {
                HedgeDelay::Percentile(PercentileDelay { min_samples: samples, ..p })
            }
            fixed => fixed,
        }
    }

    /// Computes the percentile over windows of `window`, the last complete
    /// one of which is in force (a fixed delay is unchanged).
    pub const fn window(self, window: Duration) -> Self {
        match self {
            HedgeDelay::Percentile(p) => HedgeDelay::Percentile(PercentileDelay { window, ..p }),
            fixed => fixed,
        }
    }
}

/// A delay read from the dependency's recent latencies, as tower's `hedge`
/// middleware does: what [`HedgeDelay::percentile`] makes.
///
/// The latencies of successful copies, and for a copy cancelled because a
/// later one won its time in flight (a lower bound of its latency), are
/// counted in a fixed histogram of
/// 224 buckets (about 12 % wide, from 1 µs to 18 minutes): bounded memory,
/// whatever the traffic. Every [`window`](HedgeDelay::window) the histogram is read
/// and cleared; the percentile it gave is the delay until the next window ends.
/// A window that counted fewer than [`min_samples`](HedgeDelay::min_samples)
/// latencies gives the [`fallback`](HedgeDelay::fallback) instead, as does the time
/// before the first window ends. The delay is kept within `min..=max`
/// ([`clamp`](HedgeDelay::clamp)).
///
/// Its settings are made with [`HedgeDelay`]'s methods; their defaults:
///
/// | setting | default |
/// |---|---|
/// | `fallback` | 100 ms |
/// | `min`..=`max` | 1 ms..=1 s |
/// | `min_samples` | 20 |
/// | `window` | 10 s |
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PercentileDelay {
    // Read by the policy's builder, which checks them.
    pub(super) quantile: f64,
    pub(super) fallback: Duration,
    pub(super) min: Duration,
    pub(super) max: Duration,
    pub(super) min_samples: u32,
    pub(super) window: Duration,
}

impl PercentileDelay {
    /// The defaults: a 100 ms fallback, clamped to [1 ms, 1 s], 20 samples, a
    /// 10 s window.
    const fn new(quantile: f64) -> Self {
        Self {
            quantile,
            fallback: Duration::from_millis(100),
            min: Duration::from_millis(1),
            max: Duration::from_secs(1),
            min_samples: 20,
            window: Duration::from_secs(10),
        }
    }

    /// The quantile, above 0 and below 1.
    pub(crate) const fn quantile(&self) -> f64 {
        self.quantile
    }

    /// The delay while too few latencies are known.
    pub(crate) const fn fallback(&self) -> Duration {
        self.fallback
    }

    /// The shortest delay the percentile may give.
    pub(crate) const fn min(&self) -> Duration {
        self.min
    }

    /// The longest delay the percentile may give.
    pub(crate) const fn max(&self) -> Duration {
        self.max
    }

    /// How many latencies a window needs before its percentile is used.
    pub(crate) const fn min_samples(&self) -> u32 {
        self.min_samples
    }
}

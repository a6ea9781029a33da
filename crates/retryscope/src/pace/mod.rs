//! Pacing: what a dependency said about how fast to call it, learned once and
//! honoured by every call.
//!
//! A server that says "slow down" says it to the client, not to one call. A
//! [`Pacer`] keeps what one dependency's responses said — fed by
//! [`learn`](Pacer::learn) with what the call's classifier reads from each
//! answer ([`Classify::pace`](crate::classify::Classify::pace); from HTTP
//! headers, [`hints::pace_signal`](crate::hints::pace_signal)), which the
//! engine does for every call of the dependency — and every call given it
//! through its [`Dependency`](crate::dependency::Dependency::with_pacer) waits for it, new calls and
//! retries alike:
//!
//! - **A dependency-wide gate.** A `Retry-After` on a 429 or 503, gRPC
//!   pushback, an exhausted quota (`RateLimit: "default";r=0;t=5`): no call is
//!   sent before it has passed. **A gentle return**: the held calls come back
//!   one after another at no more than the rate calls were offered at before
//!   the hold (a moving average of call starts;
//!   four fifths of it), starting at a quarter of that and ramping up to it
//!   over a fifth of the wait (at most 5 s, as for a [`Hint`](crate::Hint)),
//!   as TCP's slow start does: a server that asked for less never gets the
//!   whole backlog at once. New calls after the gate go at once, so the two
//!   together stay within twice the offered rate. A client with no rate
//!   before the hold (its first call was told to wait) releases its held
//!   calls the same way at the rate they arrived *during* the hold: they are
//!   the load it is offered. A herd held in the same instant comes back
//!   spread over the ramp, so that twenty callers told "in 2 s" do not return
//!   in the same millisecond. A held call whose slot would not fit in its
//!   deadline is refused, as below. Gates another replica learned
//!   ([`PaceShare`]) are released by the same rule.
//! - **Quota spacing.** A quota of `r` requests over `t` seconds, on *any*
//!   response: sends are spaced `t / r` apart, so the quota lasts until the
//!   reset instead of running out before it. Later reports of the same window
//!   keep the window's earliest known end (`t` is whole seconds, rounded up)
//!   and spread what is left over what is left of it. Slots beyond the window
//!   keep to the policy's rate (`RateLimit-Policy`'s `q` per `w`), else to
//!   the rate of the report that opened the window.
//! - **Adaptive mode**, opt in ([`Pacer::adaptive`]): the AWS SDKs'
//!   client-side send-rate limiter (botocore's, the Go v2 SDK's and
//!   smithy-rs' algorithm, checked against their published test vectors). From the
//!   first throttling answer (429, `RESOURCE_EXHAUSTED`) on, every send takes
//!   a token from a bucket filled at a rate that backs off multiplicatively on
//!   each throttling answer and recovers along the CUBIC curve.
//! - **Only ever slower.** Hints that are missing, malformed or beyond
//!   a day (the limits in [`Pacer`]'s docs) change nothing, and nothing here can make a caller send
//!   sooner than it would without a pacer.
//!
//! A call whose wait would not leave it half of what is left of its deadline
//! (at most 1 s) for the attempt itself is not sent: it
//! stops at once with
//! [`StopReason::RateLimited`](crate::StopReason::RateLimited), and takes no
//! slot. A call cancelled while held sends nothing; its slot stays unused, so
//! pacing errs on the slow side.
//!
//! A pacer is a handle: clones share one state, a few dozen bytes whatever the
//! traffic. Integrations keep one per dependency, in their bounded
//! per-dependency table.
//!
//! ```
//! use retryscope::Pacer;
//! use retryscope::dependency::Dependency;
//! use retryscope::pace::{PaceSignal, Quota};
//! use retryscope::{Policy, Retryable};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let pacer = Pacer::new(); // one per dependency, shared by every call
//! let search = Dependency::new("search").with_pacer(pacer.clone());
//! // A response said: two requests left in the next three seconds.
//! pacer.learn(&PaceSignal { quota: Some(Quota { remaining: 2, reset: Duration::from_secs(3), policy: None }), ..PaceSignal::none() });
//!
//! let start = tokio::time::Instant::now();
//! for _ in 0..3 {
//!     (|| async { Ok::<_, std::io::Error>(()) }).retry(Policy::interactive()).dependency(&search).await.unwrap();
//! }
//! // Sent at 0 s, 1.5 s and 3 s: the quota lasted until its reset.
//! assert_eq!(start.elapsed(), Duration::from_secs(3));
//! # }
//! ```

pub(crate) mod adaptive;
mod guard;
mod offered;
mod release;
mod schedule;
mod share;
// `Pacer` has one public path, the crate root's.
pub(crate) mod pacer;
pub(crate) mod signal;

#[cfg(test)]
pub(crate) use guard::RATE;
pub(crate) use pacer::Pacer;
pub(crate) use schedule::Admission;
pub use share::{PaceShare, SharedPacer};
pub(crate) use signal::Held;
pub use signal::{HoldSource, PaceSignal, Quota, QuotaPolicy};

//! A limit on each attempt's connect, derived from the attempt's own.
//!
//! An attempt is cut at its time limit (the policy's attempt timeout, cut to
//! what is left of the deadline), but a connect that hangs — a SYN dropped by
//! a full accept queue, a firewall, a dead address — spends that whole limit
//! before the retry can try again, usually on a connection that would have
//! been made at once. So the connect gets a share of the attempt's time:
//! [`ConnectLimit`] wraps a client's connector (reqwest's
//! `ClientBuilder::connector_layer`, or a hyper-util client's connector) and
//! ends a connect that outlasts its share with [`ConnectTimedOut`], which both
//! integrations judge a `connect` failure: nothing was sent, so it is retried
//! even for a request that is not idempotent.
//!
//! The middleware cannot reach into a client it is handed, so the limit is a
//! layer the client is built with; the attempt's limit reaches it through the
//! attempt's scope ([`AttemptLimits`]), set while the engine polls the
//! attempt. A connect the client starts elsewhere (one it finishes in the
//! background after a pooled connection won the race) has no attempt, and no
//! limit from here; the client's own `connect_timeout` still applies.

use pin_project_lite::pin_project;
use retryscope::observe::{
    AttemptEnd, AttemptScope, AttemptStart, Finish, Observer, OperationInfo, OperationObserver, Wait,
};
use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Sleep;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

thread_local! {
    /// The time limit of the attempt being polled on this thread, if it has one.
    static ATTEMPT_LIMIT: Cell<Option<Duration>> = const { Cell::new(None) };
}

/// The share of an attempt's time its connect may take by default: a third,
/// so that a connect that hangs leaves the retry two thirds of the time an
/// attempt has (a 5 s attempt connects within 1.67 s, enough for a SYN
/// retransmitted once and a TLS handshake far away).
const DEFAULT_SHARE: f64 = 1.0 / 3.0;

/// A connector layer that ends each connect made for an attempt once it has
/// taken its share of the attempt's time limit (a third by default), with
/// [`ConnectTimedOut`].
///
/// With reqwest, on the client the middleware wraps:
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = reqwest::Client::builder()
///     .connector_layer(retryscope_http::ConnectLimit::new()) // a third of each attempt
///     .build()?;
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
///
/// With hyper-util, around its connector: `ConnectLimit::new().layer(HttpConnector::new())`
/// (`tower_layer::Layer`). A connect outside any attempt (a request sent
/// without the retry layer) is not limited here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectLimit {
    share: f64,
}

impl ConnectLimit {
    /// A third of the attempt's time limit: a connect that hangs
    /// leaves the retry two thirds of the time an attempt has (a 5 s attempt
    /// connects within 1.67 s, enough for a SYN retransmitted once and a TLS
    /// handshake far away).
    pub const fn new() -> Self {
        Self { share: DEFAULT_SHARE }
    }

    /// `share` of the attempt's time limit, above 0 and at most 1.
    ///
    /// ```
    /// use retryscope_http::ConnectLimit;
    ///
    /// assert!(ConnectLimit::with_share(0.5).is_ok());
    /// assert!(ConnectLimit::with_share(0.0).is_err());
    /// assert!(ConnectLimit::with_share(1.5).is_err());
    /// ```
    ///
    /// # Errors
    ///
    /// [`InvalidConnectShare`] for a share that is not a number in (0, 1].
    pub fn with_share(share: f64) -> Result<Self, InvalidConnectShare> {
        if share > 0.0 && share <= 1.0 { Ok(Self { share }) } else { Err(InvalidConnectShare(share)) }
    }

    /// The share of the attempt's time a connect may take.
    pub fn share(&self) -> f64 {
        self.share
    }
}

impl Default for ConnectLimit {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> tower_layer::Layer<S> for ConnectLimit {
    type Service = ConnectLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ConnectLimited { inner, share: self.share }
    }
}

/// A share for [`ConnectLimit::with_share`] that is not in (0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InvalidConnectShare(pub f64);

impl fmt::Display for InvalidConnectShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a connect's share of its attempt must be above 0 and at most 1, not {}", self.0)
    }
}

impl std::error::Error for InvalidConnectShare {}

/// A connect ended because it took its share of the attempt's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectTimedOut {
    after: Duration,
}

impl ConnectTimedOut {
    /// How long the connect was allowed.
    pub fn after(&self) -> Duration {
        self.after
    }
}

impl fmt::Display for ConnectTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the connect took its share of the attempt's time ({:?})", self.after)
    }
}

impl std::error::Error for ConnectTimedOut {}

/// A connector whose connects made for an attempt end at their share of it:
/// what [`ConnectLimit`] makes.
#[derive(Debug, Clone)]
pub struct ConnectLimited<S> {
    inner: S,
    share: f64,
}

impl<S, R> tower_service::Service<R> for ConnectLimited<S>
where
    S: tower_service::Service<R>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Connecting<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, target: R) -> Self::Future {
        // Read when the connect starts: the client calls its connector while
        // the attempt that needs the connection is being polled, at its start
        // (the attempt's own limit still ends a connect made later in it).
        let limit = ATTEMPT_LIMIT.with(Cell::get).map(|limit| limit.mul_f64(self.share));
        Connecting {
            inner: self.inner.call(target),
            // Boxed so that the future is `Unpin` when the connector's is, as
            // hyper-util asks of a connector's future.
            timer: limit.map(|limit| (Box::pin(tokio::time::sleep(limit)), limit)),
        }
    }
}

pin_project! {
    /// A connect with its limit: [`ConnectLimited`]'s future.
    pub struct Connecting<F> {
        #[pin]
        inner: F,
        timer: Option<(Pin<Box<Sleep>>, Duration)>,
    }
}

impl<F, T, E> Future for Connecting<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(result) = this.inner.poll(cx) {
            return Poll::Ready(result.map_err(Into::into));
        }
        match this.timer {
            Some((timer, after)) => match timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(Box::new(ConnectTimedOut { after: *after }))),
                Poll::Pending => Poll::Pending,
            },
            None => Poll::Pending,
        }
    }
}

/// The observer that tells [`ConnectLimit`] how long the attempt being polled
/// has: each attempt's scope holds its time limit, and sets it for the
/// connector while the engine polls the attempt. Both integrations add it to
/// their observers. It reads no clock: an attempt costs it a copy of its
/// limit, a poll two thread-local writes.
#[derive(Debug, Clone, Copy, Default)]
pub struct AttemptLimits;

/// One attempt's time limit: [`AttemptLimits`]'s attempt scope.
#[derive(Debug)]
pub struct AttemptLimit(Option<Duration>);

impl Observer for AttemptLimits {
    type Operation = AttemptLimits;

    // It needs no clock: the engine gives each attempt's limit as a duration.
    const TIMED: bool = false;

    fn start(&self, _: &OperationInfo<'_>) -> Self::Operation {
        AttemptLimits
    }
}

impl OperationObserver for AttemptLimits {
    type Attempt = AttemptLimit;

    fn attempt_started(&mut self, attempt: &AttemptStart) -> AttemptLimit {
        AttemptLimit(attempt.limit)
    }

    fn attempt_finished(&mut self, _: AttemptLimit, _: &AttemptEnd) {}

    fn waiting(&mut self, _: &Wait) {}

    fn finished(self, _: &Finish) {}
}

impl AttemptScope for AttemptLimit {
    fn in_scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let Some(limit) = self.0 else { return f() };
        // Restored even if `f` panics: a later attempt on this thread must not
        // inherit this one's limit.
        struct Restore(Option<Duration>);
        impl Drop for Restore {
            fn drop(&mut self) {
                ATTEMPT_LIMIT.with(|cell| cell.set(self.0));
            }
        }
        let _restore = Restore(ATTEMPT_LIMIT.with(|cell| cell.replace(Some(limit))));
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tower_layer::Layer as _;
    use tower_service::Service as _;

    /// A connector whose connect never ends.
    #[derive(Clone)]
    struct Hangs;

    impl tower_service::Service<()> for Hangs {
        type Response = ();
        type Error = std::io::Error;
        type Future = std::future::Pending<Result<(), std::io::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, (): ()) -> Self::Future {
            std::future::pending()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_connect_inside_an_attempt_ends_at_its_share_of_the_attempt() {
        let mut connector = ConnectLimit::new().layer(Hangs);
        let scope = AttemptLimits.attempt_started(&AttemptStart {
            number: 1,
            retry_of: None,
            hedge: false,
            limit: Some(Duration::from_secs(3)),
        });
        let started = tokio::time::Instant::now();
        let connect = scope.in_scope(|| connector.call(()));
        let error = connect.await.expect_err("the connect hangs");
        assert_eq!(started.elapsed(), Duration::from_secs(1), "a third of 3 s");
        assert_eq!(
            error.downcast_ref::<ConnectTimedOut>().map(ConnectTimedOut::after),
            Some(Duration::from_secs(1))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connect_outside_any_attempt_is_not_limited() {
        let mut connector = ConnectLimit::with_share(0.5).expect("a share").layer(Hangs);
        let mut connect = connector.call(());
        tokio::time::advance(Duration::from_secs(3600)).await;
        let pending = poll_fn(|cx| Poll::Ready(Pin::new(&mut connect).poll(cx).is_pending())).await;
        assert!(pending, "no attempt, no limit from here");
    }

    #[test]
    fn an_attempts_end_is_gone_once_its_poll_returns() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
        runtime.block_on(async {
            let scope = AttemptLimits.attempt_started(&AttemptStart {
                number: 1,
                retry_of: None,
                hedge: false,
                limit: Some(Duration::from_secs(1)),
            });
            assert!(scope.in_scope(|| ATTEMPT_LIMIT.with(Cell::get)).is_some());
            assert_eq!(ATTEMPT_LIMIT.with(Cell::get), None);
        });
    }

    #[test]
    fn a_share_outside_zero_to_one_is_refused() {
        for share in [0.0, -0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert!(ConnectLimit::with_share(share).is_err(), "{share}");
        }
        assert_eq!(ConnectLimit::with_share(1.0).map(|l| l.share()), Ok(1.0));
    }
}

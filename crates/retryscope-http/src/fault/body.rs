//! The body of a response a fault layer hands up: the real one, slowed or
//! broken, or the empty body of an answer the fault gave instead.

use super::error::InjectedFault;
use super::kind::FaultKind;
use http_body::{Body, Frame, SizeHint};
use std::error::Error as StdError;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Sleep;

type BoxError = Box<dyn StdError + Send + Sync>;

pin_project_lite::pin_project! {
    /// A response body under a fault layer.
    #[project = Projected]
    pub struct FaultBody<B> {
        #[pin]
        state: State<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProjected]
    enum State<B> {
        Real { #[pin] body: B },
        Slow { #[pin] body: B, delay: Duration, sleep: Option<Pin<Box<Sleep>>> },
        Broken { failed: bool },
        Empty,
    }
}

impl<B> FaultBody<B> {
    /// The real body, untouched.
    pub const fn real(body: B) -> Self {
        Self { state: State::Real { body } }
    }

    /// An empty body, for an answer a fault gave.
    pub const fn empty() -> Self {
        Self { state: State::Empty }
    }

    /// The real body as `kind` leaves it: every frame late for
    /// [`SlowBody`](FaultKind::SlowBody), dropped (which closes its
    /// connection) and replaced by a reset for [`BrokenBody`](FaultKind::BrokenBody),
    /// untouched otherwise.
    pub fn under(kind: Option<FaultKind>, body: B) -> Self {
        let state = match kind {
            Some(FaultKind::SlowBody(delay)) => State::Slow { body, delay, sleep: None },
            Some(FaultKind::BrokenBody) => State::Broken { failed: false },
            _ => State::Real { body },
        };
        Self { state }
    }
}

impl<B> Body for FaultBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        match self.project().state.project() {
            StateProjected::Real { body } => body.poll_frame(cx).map_err(Into::into),
            StateProjected::Slow { body, delay, sleep } => {
                let timer = sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(*delay)));
                ready!(timer.as_mut().poll(cx));
                let frame = ready!(body.poll_frame(cx));
                // The next frame waits again.
                *sleep = None;
                Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
            }
            StateProjected::Broken { failed } => {
                if std::mem::replace(failed, true) {
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(Box::new(InjectedFault::new(FaultKind::BrokenBody)))))
            }
            StateProjected::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.state {
            State::Real { body } => body.is_end_stream(),
            // Slow or not, a body's end arrives late: never known ahead.
            State::Slow { .. } => false,
            State::Broken { failed } => *failed,
            State::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.state {
            State::Real { body } | State::Slow { body, .. } => body.size_hint(),
            State::Broken { .. } => SizeHint::default(),
            State::Empty => SizeHint::with_exact(0),
        }
    }
}

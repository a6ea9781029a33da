//! The future of a call under a fault layer: the real call, a fault's answer
//! instead of it, or the real call late.

use crate::error::BoxError;
use http::{Request, Response};
use retryscope_http::fault::{FaultBody, FaultKind, InjectedFault};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::time::Sleep;
use tower_service::Service;

pin_project_lite::pin_project! {
    /// The response future of a [`FaultService`](super::FaultService).
    pub struct FaultFuture<S: Service<R>, R> {
        #[pin]
        state: State<S, R>,
    }
}

pin_project_lite::pin_project! {
    #[project = Projected]
    enum State<S: Service<R>, R> {
        // The real call, its body under `kind` when that is a body fault.
        Call { #[pin] call: S::Future, kind: Option<FaultKind> },
        // `Latency`: the call is made when the sleep ends.
        Late { #[pin] sleep: Sleep, service: Option<S>, request: Option<R> },
        // A fault's answer or failure, ready at once.
        Now { answer: Option<Result<Response<()>, InjectedFault>> },
        // `Stall`: never ready.
        Stalled,
    }
}

impl<S: Service<R>, R> FaultFuture<S, R> {
    pub(super) fn pass(call: S::Future) -> Self {
        Self { state: State::Call { call, kind: None } }
    }

    /// The call as `kind` changes it. A delayed call takes a clone of the
    /// service, which the layer's `poll_ready` made ready, and leaves the
    /// ready one in place (tower's usual swap).
    pub(super) fn inject(kind: FaultKind, service: &mut S, request: R) -> Self
    where
        S: Clone,
    {
        let state = match kind {
            FaultKind::Latency(delay) => {
                let ready = std::mem::replace(service, service.clone());
                State::Late { sleep: tokio::time::sleep(delay), service: Some(ready), request: Some(request) }
            }
            FaultKind::SlowBody(_) | FaultKind::BrokenBody => {
                State::Call { call: service.call(request), kind: Some(kind) }
            }
            FaultKind::Stall => State::Stalled,
            FaultKind::Refused | FaultKind::Reset => {
                State::Now { answer: Some(Err(InjectedFault::new(kind))) }
            }
            other => match retryscope_http::fault::answer(other, ()) {
                Some(answer) => State::Now { answer: Some(Ok(answer)) },
                // A kind this layer does not know yet fails like a reset.
                None => State::Now { answer: Some(Err(InjectedFault::new(FaultKind::Reset))) },
            },
        };
        Self { state }
    }
}

impl<S, B, ResB> Future for FaultFuture<S, Request<B>>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
{
    type Output = Result<Response<FaultBody<ResB>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                Projected::Call { call, kind } => {
                    let response = ready!(call.poll(cx)).map_err(Into::into)?;
                    return Poll::Ready(Ok(response.map(|body| FaultBody::under(*kind, body))));
                }
                Projected::Late { sleep, service, request } => {
                    ready!(sleep.poll(cx));
                    let (Some(mut service), Some(request)) = (service.take(), request.take()) else {
                        return Poll::Pending;
                    };
                    let call = service.call(request);
                    state.set(State::Call { call, kind: None });
                }
                Projected::Now { answer } => {
                    return Poll::Ready(match answer.take() {
                        Some(Ok(answer)) => Ok(answer.map(|()| FaultBody::empty())),
                        Some(Err(failure)) => Err(failure.into()),
                        None => Err(InjectedFault::new(FaultKind::Reset).into()),
                    });
                }
                Projected::Stalled => return Poll::Pending,
            }
        }
    }
}

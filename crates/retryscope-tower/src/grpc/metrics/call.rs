//! One call's metrics, from its first attempt to its status reaching the
//! caller.

use super::{Instruments, names};
use crate::error::BoxError;
use crate::framing::MessageMeter;
use crate::grpc::{code, headers};
use bytes::Buf;
use http::{HeaderMap, Response};
use opentelemetry::KeyValue;
use retryscope::ErrorType;
use retryscope::observe::{
    AttemptEnd, AttemptStart, Finish, HedgeOutcome, Observer, OperationInfo, OperationObserver, Wait,
};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// One call's metrics, shared by the engine's observer hooks, the bodies of
/// its attempts and the response handed to the caller. The call ends once:
/// when its status reaches the caller, when it fails, or — if every handle is
/// dropped first — as `CANCELLED`.
#[derive(Clone)]
pub(crate) struct CallMetrics(Arc<Call>);

impl fmt::Debug for CallMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallMetrics").field("labels", &self.0.labels).finish_non_exhaustive()
    }
}

struct Call {
    instruments: Arc<Instruments>,
    /// `grpc.method` and `grpc.target`.
    labels: [KeyValue; 2],
    started: Instant,
    state: Mutex<State>,
}

struct State {
    /// The running attempts, by number: one at a time for a retried call, up
    /// to five overlapping copies for a hedged one.
    running: Vec<(u32, Attempt)>,
    /// The attempt whose answer the caller gets (a hedged call's winner).
    answered: Option<u32>,
    /// Attempts the engine started (the first and its retries, or copies).
    engine_attempts: u32,
    /// Whether the attempts are hedged copies (A96: `grpc.client.call.hedges`,
    /// not `retries`).
    hedged: bool,
    transparent_retries: u32,
    /// When the last attempt ended (the call's start before the first): the
    /// time until the next one starts is retry delay.
    idle_since: Option<Instant>,
    retry_delay: Duration,
    /// The status the last attempt ended with.
    last_status: Option<&'static str>,
    ended: bool,
}

struct Attempt {
    started: Instant,
    /// Request message bytes its bodies sent.
    sent: Arc<AtomicU64>,
    /// Response message bytes the caller read of it.
    rcvd: Arc<AtomicU64>,
}

impl CallMetrics {
    /// A call to `method` on `target`, starting now.
    pub(super) fn new(instruments: Arc<Instruments>, method: Arc<str>, target: Arc<str>) -> Self {
        let now = Instant::now();
        CallMetrics(Arc::new(Call {
            instruments,
            labels: [KeyValue::new(names::METHOD, method), KeyValue::new(names::TARGET, target)],
            started: now,
            state: Mutex::new(State {
                running: Vec::new(),
                answered: None,
                engine_attempts: 0,
                hedged: false,
                transparent_retries: 0,
                idle_since: Some(now),
                retry_delay: Duration::ZERO,
                last_status: None,
                ended: false,
            }),
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Attempt `number` starts (the engine's hook).
    fn attempt_started(&self, number: u32) {
        let mut state = self.state();
        state.engine_attempts = state.engine_attempts.saturating_add(1);
        self.0.start_attempt(&mut state, number);
    }

    /// The call's attempts are hedged copies.
    fn hedged(&self) {
        self.state().hedged = true;
    }

    /// A transparent retry starts: the attempt that ran ends `UNAVAILABLE` (what
    /// gRPC reports for `REFUSED_STREAM` and a stream a GOAWAY left unprocessed)
    /// and a new attempt starts, counted in `grpc.client.attempt.started` and in
    /// `grpc.client.call.transparent_retries`, never in `grpc.client.call.retries`.
    ///
    /// The service calls it each time it sends a call again transparently
    /// (outside the policy's attempts), before it makes the new attempt's body
    /// with [`sent_meter`](Self::sent_meter).
    ///
    /// The resend's body is made from a copy the attempt kept (it cannot reach
    /// back to the call's body), so it brings the counter its meter adds to:
    /// `sent`, from [`transparent_meter`](Self::transparent_meter).
    pub(crate) fn transparent_retry_started(&self, sent: Arc<AtomicU64>) {
        let mut state = self.state();
        // Only the first attempt is resent transparently.
        self.0.end_attempt(&mut state, FIRST, code::name(UNAVAILABLE));
        state.transparent_retries = state.transparent_retries.saturating_add(1);
        self.0.start_attempt_counting(&mut state, FIRST, sent);
    }

    /// A meter for the body of a transparent retry that may follow, and the
    /// counter to hand to [`transparent_retry_started`](Self::transparent_retry_started)
    /// if it does.
    pub(crate) fn transparent_meter() -> (MessageMeter, Arc<AtomicU64>) {
        let sent = Arc::new(AtomicU64::new(0));
        (MessageMeter::new(Arc::clone(&sent)), sent)
    }

    /// Counts the request message bytes the body of the attempt that started
    /// last sends (the service makes each body right after its attempt starts).
    pub(crate) fn sent_meter(&self) -> MessageMeter {
        let sent = self.state().running.last().map(|(_, a)| Arc::clone(&a.sent)).unwrap_or_default();
        MessageMeter::new(sent)
    }

    /// Attempt `number` ended with `error` (the engine's hook); a hedged copy
    /// may have been cancelled instead. An attempt that succeeded in the
    /// engine's eyes stays open: its status is OK in the headers, or comes in
    /// the trailers, and the response body ends it.
    fn attempt_finished(&self, number: u32, error: Option<ErrorType>, hedge: Option<HedgeOutcome>) {
        let mut state = self.state();
        match (error, hedge) {
            (Some(error), _) => self.0.end_attempt(&mut state, number, status_of_error(error)),
            (None, Some(HedgeOutcome::Cancelled)) => {
                self.0.end_attempt(&mut state, number, code::name(CANCELLED))
            }
            (None, _) => state.answered = Some(number),
        }
    }

    /// The attempt whose answer goes to the caller: the one that succeeded,
    /// else the one that started last.
    fn answering(state: &State) -> Option<&Attempt> {
        let answered = state.answered.and_then(|n| state.running.iter().find(|(number, _)| *number == n));
        answered.or(state.running.last()).map(|(_, attempt)| attempt)
    }

    /// The call's outcome is known to the layer: a response goes on to the
    /// caller, who ends the call by reading it (see [`ResponseTail`]); an error
    /// ends the call now, with the status tonic will make of it.
    pub(crate) fn outcome<B>(self, outcome: &Result<Response<B>, BoxError>) -> Option<ResponseTail> {
        match outcome {
            Ok(response) => {
                // A status in the headers (Trailers-Only) or an HTTP error is
                // the whole answer: tonic hands it to the caller without reading
                // the body.
                let status = headers::status(response.headers()).or_else(|| {
                    (response.status() != http::StatusCode::OK)
                        .then(|| headers::status_of_http(response.status()))
                });
                if let Some(status) = status {
                    self.end(code::name(status));
                    return None;
                }
                let rcvd = Self::answering(&self.state()).map(|a| Arc::clone(&a.rcvd)).unwrap_or_default();
                Some(ResponseTail { call: self, rcvd: MessageMeter::new(rcvd) })
            }
            Err(error) => {
                let status = status_of_call_error(&**error).or(self.state().last_status);
                self.end(status.unwrap_or(code::name(UNKNOWN)));
                None
            }
        }
    }

    /// Ends the running attempt, if one is, and the call, with `status`.
    fn end(&self, status: &'static str) {
        let mut state = self.state();
        self.0.end_call(&mut state, status);
    }
}

impl Call {
    fn start_attempt(&self, state: &mut State, number: u32) {
        self.start_attempt_counting(state, number, Arc::default());
    }

    /// Starts attempt `number`, whose sent message bytes add to `sent`.
    fn start_attempt_counting(&self, state: &mut State, number: u32, sent: Arc<AtomicU64>) {
        let now = Instant::now();
        if let Some(idle) = state.idle_since.take() {
            // The call's own setup before the first attempt is not retry delay.
            if state.engine_attempts + state.transparent_retries > 1 {
                state.retry_delay += now.saturating_duration_since(idle);
            }
        }
        self.instruments.attempt_started.add(1, &self.labels);
        // Bounded: the engine runs at most five copies at once, and ends each.
        state.running.retain(|(running, _)| *running != number);
        state.running.push((number, Attempt { started: now, sent, rcvd: Arc::default() }));
    }

    fn end_attempt(&self, state: &mut State, number: u32, status: &'static str) {
        let Some(at) = state.running.iter().position(|(running, _)| *running == number) else { return };
        let (_, attempt) = state.running.remove(at);
        self.record_attempt(state, attempt, status);
    }

    fn record_attempt(&self, state: &mut State, attempt: Attempt, status: &'static str) {
        let now = Instant::now();
        let labels = self.with_status(status);
        let seconds = now.saturating_duration_since(attempt.started).as_secs_f64();
        self.instruments.attempt_duration.record(seconds, &labels);
        self.instruments.attempt_sent.record(attempt.sent.load(Ordering::Relaxed), &labels);
        self.instruments.attempt_rcvd.record(attempt.rcvd.load(Ordering::Relaxed), &labels);
        // Retry delay is time with no attempt running at all.
        if state.running.is_empty() {
            state.idle_since = Some(now);
        }
        state.last_status = Some(status);
    }

    fn end_call(&self, state: &mut State, status: &'static str) {
        if state.ended {
            return;
        }
        state.ended = true;
        for (_, attempt) in std::mem::take(&mut state.running) {
            self.record_attempt(state, attempt, status);
        }
        let seconds = Instant::now().saturating_duration_since(self.started).as_secs_f64();
        self.instruments.call_duration.record(seconds, &self.with_status(status));
        let retries = state.engine_attempts.saturating_sub(1);
        // A96: "If there were no retries, 0 is not reported" (nor hedges).
        match (retries, state.hedged) {
            (0, _) => {}
            (hedges, true) => self.instruments.call_hedges.record(u64::from(hedges), &self.labels),
            (retries, false) => self.instruments.call_retries.record(u64::from(retries), &self.labels),
        }
        if state.transparent_retries > 0 {
            self.instruments
                .call_transparent_retries
                .record(u64::from(state.transparent_retries), &self.labels);
        }
        self.instruments.call_retry_delay.record(state.retry_delay.as_secs_f64(), &self.labels);
    }

    fn with_status(&self, status: &'static str) -> [KeyValue; 3] {
        let [method, target] = self.labels.clone();
        [method, target, KeyValue::new(names::STATUS, status)]
    }
}

impl Drop for Call {
    /// Every handle is gone before the status reached the caller: the caller
    /// dropped the call (or its response), which gRPC records as `CANCELLED`.
    fn drop(&mut self) {
        let mut state = std::mem::replace(
            self.state.get_mut().unwrap_or_else(PoisonError::into_inner),
            State {
                running: Vec::new(),
                answered: None,
                engine_attempts: 0,
                hedged: false,
                transparent_retries: 0,
                idle_since: None,
                retry_delay: Duration::ZERO,
                last_status: None,
                ended: true,
            },
        );
        self.end_call(&mut state, code::name(CANCELLED));
    }
}

/// The first attempt's number, the only one resent transparently.
const FIRST: u32 = 1;
const CANCELLED: u8 = 1;
const UNKNOWN: u8 = 2;
const UNAVAILABLE: u8 = 14;

/// The `grpc.status` of an attempt that failed with `error`: the status it
/// carried, or what tonic reports for a failure without one — `UNAVAILABLE`
/// for a connection that failed, `DEADLINE_EXCEEDED` for a timeout,
/// `CANCELLED` for a cancelled attempt, `UNKNOWN` for anything else.
fn status_of_error(error: ErrorType) -> &'static str {
    match error {
        ErrorType::Kind(kind) if code::by_name(kind).is_some() => kind,
        ErrorType::TIMEOUT => "DEADLINE_EXCEEDED",
        ErrorType::CANCELLED => code::name(CANCELLED),
        ErrorType::CONNECT | ErrorType::RESET | ErrorType::INCOMPLETE => code::name(UNAVAILABLE),
        _ => code::name(UNKNOWN),
    }
}

/// The status tonic makes of an error the layer returns: the first
/// `tonic::Status` down its chain of sources, as `Status::from_error` finds it.
fn status_of_call_error(error: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(status) = error.downcast_ref::<tonic::Status>() {
            return Some(code::name(status.code() as u8));
        }
        next = error.source();
    }
    None
}

/// The engine's hooks: attempts start and end.
impl Observer for CallMetrics {
    type Operation = CallMetrics;

    fn start(&self, info: &OperationInfo<'_>) -> CallMetrics {
        if info.hedged {
            self.hedged();
        }
        self.clone()
    }
}

impl OperationObserver for CallMetrics {
    type Attempt = ();

    fn attempt_started(&mut self, attempt: &AttemptStart) {
        CallMetrics::attempt_started(self, attempt.number);
    }

    fn attempt_finished(&mut self, (): (), attempt: &AttemptEnd) {
        CallMetrics::attempt_finished(self, attempt.number, attempt.error, attempt.hedge);
    }

    fn waiting(&mut self, _: &Wait) {}

    /// The call ends when its status reaches the caller: [`CallMetrics::outcome`].
    fn finished(self, _: &Finish) {}
}

/// The part of a call that follows a streaming response to the caller: counts
/// the response message bytes and ends the attempt and the call with the
/// status in the trailers.
pub(crate) struct ResponseTail {
    call: CallMetrics,
    rcvd: MessageMeter,
}

impl crate::response::Tail for ResponseTail {
    fn data(&mut self, data: &dyn Buf) {
        let chunk = data.chunk();
        if chunk.len() == data.remaining() {
            self.rcvd.count(chunk);
            return;
        }
        // A frame in pieces (tonic's are one `Bytes`, so this is rare): a
        // piece beyond the 64th goes uncounted rather than copied.
        let mut pieces = [std::io::IoSlice::new(&[]); 64];
        let filled = data.chunks_vectored(&mut pieces);
        pieces[..filled].iter().for_each(|piece| self.rcvd.count(piece));
    }

    /// The call's status is the trailers'.
    fn trailers(self: Box<Self>, trailers: &HeaderMap) {
        self.call.end(code::name(headers::status(trailers).unwrap_or(INTERNAL)));
    }

    /// Without trailers, so without a status: `INTERNAL`, as gRPC clients
    /// report a stream that ended so.
    fn ended(self: Box<Self>) {
        self.call.end(code::name(INTERNAL));
    }
}

const INTERNAL: u8 = 13;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::message;
    use crate::grpc::metrics::GrpcMetrics;
    use http::Uri;

    /// What the service's transparent retries record: a new attempt, counted
    /// as a transparent retry and never as a retry; the abandoned one ends
    /// UNAVAILABLE. A call whose every handle is dropped ends CANCELLED.
    #[test]
    fn a_transparent_retry_is_an_attempt_but_not_a_retry() {
        let telemetry = retryscope_test_support::telemetry::Telemetry::install();
        let origin = Uri::from_static("http://127.0.0.1:50051");
        let metrics = GrpcMetrics::new(&telemetry.meter, Some(&origin));
        let call = metrics.call("/s.S/M", &Uri::from_static("/s.S/M"));
        call.attempt_started(1);
        let mut sent = call.sent_meter();
        sent.count(&message(b"first"));
        let (mut resent, counter) = CallMetrics::transparent_meter();
        call.transparent_retry_started(counter);
        resent.count(&message(b"second"));
        call.attempt_finished(1, None, None);
        drop(call);

        let with = |status| {
            [("grpc.method", "s.S/M"), ("grpc.target", "http://127.0.0.1:50051"), ("grpc.status", status)]
        };
        assert_eq!(telemetry.counter(names::ATTEMPT_STARTED, &with("OK")[..2]), 2);
        assert_eq!(telemetry.histogram_count(names::ATTEMPT_DURATION, &with("UNAVAILABLE")), 1);
        assert_eq!(telemetry.histogram_count(names::ATTEMPT_DURATION, &with("CANCELLED")), 1);
        assert_eq!(telemetry.histogram_count(names::CALL_DURATION, &with("CANCELLED")), 1);
        let sizes: Vec<(String, f64)> = telemetry
            .histogram(names::ATTEMPT_SENT_SIZE)
            .into_iter()
            .map(|p| (p.attributes["grpc.status"].clone(), p.sum))
            .collect();
        assert!(
            sizes.contains(&("UNAVAILABLE".into(), 5.0)) && sizes.contains(&("CANCELLED".into(), 6.0)),
            "{sizes:?}"
        );
        let transparent = telemetry.histogram(names::CALL_TRANSPARENT_RETRIES);
        assert_eq!(transparent.iter().map(|p| (p.count, p.sum)).collect::<Vec<_>>(), [(1, 1.0)]);
        assert!(telemetry.histogram(names::CALL_RETRIES).is_empty());
    }

    /// A hedged call's copies overlap: each is an attempt of its own, the
    /// losers end CANCELLED, the winner's answer ends the call, and the
    /// copies beyond the first are hedges (A96), not retries.
    #[test]
    fn a_hedged_calls_copies_are_attempts_and_its_extra_copies_hedges() {
        let telemetry = retryscope_test_support::telemetry::Telemetry::install();
        let origin = Uri::from_static("http://127.0.0.1:50051");
        let metrics = GrpcMetrics::new(&telemetry.meter, Some(&origin));
        let call = metrics.call("/s.S/M", &Uri::from_static("/s.S/M"));
        call.hedged();
        call.attempt_started(1);
        call.sent_meter().count(&message(b"one"));
        call.attempt_started(2);
        call.sent_meter().count(&message(b"copy"));
        call.attempt_finished(2, None, Some(HedgeOutcome::Won));
        call.attempt_finished(1, None, Some(HedgeOutcome::Cancelled));
        call.end("OK");

        let with = |status| {
            [("grpc.method", "s.S/M"), ("grpc.target", "http://127.0.0.1:50051"), ("grpc.status", status)]
        };
        assert_eq!(telemetry.counter(names::ATTEMPT_STARTED, &with("OK")[..2]), 2);
        assert_eq!(telemetry.histogram_count(names::ATTEMPT_DURATION, &with("CANCELLED")), 1);
        assert_eq!(telemetry.histogram_count(names::ATTEMPT_DURATION, &with("OK")), 1);
        let sizes: Vec<(String, f64)> = telemetry
            .histogram(names::ATTEMPT_SENT_SIZE)
            .into_iter()
            .map(|p| (p.attributes["grpc.status"].clone(), p.sum))
            .collect();
        assert!(
            sizes.contains(&("CANCELLED".into(), 3.0)) && sizes.contains(&("OK".into(), 4.0)),
            "{sizes:?}"
        );
        let hedges = telemetry.histogram(names::CALL_HEDGES);
        assert_eq!(hedges.iter().map(|p| (p.count, p.sum)).collect::<Vec<_>>(), [(1, 1.0)]);
        assert_eq!(hedges[0].unit, "{hedge}");
        assert!(telemetry.histogram(names::CALL_RETRIES).is_empty());
    }

    #[test]
    fn statuses_of_failures_without_one_are_what_tonic_reports() {
        assert_eq!(status_of_error(ErrorType::Kind("UNAVAILABLE")), "UNAVAILABLE");
        assert_eq!(status_of_error(ErrorType::TIMEOUT), "DEADLINE_EXCEEDED");
        assert_eq!(status_of_error(ErrorType::CONNECT), "UNAVAILABLE");
        assert_eq!(status_of_error(ErrorType::OTHER), "UNKNOWN");
        let status: BoxError = Box::new(tonic::Status::deadline_exceeded("late"));
        assert_eq!(status_of_call_error(&*status), Some("DEADLINE_EXCEEDED"));
        let other: BoxError = "plain".into();
        assert_eq!(status_of_call_error(&*other), None);
    }
}

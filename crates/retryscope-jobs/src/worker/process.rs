//! One delivery, decided: run it (once per key), retry it with a run-at,
//! hold it while the dependency is down, or dead-letter it — and settle it
//! with the broker only after whatever replaces it is stored.

use super::Inner;
use super::attempts::{self, Admitted};
use super::execution::Execution;
use super::keys::Claimed;
use super::requeue;
use crate::broker::{Broker, Delivery, Outgoing};
use crate::dead::{DeadLetter, DeadReason, TRACEPARENT, header_safe};
use crate::job::{HandlerFuture, Job, JobOutcome};
use crate::meta::JobMeta;
use futures_util::FutureExt;
use rand::RngExt;
use retryscope::jobs::JobKeyScope;
use retryscope::jobs::{JobFailure, Schedule};
use retryscope::{JitterRng, Retryable, StopReason, Verdict};
use retryscope_idempotency::IdempotencyStore;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};
use tracing::Instrument;

/// The header a NATS producer's de-duplication id travels in.
const NATS_MSG_ID: &str = "Nats-Msg-Id";

pub(crate) async fn process<B: Broker, E, S>(inner: &Inner<B, E, S>, delivery: B::Delivery)
where
    E: std::fmt::Display + Send + 'static,
    S: IdempotencyStore,
{
    let outcome = decide(inner, &delivery).await;
    inner.stats.record(outcome);
    inner.telemetry.outcome(outcome, delivery.subject());
}

async fn decide<B: Broker, E, S>(inner: &Inner<B, E, S>, delivery: &B::Delivery) -> JobOutcome
where
    E: std::fmt::Display + Send + 'static,
    S: IdempotencyStore,
{
    let now = SystemTime::now();
    let meta = match JobMeta::read(|name| delivery.header(name)) {
        Ok(Some(meta)) => meta,
        Ok(None) => {
            if !inner.warned_bare.swap(true, Ordering::Relaxed) {
                tracing::info!(target: retryscope_otel::names::TARGET,
                    subject = delivery.subject(),
                    "a job without retryscope's headers runs as attempt 1 (logged once per worker)"
                );
            }
            JobMeta::first(delivery.header(NATS_MSG_ID).map(str::to_owned))
        }
        Err(invalid) => {
            let letter =
                letter(delivery, JobMeta::first(delivery.header(NATS_MSG_ID).map(str::to_owned)), now);
            let letter = DeadLetter {
                reason: DeadReason::InvalidJobMetadata,
                last_error: Some(invalid.to_string()),
                ..letter
            };
            return dead_letter(inner, delivery, letter, None).await;
        }
    };
    if let Some(max) = inner.broker.max_deliver()
        && delivery.delivered() >= max
    {
        // The broker's last delivery of it: every earlier one went unsettled.
        let letter = DeadLetter { reason: DeadReason::MaxDeliveries, ..letter(delivery, meta, now) };
        return dead_letter(inner, delivery, letter, None).await;
    }
    if let Some(run_at) = meta.run_at
        && let Ok(early) = run_at.duration_since(now)
        && !early.is_zero()
    {
        if early > retryscope::MAX_JOB_DURATION {
            // No valid policy schedules that far ahead: a producer's bug, and a
            // job that would otherwise wait in the queue for ever.
            let letter = DeadLetter {
                reason: DeadReason::InvalidJobMetadata,
                last_error: Some(format!(
                    "the job's {} header is more than {} days ahead",
                    crate::meta::RUN_AT_HEADER,
                    retryscope::MAX_JOB_DURATION.as_secs() / 86_400
                )),
                ..letter(delivery, meta, now)
            };
            return dead_letter(inner, delivery, letter, None).await;
        }
        return put_back(inner, delivery, &meta, early, JobOutcome::Waiting).await;
    }
    if let Some(hold) = guard_hold(inner) {
        return put_back(inner, delivery, &meta, hold, JobOutcome::Held).await;
    }
    // The execution starts here: what it runs under is fixed now, from the
    // configuration in force (a reload reaches the next execution).
    let execution = Execution::resolve(inner, delivery.subject());
    let ticket = match inner.keys.claim(meta.key.as_deref(), delivery.subject(), delivery.payload()).await {
        Claimed::Run(ticket) => ticket,
        Claimed::Done => {
            return match delivery.ack().await {
                Ok(()) => JobOutcome::Deduplicated,
                Err(_) => JobOutcome::Unsettled,
            };
        }
        // Running on another worker, or that worker died less than a claim ago:
        // not the dependency's hold, and not an attempt.
        Claimed::Elsewhere(wait) => {
            return put_back(inner, delivery, &meta, wait, JobOutcome::ClaimedElsewhere).await;
        }
        Claimed::Later(wait) => return put_back(inner, delivery, &meta, wait, JobOutcome::Held).await,
    };
    // Under the claim, as the retry's record is raised: a delivery of this
    // attempt that arrives while the attempt runs elsewhere waits for the
    // claim above, and then sees the record that attempt left.
    match inner.keys.admit(&meta).await {
        Admitted::Current => {}
        Admitted::Superseded(recorded) => {
            inner.keys.release(ticket).await;
            return attempts::drop_superseded(delivery, &meta, recorded).await;
        }
        Admitted::Later(wait) => {
            inner.keys.release(ticket).await;
            return put_back(inner, delivery, &meta, wait, JobOutcome::Held).await;
        }
    }
    if let (Some(age), Some(key)) = (ticket.as_ref().and_then(|t| t.took_over()), meta.key.as_deref()) {
        inner.stats.took_over();
        inner.telemetry.taken_over(delivery.subject(), key, age);
    }
    let first_attempt_at = meta.first_attempt_at.unwrap_or(now);
    let job = Job {
        key: meta.key.as_deref().map(Arc::from),
        subject: Arc::from(delivery.subject()),
        payload: delivery.payload().clone(),
        attempt: meta.attempt,
        first_attempt_at,
        replays: meta.replays,
    };
    let span = inner.telemetry.attempt_span(delivery, &job, execution.config_hash.as_deref());
    let Some((result, verdict)) = attempt(inner, delivery, job, execution.attempt_policy, ticket.as_ref())
        .instrument(span.span().clone())
        .await
    else {
        // Shutdown's grace period is over: give the job back at once.
        inner.keys.release(ticket).await;
        span.end("unsettled", None);
        if let Err(error) = delivery.nak(Duration::ZERO).await {
            tracing::debug!(target: retryscope_otel::names::TARGET, error = %error, "an abandoned job could not be put back: it comes again after AckWait");
        }
        return JobOutcome::Unsettled;
    };
    let ended = SystemTime::now();
    let meta = JobMeta { first_attempt_at: Some(first_attempt_at), ..meta };
    match result {
        Ok(()) => {
            inner.keys.complete(ticket).await;
            span.end("succeeded", None);
            let age = ended.duration_since(first_attempt_at).unwrap_or_default();
            inner.telemetry.completed(delivery.subject(), meta.attempt, age);
            match delivery.ack().await {
                Ok(()) => JobOutcome::Succeeded,
                // The key is recorded: the redelivery is acked without running.
                Err(_) => JobOutcome::Unsettled,
            }
        }
        Err(error) if error.attempts() == 0 => {
            // The engine refused to start it (breaker open, pacer gate past
            // the attempt's deadline, no budget for a retry): a hold, not an
            // attempt.
            inner.keys.release(ticket).await;
            span.end("held", None);
            let wait = match error.reason() {
                StopReason::RateLimited { wait, .. } => wait,
                StopReason::CircuitOpen => breaker_wait(inner).unwrap_or(inner.hold),
                _ => inner.hold,
            };
            put_back(inner, delivery, &meta, wait, JobOutcome::Held).await
        }
        Err(error) => {
            let error_type =
                verdict.and_then(|v| v.error_type()).map(|t| retryscope_otel::error_type_str(t).to_owned());
            let last_error = error.last_error().map(|e| header_safe(&e.to_string()));
            let transient = match verdict {
                // A timed-out attempt reports no verdict from the classifier.
                None => true,
                Some(v) => matches!(v, Verdict::Retryable { .. } | Verdict::RetriedElsewhere { .. }),
            };
            let reason = if transient {
                let hint = match verdict {
                    Some(Verdict::Retryable { hint, .. }) => hint,
                    _ => None,
                };
                let failure = JobFailure {
                    attempt: meta.attempt,
                    previous_delay: meta.previous_delay,
                    first_attempt_at,
                    hint,
                    error: verdict.and_then(|v| v.error_type()),
                };
                let mut rng = JitterRng::from_entropy();
                match execution.policy.schedule(&failure, ended, &mut rng) {
                    Schedule::RetryAt { at, delay, .. } => {
                        span.end("retried", error_type.as_deref());
                        return requeue::requeue(inner, delivery, meta, at, delay, ticket).await;
                    }
                    Schedule::DeadLetter(reason) => {
                        DeadReason::from_stop(reason).unwrap_or(DeadReason::AttemptsExhausted)
                    }
                }
            } else {
                DeadReason::from_stop(error.reason()).unwrap_or(DeadReason::Permanent)
            };
            span.end("dead_lettered", error_type.as_deref());
            let letter = DeadLetter { reason, error_type, last_error, ..letter(delivery, meta, ended) };
            dead_letter(inner, delivery, letter, ticket).await
        }
    }
}

/// Runs one attempt through the engine — the classification, the attempt
/// timeout and the dependency's budget, breaker and pacer — sending
/// in-progress acks and renewing the job key's claim while it runs, so the
/// broker never redelivers a running job and no other worker takes its key.
/// `None`: abandoned at shutdown, after the grace period.
async fn attempt<B: Broker, E, S>(
    inner: &Inner<B, E, S>,
    delivery: &B::Delivery,
    job: Job,
    attempt_policy: retryscope::Policy,
    ticket: Option<&retryscope_idempotency::store::Ticket>,
) -> Option<(Result<(), retryscope::RetryError<E>>, Option<Verdict>)>
where
    E: std::fmt::Display + Send + 'static,
    S: IdempotencyStore,
{
    let verdict: Mutex<Option<Verdict>> = Mutex::new(None);
    // The delivery's place in the job's attempts: a redelivery after a
    // failure is a retry to the dependency's guards (a budget charges it).
    let number = job.attempt;
    let result = {
        // A new scope for each execution: its calls count from 1 again, so a
        // re-run sends the keys the first run sent.
        let scope = job.key.as_ref().filter(|_| inner.job_keyed_calls);
        let op = || {
            inner.stats.executed();
            let run: HandlerFuture<E> = inner.handler.call(job.clone());
            match scope {
                Some(key) => Box::pin(JobKeyScope::new(Arc::clone(key), run)) as HandlerFuture<E>,
                None => run,
            }
        };
        let retry = op.retry(attempt_policy).resuming(number).classify(|result: &Result<(), E>| {
            let v = match result {
                Ok(()) => Verdict::Success,
                Err(e) => (inner.classify)(e),
            };
            *verdict.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(v);
            v
        });
        let running = async {
            match &inner.guards {
                Some(guards) => retry.dependency(&**guards).await,
                None => retry.await,
            }
        };
        // A handler that panics is a permanent failure of its attempt: the
        // job goes to the dead letters, not back to the broker to panic on
        // every redelivery with its claim left to run out.
        let running = async {
            match AssertUnwindSafe(running).catch_unwind().await {
                Ok(result) => result,
                Err(panic) => {
                    let message = panic_message(&*panic);
                    tracing::error!(target: retryscope_otel::names::TARGET, panic = message, "a job's handler panicked: the job is dead-lettered as a permanent failure");
                    let verdict_now = Verdict::permanent(PANIC);
                    *verdict.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(verdict_now);
                    Err(retryscope::RetryError::new(StopReason::Permanent, 1, Some(PANIC), None))
                }
            }
        };
        // The claim is renewed while the handler runs.
        let running = inner.keys.renewing(ticket, running);
        let mut abandon = inner.abandon.subscribe();
        // Its own future, polled beside the handler: a progress ack that
        // waits on a reconnecting broker stalls neither the handler nor the
        // claim's renewal.
        let progressing = in_progress(delivery, inner.broker.ack_wait());
        tokio::pin!(running, progressing);
        loop {
            tokio::select! {
                result = &mut running => break result,
                // Never completes: it renews the delivery each period.
                () = &mut progressing => {}
                true = async { abandon.wait_for(|abandoned| *abandoned).await.is_ok() } => return None,
            }
        }
    };
    let verdict = *verdict.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    Some((result, verdict))
}

/// The `error.type` of an attempt whose handler panicked.
const PANIC: retryscope::ErrorType = retryscope::ErrorType::Kind("panic");

/// What a panic said, if it said it with a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("")
}

/// Sends a progress ack three times per `ack_wait` (one may be lost and the
/// next still be in time), each given a period; never returns.
async fn in_progress<D: Delivery>(delivery: &D, ack_wait: Duration) {
    let period = (ack_wait / 3).max(Duration::from_millis(10));
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match tokio::time::timeout(period, delivery.in_progress()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::debug!(target: retryscope_otel::names::TARGET, error = %error, "an in-progress ack failed");
            }
            Err(_) => {
                tracing::debug!(target: retryscope_otel::names::TARGET, ?period, "an in-progress ack did not go out within a period");
            }
        }
    }
}

/// A hold before the job is even claimed, if its dependency's pacer gate is
/// closed: read, not asked (no worker waits out a gate). Everything else is
/// the engine's to admit or refuse as the job's attempt starts — a retry the
/// budget has no token for, an open breaker — through the dependency's
/// guards: see the `attempts() == 0` arm above.
fn guard_hold<B: Broker, E, S>(inner: &Inner<B, E, S>) -> Option<Duration> {
    let pacer = inner.guards.as_ref()?.pacer()?;
    (pacer.allowed_rate() == Some(0.0)).then_some(inner.hold)
}

/// How long the open breaker stays open, asked without taking a probe slot
/// for long: a granted permit is dropped unused, which frees its slot.
fn breaker_wait<B: Broker, E, S>(inner: &Inner<B, E, S>) -> Option<Duration> {
    let breaker = inner.guards.as_ref()?.breaker()?;
    match breaker.try_acquire() {
        Err(open) => Some(open.retry_in),
        Ok(permit) => {
            drop(permit);
            None
        }
    }
}

/// Puts a job back for `wait` without counting an attempt: a `Nak` with
/// the wait as delay, or — when the broker's delivery limit is near — a new
/// message with a run-at, so that holds never exhaust `max_deliver`.
async fn put_back<B: Broker, E, S>(
    inner: &Inner<B, E, S>,
    delivery: &B::Delivery,
    meta: &JobMeta,
    wait: Duration,
    outcome: JobOutcome,
) -> JobOutcome {
    // Spread the held jobs, so that they do not all come back at once.
    let wait = if outcome == JobOutcome::Held { spread(wait) } else { wait };
    let near_limit = inner.broker.max_deliver().is_some_and(|max| delivery.delivered() + 2 >= max);
    if !near_limit {
        return match delivery.nak(wait).await {
            Ok(()) => outcome,
            Err(_) => JobOutcome::Unsettled,
        };
    }
    let run_at = SystemTime::now().checked_add(wait);
    let meta = JobMeta { run_at, ..meta.clone() };
    let message = outgoing(delivery, &meta, None);
    match inner.broker.publish(message).await {
        Ok(_) => match delivery.ack().await {
            Ok(()) => outcome,
            Err(_) => JobOutcome::Unsettled,
        },
        Err(error) => {
            tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, "a held job could not be put back: it comes again after AckWait");
            JobOutcome::Unsettled
        }
    }
}

fn spread(wait: Duration) -> Duration {
    let factor: f64 = rand::rng().random_range(1.0..1.2);
    wait.mul_f64(factor)
}

/// Stores the dead letter, waits for the broker's ack, and only then
/// terminates the original: a dead letter that cannot be stored leaves the
/// job to come again. A keyed job's last attempt keeps its claim (`ticket`,
/// renewed meanwhile) until the letter is stored and the attempt record
/// raised past it, as a retry's does ([`requeue`](super::requeue)): a
/// redelivery of that attempt — its `Term` lost — is then dropped.
async fn dead_letter<B: Broker, E, S>(
    inner: &Inner<B, E, S>,
    delivery: &B::Delivery,
    letter: DeadLetter,
    ticket: Option<retryscope_idempotency::store::Ticket>,
) -> JobOutcome
where
    S: IdempotencyStore,
{
    let message = letter.to_outgoing();
    let storing = async {
        let stored = inner.broker.publish_dead(message).await;
        if stored.is_ok() {
            inner.keys.dead_lettered(&letter.meta).await;
        }
        stored
    };
    let stored = inner.keys.renewing(ticket.as_ref(), storing).await;
    inner.keys.release(ticket).await;
    match stored {
        Ok(_) => {
            inner.telemetry.dead_lettered(delivery.subject(), letter.reason);
            match delivery.term().await {
                Ok(()) => JobOutcome::DeadLettered,
                Err(_) => JobOutcome::Unsettled,
            }
        }
        Err(error) => {
            tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, "a dead letter could not be stored: the job comes again");
            match delivery.nak(inner.hold).await {
                Ok(()) => JobOutcome::Unsettled,
                Err(_) => JobOutcome::Unsettled,
            }
        }
    }
}

fn letter<D: Delivery>(delivery: &D, meta: JobMeta, at: SystemTime) -> DeadLetter {
    DeadLetter {
        subject: delivery.subject().to_owned(),
        payload: delivery.payload().clone(),
        meta,
        reason: DeadReason::Permanent,
        error_type: None,
        last_error: None,
        last_attempt_at: at,
        traceparent: delivery.header(TRACEPARENT).map(str::to_owned),
    }
}

pub(super) fn outgoing<D: Delivery>(delivery: &D, meta: &JobMeta, dedup_id: Option<String>) -> Outgoing {
    let mut headers: Vec<(String, String)> =
        meta.to_headers().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    for name in [TRACEPARENT, "tracestate"] {
        if let Some(value) = delivery.header(name) {
            headers.push((name.to_owned(), value.to_owned()));
        }
    }
    Outgoing {
        subject: delivery.subject().to_owned(),
        payload: delivery.payload().clone(),
        headers,
        dedup_id,
    }
}

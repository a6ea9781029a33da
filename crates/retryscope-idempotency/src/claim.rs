//! A claimed key's life while its request runs: renewed every third of its
//! lease, so that a request slower than the lease keeps its key (and a
//! process that died frees it a lease later); then completed with how the
//! request ended — tried again in the background until the lease would
//! have run out, when the store failed to record it — or released, so that
//! a retry runs the request again.

use std::future::poll_fn;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior, timeout};

use crate::StoreError;
use crate::service::{Shared, chain};
use crate::store::{Completion, IdempotencyStore, Ticket};

/// Completions the store failed to record that one service tries again at
/// once, at most: each holds its response (up to the layer's `max_body`)
/// for up to a lease, and a store outage under load would otherwise hold
/// every response completed during it. Past this, a completion is not
/// tried again: its key stays claimed until its lease ends.
pub(crate) const MAX_LATE_COMPLETIONS: usize = 1_024;

/// The shortest renewal period: a lease of a few milliseconds (at least
/// 1 ms is accepted) renews every millisecond.
const MIN_RENEWAL: Duration = Duration::from_millis(1);

/// A claim not yet completed: released if the run ends any other way (an
/// error, a panic in the inner service, a runtime shutting down).
pub(crate) struct ClaimGuard<St: IdempotencyStore> {
    shared: Arc<Shared<St>>,
    ticket: Option<Ticket>,
}

impl<St: IdempotencyStore> ClaimGuard<St> {
    pub(crate) fn new(shared: Arc<Shared<St>>, ticket: Ticket) -> Self {
        Self { shared, ticket: Some(ticket) }
    }

    /// Runs `work` while the claim is renewed every third of its lease. A
    /// renewal the store fails or does not answer is tried again the next
    /// period; one that finds the claim gone (the store was unreachable
    /// from here for a whole lease) is logged, and the request finishes.
    pub(crate) async fn renewing<T>(&self, work: impl Future<Output = T>) -> T {
        let Some(ticket) = &self.ticket else { return work.await };
        let (mut work, mut renewing) = (pin!(work), pin!(renew(&self.shared, ticket)));
        poll_fn(|cx| {
            if let Poll::Ready(done) = work.as_mut().poll(cx) {
                return Poll::Ready(done);
            }
            // Never ready: it renews the claim each period.
            let _ = renewing.as_mut().poll(cx);
            Poll::Pending
        })
        .await
    }

    /// Records how the request ended. A completion the store fails to
    /// record is tried again in the background (the caller has its
    /// response; repeats get 409 meanwhile) until the claim's lease would
    /// have run out: after that, a retry runs the request again.
    pub(crate) async fn complete(&mut self, completion: Completion) {
        let Some(ticket) = self.ticket.take() else { return };
        let Err(error) = complete(&self.shared, &ticket, completion.clone()).await else { return };
        let late = &self.shared.late_completions;
        let admitted = late.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < MAX_LATE_COMPLETIONS).then_some(n + 1)
        });
        let runtime = tokio::runtime::Handle::try_current();
        match (admitted, runtime) {
            (Ok(_), Ok(runtime)) => {
                tracing::warn!(error = %chain(&error), "idempotency store failed to record a completed request: tried again until its lease runs out");
                let shared = Arc::clone(&self.shared);
                runtime.spawn(async move {
                    complete_later(&shared, &ticket, completion).await;
                    shared.late_completions.fetch_sub(1, Ordering::AcqRel);
                });
            }
            (admitted, _) => {
                if admitted.is_ok() {
                    late.fetch_sub(1, Ordering::AcqRel);
                }
                // The key stays claimed until its lease ends: repeats get 409 until then.
                tracing::warn!(error = %chain(&error), "idempotency store failed to record a completed request, and too many are being tried again: its key is claimed until its lease runs out");
            }
        }
    }

    pub(crate) async fn release(&mut self) {
        let Some(ticket) = self.ticket.take() else { return };
        release(&self.shared, &ticket).await;
    }
}

/// Renews the claim of `ticket` every third of its lease, for as long as it
/// is polled; never returns.
async fn renew<St: IdempotencyStore>(shared: &Shared<St>, ticket: &Ticket) {
    let lease = shared.settings.lease();
    let every = (lease / 3).max(MIN_RENEWAL);
    // Ticks every period, however long a renewal took.
    let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticks.tick().await;
        let renewed =
            timeout(shared.settings.store_timeout.min(every), shared.store.renew(ticket, lease)).await;
        match renewed.unwrap_or_else(|_| Err(StoreError::timeout("renew"))) {
            Ok(true) => failing = false,
            Ok(false) => {
                tracing::warn!(
                    key = ticket.key().as_str(),
                    ?lease,
                    "a running request's claim ran out before it could be renewed: a retry may run the request again"
                );
                break;
            }
            // Once per run of failures: an outage should not flood the log.
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(error = %chain(&error), key = ticket.key().as_str(), "idempotency store failed to renew a running request's claim: tried again each third of its lease");
            }
            Err(_) => {}
        }
    }
    std::future::pending::<()>().await;
}

async fn complete<St: IdempotencyStore>(
    shared: &Shared<St>,
    ticket: &Ticket,
    completion: Completion,
) -> Result<(), StoreError> {
    let settings = &shared.settings;
    let done = timeout(settings.store_timeout, shared.store.complete(ticket, completion, settings.ttl)).await;
    done.unwrap_or_else(|_| Err(StoreError::timeout("complete")))
}

/// Tries `completion` again, pausing 50 ms and doubling up to a quarter of
/// the lease, until the lease has passed since the first try failed: a
/// store does nothing with a claim that ran out, and by then a retry may
/// have claimed the key again.
async fn complete_later<St: IdempotencyStore>(shared: &Shared<St>, ticket: &Ticket, completion: Completion) {
    let lease = shared.settings.lease();
    let until = Instant::now() + lease;
    let most = (lease / 4).max(MIN_RENEWAL);
    let mut pause = Duration::from_millis(50).min(most);
    let mut tries = 1_u32;
    while Instant::now() + pause < until {
        tokio::time::sleep(pause).await;
        tries += 1;
        if complete(shared, ticket, completion.clone()).await.is_ok() {
            tracing::info!(
                key = ticket.key().as_str(),
                tries,
                "idempotency store recorded a completed request on a later try"
            );
            return;
        }
        pause = (pause * 2).min(most);
    }
    tracing::warn!(
        key = ticket.key().as_str(),
        tries,
        ?lease,
        "idempotency store did not record a completed request within its lease: a retry runs the request again"
    );
}

async fn release<St: IdempotencyStore>(shared: &Shared<St>, ticket: &Ticket) {
    let done = timeout(shared.settings.store_timeout, shared.store.release(ticket)).await;
    if let Err(error) = done.unwrap_or_else(|_| Err(StoreError::timeout("release"))) {
        // The key stays claimed until its lease ends: repeats get 409 until then.
        tracing::warn!(error = %chain(&error), "idempotency store failed to release a key");
    }
}

impl<St: IdempotencyStore> Drop for ClaimGuard<St> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket.take() else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let shared = Arc::clone(&self.shared);
            runtime.spawn(async move { release(&shared, &ticket).await });
        }
    }
}

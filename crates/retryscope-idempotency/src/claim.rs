//! A claimed key's life while its request runs: renewed every third of its
//! lease, so that a request slower than the lease keeps its key (and a
//! process that died frees it a lease later); then completed with how the
//! request ended — tried again in the background until the lease would
//! have run out, when the store failed to record it — or released, so that
//! a retry runs the request again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::{Instant, timeout};

use crate::StoreError;
use crate::service::{Shared, chain};
use crate::store::{Completion, IdempotencyStore, Ticket};

/// Completions the store failed to record that one service tries again at
/// once, at most: each holds its response (up to the layer's `max_body`)
/// for up to a lease, and a store outage under load would otherwise hold
/// every response completed during it. Past this, a completion is not
/// tried again: its key stays claimed until its lease ends.
pub(crate) const MAX_LATE_COMPLETIONS: usize = 1_024;

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

    /// Runs `work` while the claim is renewed every third of its lease
    /// ([`renewing`](crate::store::renewing)), each renewal given the store's
    /// timeout (a period at most).
    pub(crate) async fn renewing<T>(&self, work: impl Future<Output = T>) -> T {
        let Some(ticket) = &self.ticket else { return work.await };
        let lease = self.shared.settings.lease();
        // A lease of a few milliseconds (at least 1 ms is accepted) renews
        // every millisecond.
        let every = (lease / 3).max(Duration::from_millis(1));
        let within = self.shared.settings.store_timeout.min(every);
        crate::store::renewing(&*self.shared.store, ticket, lease, every, within, work).await
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
    let most = (lease / 4).max(Duration::from_millis(1));
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

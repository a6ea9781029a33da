//! A claim kept while its work runs: one heartbeat for the idempotency
//! layer's requests and a job worker's handlers, so that a claim can be
//! short (a crashed holder's key is free a lease later) and slow work still
//! keeps it.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior, timeout};

use super::{IdempotencyStore, Ticket};
use crate::StoreError;

/// Runs `work` while the claim of `ticket` is renewed to `lease` every
/// `every` (at least 1 ms), and returns what it returns.
///
/// A renewal the store fails, or does not answer `within`, is tried again
/// the next period: while the store is down no one else can claim the key
/// either. One that finds the claim gone — the store was unreachable from
/// here for a whole lease, or this process stalled that long — is logged
/// (`WARN`, with the key), and `work` goes on unrenewed: stopping it would
/// make a crash of a slow run. Renewals stop when `work` ends.
///
/// ```
/// use std::time::Duration;
/// use retryscope_idempotency::store::{Claim, renewing};
/// use retryscope_idempotency::{Fingerprint, IdempotencyKey, IdempotencyStore, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryStore::default();
/// let key = IdempotencyKey::parse(br#""job-7""#)?;
/// let print = Fingerprint::of(&http::Method::POST, "/jobs", b"");
/// let lease = Duration::from_millis(600);
/// let Claim::Claimed(ticket) = store.claim(&key, print, lease).await? else {
///     unreachable!("a free key")
/// };
/// // Work two leases long, the claim renewed every third of one: still ours.
/// let slow = tokio::time::sleep(2 * lease);
/// renewing(&store, &ticket, lease, lease / 3, lease / 3, slow).await;
/// assert!(store.renew(&ticket, lease).await?);
/// # Ok(())
/// # }
/// ```
pub async fn renewing<St, T>(
    store: &St,
    ticket: &Ticket,
    lease: Duration,
    every: Duration,
    within: Duration,
    work: impl Future<Output = T>,
) -> T
where
    St: IdempotencyStore,
{
    let (mut work, mut renewals) = (pin!(work), pin!(renew(store, ticket, lease, every, within)));
    poll_fn(|cx| {
        if let Poll::Ready(done) = work.as_mut().poll(cx) {
            return Poll::Ready(done);
        }
        // Never ready: it renews the claim each period.
        let _ = renewals.as_mut().poll(cx);
        Poll::Pending
    })
    .await
}

/// The shortest renewal period: a lease of a few milliseconds renews every
/// millisecond.
const MIN_PERIOD: Duration = Duration::from_millis(1);

/// Renews the claim every period for as long as it is polled; never returns.
async fn renew<St: IdempotencyStore>(
    store: &St,
    ticket: &Ticket,
    lease: Duration,
    every: Duration,
    within: Duration,
) {
    let every = every.max(MIN_PERIOD);
    // Ticks every period, however long a renewal took.
    let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticks.tick().await;
        let renewed = timeout(within, store.renew(ticket, lease)).await;
        match renewed.unwrap_or_else(|_| Err(StoreError::timeout("renew"))) {
            Ok(true) => failing = false,
            Ok(false) => {
                tracing::warn!(
                    key = ticket.key().as_str(),
                    ?lease,
                    "a claim ran out before it could be renewed: its work may run again elsewhere"
                );
                break;
            }
            // Once per run of failures: an outage should not flood the log.
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(error = %crate::service::chain(&error), key = ticket.key().as_str(), period = ?every, "the store failed to renew a running claim: tried again each period");
            }
            Err(_) => {}
        }
    }
    std::future::pending::<()>().await;
}

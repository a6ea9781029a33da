//! A failed attempt's retry: the next attempt queued as a new message, the
//! attempt record raised to it, and only then the original acked.

use super::Inner;
use super::process::outgoing;
use crate::broker::{Broker, Delivery};
use crate::job::JobOutcome;
use crate::meta::JobMeta;
use retryscope_idempotency::IdempotencyStore;
use retryscope_idempotency::store::Ticket;
use std::time::{Duration, SystemTime};

/// How often a keyed retry whose publish failed is published again, and the
/// pause before each: a broker that stored it and restarted before it
/// answered is back within this, and its answer (a duplicate) says the retry
/// is stored.
const REPUBLISH_TRIES: u32 = 2;
const REPUBLISH_PAUSE: Duration = Duration::from_millis(200);

/// Queues the next attempt as a new message (its headers say which attempt,
/// since when, and from when), then acks this one: the retry is stored
/// before the original goes. The id `key#r<replays>a<attempt>` makes a
/// republish after a crash between the two a duplicate the broker drops.
///
/// Once the retry is stored, and while this attempt still holds the key's
/// claim (renewed meanwhile), the attempt record is raised to it: a redelivery of this attempt
/// (the ack below lost) is then dropped as superseded, not run again. Not
/// before the publish: a retry that failed to publish leaves this attempt
/// to come again, and it must not find itself superseded.
pub(super) async fn requeue<B: Broker, E, S>(
    inner: &Inner<B, E, S>,
    delivery: &B::Delivery,
    meta: JobMeta,
    at: SystemTime,
    delay: Duration,
    ticket: Option<Ticket>,
) -> JobOutcome
where
    S: IdempotencyStore,
{
    let next = JobMeta { attempt: meta.attempt + 1, previous_delay: Some(delay), run_at: Some(at), ..meta };
    let dedup = next.key.as_ref().map(|key| format!("{key}#r{}a{}", next.replays, next.attempt));
    let keyed = dedup.is_some();
    let message = outgoing(delivery, &next, dedup);
    let storing = async {
        let mut published = inner.broker.publish(message.clone()).await;
        // A failed publish may have been stored (the broker restarted before
        // it answered): this attempt would then come again and run once more
        // than scheduled. Under its de-duplication id, publishing it again is
        // safe (a stored one makes it a duplicate the broker drops) and tells.
        // A keyless retry has no id, and a second publish could queue it twice.
        let mut tries = 0;
        while keyed && published.is_err() && tries < REPUBLISH_TRIES {
            tries += 1;
            tokio::time::sleep(REPUBLISH_PAUSE).await;
            // Keeps the broker from delivering this attempt again meanwhile.
            let _ = delivery.in_progress().await;
            published = inner.broker.publish(message.clone()).await;
        }
        if published.is_ok() {
            inner.keys.scheduled(&next).await;
        }
        published
    };
    // The claim is renewed until the record is raised: a redelivery of this
    // attempt must not take it before then and run beside its retry.
    let published = inner.keys.renewing(ticket.as_ref(), storing).await;
    inner.keys.release(ticket).await;
    match published {
        Ok(_) => match delivery.ack().await {
            Ok(()) => JobOutcome::Retried,
            // The next attempt is stored and recorded: the original's
            // redelivery is dropped as superseded.
            Err(_) => JobOutcome::Unsettled,
        },
        Err(error) => {
            tracing::warn!(target: retryscope_otel::names::TARGET, error = %error, "a retry could not be queued: the job comes again after a hold");
            match delivery.nak(inner.hold).await {
                Ok(()) => JobOutcome::Held,
                Err(_) => JobOutcome::Unsettled,
            }
        }
    }
}

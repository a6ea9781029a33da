//! The share's bounds give way to what a process uses now: once
//! [`MAX_DEPENDENCIES`] names have been attached, the ones whose pacers are
//! all gone make room for a new one, whose gates are then shared. (They
//! were never freed: a process that had cycled through 1,024 names shared
//! no gate of a new one again.)
//!
//! Needs `RETRYSCOPE_REDIS_URL` (required in CI, as for the fleet tests).

mod support;

use retryscope::pace::PaceSignal;
use retryscope::{Hint, Pacer};
use retryscope_redis::{MAX_DEPENDENCIES, RedisPaceShare};
use std::time::Duration;
use support::{redis_url, until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_whose_pacers_are_gone_make_room_for_a_new_one() {
    let Some(url) = redis_url() else { return };
    let quota = format!("test-bounds-{}", std::process::id());
    let share = || {
        RedisPaceShare::builder(redis::Client::open(url.as_str()).expect("a URL"), &quota)
            .build()
            .expect("a share")
    };
    let (a, b) = (share(), share());
    until("shared by both", Duration::from_secs(10), || a.is_shared() && b.is_shared()).await;

    // A process that cycled through every name the share holds, its pacers
    // since dropped.
    for n in 0..MAX_DEPENDENCIES {
        Pacer::new().share_with(a.clone(), &format!("old-{n}.example:443"));
    }
    let (at_a, at_b) = (Pacer::new(), Pacer::new());
    at_a.share_with(a.clone(), "new.example:443");
    at_b.share_with(b.clone(), "new.example:443");
    at_b.learn(&PaceSignal {
        not_before: Some(Hint::retry_after(Duration::from_secs(5))),
        ..PaceSignal::none()
    });
    until("B's gate at A", Duration::from_secs(3), || at_a.allowed_rate() == Some(0.0)).await;
}

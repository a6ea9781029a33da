//! A slow Redis, at the edges of what the share promises: a gate's
//! publication waits up to [`MAX_TIMEOUT`] (1 s) for Redis, whatever the
//! heartbeat's deadline, and no longer; and a Redis that stops answering is
//! left within a second, at the third late heartbeat.
//!
//! One replica (A) reaches Redis through a loopback proxy that holds every
//! answer for a set delay; the other (B) reaches it directly. A gate is
//! published by A right after Redis's script cache is flushed, so its
//! publication is three round trips through the proxy (`EVALSHA` answered
//! `NOSCRIPT`, `SCRIPT LOAD`, `EVALSHA`), and the gate exists only once the
//! last is sent: within the second it arrives, beyond it it is given up.
//! Cut at the heartbeat's deadline, as it was until stop 73 (then 2 ms), a
//! publication slower than that was lost: on a busy machine whose Redis
//! answered in ~50 ms, in CI at stop 72.
//!
//! A subscriber connection that Redis's answers stop reaching, open but
//! silent (a NAT's idle timeout): it hears not even its own replica's
//! heartbeats echo, and is replaced within two seconds; the replacement
//! reads the gates kept, so a gate published meanwhile still arrives.
//!
//! Needs `RETRYSCOPE_REDIS_URL` (skipped outside CI without it, as the fleet
//! tests are) and runs a `redis-server` of its own.

mod support;

use retryscope::pace::PaceSignal;
use retryscope::{Hint, Pacer};
use retryscope_redis::{MAX_TIMEOUT, RedisPaceShare};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::{OwnRedis, redis_url, spare_port, until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A loopback proxy to Redis that holds each answer for the delay set when
/// it arrives, keeping their order; requests pass at once. On
/// [`silence_subscribers`](Self::silence_subscribers), the subscriber
/// connections open then get nothing more, and stay open: a flow a NAT
/// dropped without a FIN or RST.
struct SlowProxy {
    port: u16,
    delay_ms: Arc<AtomicU64>,
    /// Connections opened so far, numbered from 0.
    opened: Arc<AtomicU64>,
    /// Subscriber connections numbered below this get no answer.
    silenced_below: Arc<AtomicU64>,
}

impl SlowProxy {
    async fn start(redis_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let port = listener.local_addr().expect("an address").port();
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delay = Arc::clone(&delay_ms);
        let (opened, silenced_below) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (counting, silence) = (Arc::clone(&opened), Arc::clone(&silenced_below));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(redis) = TcpStream::connect(("127.0.0.1", redis_port)).await else { continue };
                let number = counting.fetch_add(1, Ordering::SeqCst);
                let (mut client_read, mut client_write) = client.into_split();
                let (mut redis_read, mut redis_write) = redis.into_split();
                // Whether the client subscribed on this connection.
                let subscriber = Arc::new(AtomicBool::new(false));
                let subscribed = Arc::clone(&subscriber);
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 16 * 1024];
                    while let Ok(read @ 1..) = client_read.read(&mut buffer).await {
                        if buffer[..read].windows(9).any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE")) {
                            subscribed.store(true, Ordering::SeqCst);
                        }
                        if redis_write.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
                let silence = Arc::clone(&silence);
                let silenced =
                    move || subscriber.load(Ordering::SeqCst) && number < silence.load(Ordering::SeqCst);
                // Each answer leaves `delay` after it came, in order: a
                // reader stamps it, a writer waits for the stamp.
                let (held, mut due) = tokio::sync::mpsc::channel::<(Instant, Vec<u8>)>(1024);
                let delay = Arc::clone(&delay);
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 16 * 1024];
                    while let Ok(read @ 1..) = redis_read.read(&mut buffer).await {
                        let at = Instant::now() + Duration::from_millis(delay.load(Ordering::Relaxed));
                        if held.send((at, buffer[..read].to_vec())).await.is_err() {
                            break;
                        }
                    }
                });
                tokio::spawn(async move {
                    while let Some((at, answer)) = due.recv().await {
                        tokio::time::sleep_until(at.into()).await;
                        if silenced() {
                            continue;
                        }
                        if client_write.write_all(&answer).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self { port, delay_ms, opened, silenced_below }
    }

    /// The subscriber connections open now get nothing more from Redis.
    fn silence_subscribers(&self) {
        self.silenced_below.store(self.opened.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn hold(&self, delay: Duration) {
        self.delay_ms.store(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

/// Pacers of `dependency` at A and at B, each attached to its replica's share.
fn pacers(a: &Arc<RedisPaceShare>, b: &Arc<RedisPaceShare>, dependency: &str) -> (Pacer, Pacer) {
    let (at_a, at_b) = (Pacer::new(), Pacer::new());
    at_a.share_with(a.clone(), dependency);
    at_b.share_with(b.clone(), dependency);
    (at_a, at_b)
}

/// Empties Redis's script cache: the next script a replica runs is answered
/// `NOSCRIPT` first.
async fn flush_scripts(connection: &mut redis::aio::MultiplexedConnection) {
    let () = redis::cmd("SCRIPT").arg("FLUSH").query_async(connection).await.expect("SCRIPT FLUSH");
}

/// A's pacer hears a `Retry-After` of 5 s: a gate to publish.
fn close(pacer: &Pacer) {
    let hint = Hint::retry_after(Duration::from_secs(5));
    pacer.learn(&PaceSignal { not_before: Some(hint), ..PaceSignal::none() });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_published_through_a_slow_redis_arrives_within_a_second_and_is_given_up_beyond_it() {
    if redis_url().is_none() {
        return;
    }
    let mut redis = OwnRedis::start(spare_port()).await;
    let proxy = SlowProxy::start(redis.port).await;
    let quota = format!("test-slow-{}", std::process::id());
    // The default heartbeat deadline, 50 ms: every slow answer below misses
    // it; at most two heartbeats (200 ms apart) fail while a gate is
    // published, so neither replica stops sharing before the gate is out.
    let share = |url: String| {
        RedisPaceShare::builder(redis::Client::open(url).expect("a URL"), &quota).build().expect("a share")
    };
    let (a, b) = (share(proxy.url()), share(redis.url()));
    until("shared by both", Duration::from_secs(10), || {
        a.is_shared() && b.is_shared() && a.live_replicas() == 2 && b.live_replicas() == 2
    })
    .await;
    let mut direct = redis::Client::open(redis.url())
        .expect("a URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");

    // Each answer held 150 ms: the three round trips take ~450 ms, well
    // within the second, far beyond the heartbeat's 50 ms.
    flush_scripts(&mut direct).await;
    let (at_a, at_b) = pacers(&a, &b, "within.example:443");
    proxy.hold(Duration::from_millis(150));
    let published = Instant::now();
    close(&at_a);
    let reached = until("the gate at B", Duration::from_secs(2), || at_b.allowed_rate() == Some(0.0)).await;
    assert!(
        reached >= Duration::from_millis(300),
        "the gate went through the slow path (two held answers before the last EVALSHA), reached in {reached:?}"
    );
    println!("150 ms answers: the gate reached B {:?} after it was published", published.elapsed());
    proxy.hold(Duration::ZERO);
    until("A shared again", Duration::from_secs(5), || a.is_shared()).await;

    // Each answer held 800 ms: the second would come at 1.6 s, after the
    // publication's 1 s (a margin for a busy machine's late timer), so the
    // last EVALSHA is never sent and the gate never reaches B: the
    // publication ends at its deadline, it does not wait on.
    flush_scripts(&mut direct).await;
    let (at_a, at_b) = pacers(&a, &b, "beyond.example:443");
    proxy.hold(Duration::from_millis(800));
    close(&at_a);
    let watched = Instant::now();
    while watched.elapsed() < MAX_TIMEOUT + Duration::from_millis(1500) {
        assert_eq!(at_b.allowed_rate(), None, "a publication cut at {MAX_TIMEOUT:?} reached B");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let kept: Option<i64> = redis::cmd("PTTL")
        .arg(format!("retryscope:pace:{quota}:beyond.example:443"))
        .query_async(&mut direct)
        .await
        .ok();
    assert!(kept.is_none_or(|ms| ms < 0), "no gate kept in Redis: PTTL {kept:?}");

    // Answers prompt again: A's next gate reaches B, so the cut publication
    // gave back its slot and left nothing stuck.
    proxy.hold(Duration::ZERO);
    until("A shared again", Duration::from_secs(5), || a.is_shared()).await;
    let (at_a, at_b) = pacers(&a, &b, "after.example:443");
    close(&at_a);
    until("the next gate at B", Duration::from_secs(2), || at_b.allowed_rate() == Some(0.0)).await;

    // Redis stops answering (answers held 10 s): A's heartbeats miss their
    // 50 ms three times, 200 ms apart, and A paces alone within 750 ms of
    // the last answer in time; a second is the promise.
    proxy.hold(Duration::from_secs(10));
    let stopped = Instant::now();
    until("A fallen back", Duration::from_secs(1), || !a.is_shared()).await;
    println!("a Redis that stopped answering was left in {:?}", stopped.elapsed());
    assert!(b.is_shared(), "B, which reaches Redis directly, still shares");
    redis.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_connection_gone_silent_is_replaced_and_a_gate_published_meanwhile_arrives() {
    if redis_url().is_none() {
        return;
    }
    let mut redis = OwnRedis::start(spare_port()).await;
    let proxy = SlowProxy::start(redis.port).await;
    let quota = format!("test-silent-{}", std::process::id());
    let share = |url: String| {
        RedisPaceShare::builder(redis::Client::open(url).expect("a URL"), &quota).build().expect("a share")
    };
    let (a, b) = (share(proxy.url()), share(redis.url()));
    until("shared by both", Duration::from_secs(10), || a.is_shared() && b.is_shared()).await;
    let (at_a, at_b) = pacers(&a, &b, "silent.example:443");
    // A's subscription stops hearing anything; its heartbeats (another
    // connection) go on, so A would count itself shared and never hear B.
    proxy.silence_subscribers();
    let silenced = Instant::now();
    close(&at_b);
    let reached = until("B's gate at A", Duration::from_secs(5), || at_a.allowed_rate() == Some(0.0)).await;
    println!("a silent subscription: B's gate reached A {reached:?} after A's subscription went silent");
    assert!(
        silenced.elapsed() >= Duration::from_millis(1_500),
        "the gate came through a new subscription (the old one heard nothing for 2 s)"
    );
    until("A shared again", Duration::from_secs(2), || a.is_shared()).await;
    redis.stop().await;
}

//! The share's background work: this replica's heartbeat, the subscriber
//! that hears the other replicas' gates, and reading a kept gate.

use super::*;

/// Reads the gate kept for `dependency` and gives it to its pacers.
pub(super) async fn read_gate(state: &State, key: &str, dependency: &str) {
    let mut connection = state.connection.clone();
    let left: Option<i64> = State::delivered(redis::cmd("PTTL").arg(key).query_async(&mut connection)).await;
    if let Some(millis) = left.and_then(|ms| u64::try_from(ms).ok()).filter(|ms| *ms > 0) {
        state.deliver(dependency, Duration::from_millis(millis));
    }
}

/// Reads the gates kept for `dependencies` in one round trip (a pipeline,
/// within [`MAX_TIMEOUT`]): a subscriber that reconnected hears the gates it
/// may have missed at once, and its messages wait one round trip, not one
/// per dependency (up to a second each, on a slow Redis).
async fn read_gates(state: &State, dependencies: &[Arc<str>]) {
    if dependencies.is_empty() {
        return;
    }
    let mut pipe = redis::pipe();
    for dependency in dependencies {
        pipe.cmd("PTTL").arg(state.gate_key(dependency));
    }
    let mut connection = state.connection.clone();
    let Some(left) = State::delivered(pipe.query_async::<Vec<i64>>(&mut connection)).await else { return };
    for (dependency, millis) in dependencies.iter().zip(left) {
        if let Some(millis) = u64::try_from(millis).ok().filter(|ms| *ms > 0) {
            state.deliver(dependency, Duration::from_millis(millis));
        }
    }
}

/// Says this replica is alive and reads how many are, every [`HEARTBEAT`],
/// until the share is dropped.
pub(super) async fn heartbeat(state: Weak<State>) {
    let script = redis::Script::new(HEARTBEAT_SCRIPT);
    let expiry = u64::try_from(REPLICA_EXPIRY.as_millis()).unwrap_or(u64::MAX);
    let mut failures = 0;
    loop {
        let Some(live) = state.upgrade() else { return };
        let mut connection = live.connection.clone();
        let mut invocation = script.key(live.replicas_key());
        invocation.arg(&live.replica).arg(expiry).arg(live.echo_channel());
        match live.within(invocation.invoke_async::<u32>(&mut connection)).await {
            Some(count) => {
                // The first answer after an outage may come from a Redis that
                // restarted empty, before the other replicas said they are
                // alive again (within one heartbeat): it never lowers the
                // count kept through the outage.
                let count =
                    if failures > 0 { count.max(live.replicas.load(Ordering::Acquire)) } else { count };
                failures = 0;
                live.replicas.store(count.max(1), Ordering::Release);
                live.heartbeat_ok.store(true, Ordering::Release);
            }
            None => {
                failures += 1;
                if failures >= FAILURES_TO_FALL_BACK {
                    live.heartbeat_ok.store(false, Ordering::Release);
                }
            }
        }
        live.settle();
        drop(live);
        tokio::time::sleep(HEARTBEAT).await;
    }
}

/// One subscriber connection for every dependency: receives the gates the
/// other replicas publish, reconnecting with a bounded backoff; after each
/// (re)connection reads the gates kept, which it may have missed. A
/// connection that hears nothing for [`SILENCE`] — not even the echo of this
/// replica's heartbeats — is replaced as if it had dropped.
pub(super) async fn subscriber(state: Weak<State>, client: redis::Client) {
    let mut backoff = RECONNECT.0;
    loop {
        let Some(live) = state.upgrade() else { return };
        let channels = [live.channel(), live.echo_channel()];
        let connect = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channels).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let pubsub = tokio::time::timeout(MAX_TIMEOUT, connect).await.ok().and_then(Result::ok);
        let Some(pubsub) = pubsub else {
            live.subscribed.store(false, Ordering::Release);
            live.settle();
            drop(live);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RECONNECT.1);
            continue;
        };
        backoff = RECONNECT.0;
        live.subscribed.store(true, Ordering::Release);
        live.settle();
        let attached: Vec<Arc<str>> = live.pacers().keys().cloned().collect();
        read_gates(&live, &attached).await;
        drop(live);
        let mut messages = pubsub.into_on_message();
        loop {
            let message = match tokio::time::timeout(SILENCE, messages.next()).await {
                Ok(Some(message)) => message,
                Ok(None) => break,
                Err(_) => {
                    tracing::warn!(target: retryscope_otel::names::TARGET, silence = ?SILENCE,
                        "the fleet's gate subscription heard nothing, not even this replica's heartbeats: reconnecting");
                    break;
                }
            };
            let Some(live) = state.upgrade() else { return };
            if let Ok(payload) = message.get_payload::<String>()
                && let Some((replica, wait, dependency)) = parse(&payload)
                && replica != live.replica
            {
                live.deliver(dependency, wait);
            }
        }
        // The connection is gone: pace alone until it is back.
        let Some(live) = state.upgrade() else { return };
        live.subscribed.store(false, Ordering::Release);
        live.settle();
    }
}

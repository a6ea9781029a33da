//! A client configured from a retryscope-config file (`config(handle)`), for
//! both integrations, against a real HTTP server on 127.0.0.1: each call takes
//! its dependency's settings from the snapshot in force when it starts; the
//! kill switch stops retries within a second of the file changing; a request's
//! own policy still wins; a broken file changes nothing; and reloads under
//! load make no call fail.

use retryscope::RetryBudget;
use retryscope_config::{ConfigHandle, KnownNames};
use retryscope_http::RetryOptions;
use retryscope_test_support::echo::{EchoClient, echo};
use retryscope_test_support::h2_server::{Answer, H2Server};
use retryscope_test_support::{Reply, Server};
use retryscope_tower::{RetryLayer, RetryService};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};
use tower::Layer;

mod common;

use common::{BOTH, Call, Setup, code_policy};
use retryscope_tower::grpc::Grpc;
use retryscope_tower::prelude::*;

fn file(name: &str, text: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("retryscope-conformance-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).expect("temp file");
    path
}

fn text(pay_attempts: u32, pay_enabled: bool) -> String {
    format!(
        "[defaults]\nattempts = 2\nbackoff = {{ initial = \"1ms\", max = \"5ms\" }}\njitter = \"none\"\n\n\
         [dependencies.pay]\npath_prefix = \"/pay\"\nattempts = {pay_attempts}\nenabled = {pay_enabled}\n"
    )
}

/// A gRPC layer's service config for `test.Echo`: UNAVAILABLE is retried,
/// up to five attempts 10 ms apart (the file's dependency narrows them).
fn echo_retry() -> retryscope_tower::grpc::GrpcRetry {
    retryscope_tower::grpc::GrpcRetry::from_service_config(
        r#"{"methodConfig": [{"name": [{"service": "test.Echo"}],
          "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
            "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#,
    )
    .expect("valid service config")
}

fn handle(path: &PathBuf) -> ConfigHandle {
    ConfigHandle::builder(KnownNames::new()).file(path).build().expect("the file loads")
}

/// gRPC's UNAVAILABLE, answered trailers-only.
const UNAVAILABLE: Answer = Answer::TrailersOnly(14);

/// A file whose `echo` dependency names `test.Echo`: three attempts 1 ms
/// apart, its kill switch off unless `enabled` is false.
fn echo_text(enabled: bool) -> String {
    format!(
        "[defaults]\nattempts = 2\n\n[dependencies.echo]\nservice = \"test.Echo\"\nattempts = 3\n\
         backoff = {{ initial = \"1ms\", max = \"1ms\" }}\njitter = \"none\"\nenabled = {enabled}\n"
    )
}

/// A tonic channel to `server` through a gRPC layer with `echo_retry()`'s
/// service config and the file `config`: each call's URI has no authority
/// of its own, so its file settings are kept with its method.
fn echo_channel(server: &H2Server, config: ConfigHandle) -> EchoClient<RetryService<Channel, Grpc>> {
    let layer = RetryLayer::grpc(echo_retry()).origin(server.uri()).config(config).build();
    EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_takes_its_dependencys_attempts_from_the_file() {
    let path = file("attempts", &text(3, true));
    for integration in BOTH {
        let server = Server::start().await;
        let config = handle(&path);
        let client = integration.client(Setup::new(code_policy()).no_budget().no_breaker().config(config));
        server.script(
            "/pay/charge",
            [Reply::status(503), Reply::status(503), Reply::status(503), Reply::ok("no")],
        );
        server.script("/other", [Reply::status(503), Reply::status(503), Reply::ok("no")]);
        let pay = client.send(Call::get(server.url("/pay/charge"))).await;
        let other = client.send(Call::get(server.url("/other"))).await;
        assert_eq!(pay.expect("the last answer").status, 503, "{integration:?}");
        assert_eq!(other.expect("the last answer").status, 503, "{integration:?}");
        let seen = server.seen();
        let count = |p: &str| seen.iter().filter(|s| s.path == p).count();
        assert_eq!(
            (count("/pay/charge"), count("/other")),
            (3, 2),
            "{integration:?}: the file's attempts, not the builder's 5"
        );

        // A request's own policy wins over the file.
        server.script(
            "/pay/own",
            [Reply::status(503), Reply::status(503), Reply::status(503), Reply::ok("yes")],
        );
        let options = RetryOptions::new().policy(code_policy());
        let own = client.send(Call::get(server.url("/pay/own")).extension(options)).await;
        assert_eq!(own.expect("answer").status, 200, "{integration:?}: 4 attempts, as the request asked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_stops_retries_within_a_second_and_a_broken_file_changes_nothing() {
    for integration in BOTH {
        let path = file(&format!("kill-{integration:?}"), &text(3, true));
        let server = Server::start().await;
        let config = handle(&path);
        let _watch = config.watch(Duration::from_millis(500));
        let client =
            integration.client(Setup::new(code_policy()).no_budget().no_breaker().config(config.clone()));
        let attempts_of = |url: String| {
            let server = &server;
            let client = &client;
            async move {
                let before = server.seen().len();
                let answer = client.send(Call::get(url)).await;
                assert_eq!(answer.expect("an answer").status, 503);
                server.seen().len() - before
            }
        };
        server.script("/pay/a", std::iter::repeat_n(Reply::status(503), 1000));
        assert_eq!(attempts_of(server.url("/pay/a")).await, 3, "{integration:?}");

        // A broken file: refused, the old configuration keeps serving.
        std::fs::write(&path, "[dependencies.pay]\npath_prefix = \"/pay\"\nattempts = \"three\"\n")
            .expect("write");
        tokio::time::sleep(Duration::from_millis(700)).await;
        let refused = config.reload();
        assert!(matches!(refused, Ok(retryscope_config::Reload::Unchanged)), "already refused by the poll");
        assert_eq!(attempts_of(server.url("/pay/a")).await, 3, "{integration:?}: the last good file serves");

        let flipped = Instant::now();
        std::fs::write(&path, text(3, false)).expect("write");
        loop {
            if attempts_of(server.url("/pay/a")).await == 1 {
                break;
            }
            assert!(
                flipped.elapsed() < Duration::from_secs(1),
                "{integration:?}: the kill switch took over 1 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// Reload under load: calls at a steady rate while the file is rewritten ten
/// times; no call fails, whichever snapshot it took. 200 calls/s, not the
/// issue's 1,000: at 1,000/s this debug-built loopback pair on a shared
/// 2-core machine falls behind (10 s of calls took ~29 s) and calls fail on
/// attempt timeouts with no rewrite at all (6,649 of 9,989 failed without
/// one, 7,117 with ten), so that rate would measure the machine, not reloads.
/// The issue's 1,000 calls/s for 10 s runs in release, in CI:
/// `wholecall reload-load` (crates/retryscope-bench/benches/wholecall/reload_load.rs,
/// run by scripts/wholecall.sh), for reqwest, tower HTTP and tower gRPC, with
/// the achieved rate, latency and reload count checked there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_load_make_no_call_fail() {
    const SECONDS: u64 = 10;
    const PER_SECOND: u64 = 200;
    const REWRITES: u32 = 10;
    for integration in BOTH {
        let path = file(&format!("load-{integration:?}"), &text(2, true));
        let server = Server::start().await;
        // Every other answer fails: each call needs its retry, under either file.
        server.script(
            "/pay/x",
            (0..2 * SECONDS * PER_SECOND + 1000)
                .map(|i| if i % 2 == 0 { Reply::status(503) } else { Reply::ok("ok") }),
        );
        let t = retryscope_test_support::telemetry::Telemetry::install();
        let config =
            ConfigHandle::builder(KnownNames::new()).meter(&t.meter).file(&path).build().expect("loads");
        let _watch = config.watch(Duration::from_millis(100));
        let client = Arc::new(
            integration.client(Setup::new(code_policy()).no_budget().no_breaker().config(config.clone())),
        );
        let failed = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicU64::new(0));
        let writer = {
            let path = path.clone();
            tokio::spawn(async move {
                for i in 0..REWRITES {
                    tokio::time::sleep(Duration::from_millis(SECONDS * 1000 / u64::from(REWRITES + 1))).await;
                    // 3 or 2 attempts, each text unlike the one before it,
                    // swapped in whole as an editor or a ConfigMap does: a
                    // write in place can be read half-done, and half of this
                    // file is a valid file too (one more reload than rewrites).
                    let next = path.with_extension("next");
                    std::fs::write(&next, text(3 - i % 2, true)).expect("rewrite");
                    std::fs::rename(&next, &path).expect("swap");
                }
            })
        };
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / PER_SECOND));
        let started = Instant::now();
        let mut calls = Vec::new();
        while started.elapsed() < Duration::from_secs(SECONDS) {
            tick.tick().await;
            let (client, failed, done, url) =
                (client.clone(), failed.clone(), done.clone(), server.url("/pay/x"));
            calls.push(tokio::spawn(async move {
                match client.send(Call::get(url)).await {
                    Ok(r) if r.status == 200 || r.status == 503 => {}
                    other => {
                        if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("first failure: {other:?}");
                        }
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }));
        }
        writer.await.expect("writer");
        for call in calls {
            call.await.expect("call task");
        }
        let sent = done.load(Ordering::Relaxed);
        eprintln!(
            "{integration:?}: {sent} calls in {:?}, {} failed",
            started.elapsed(),
            failed.load(Ordering::Relaxed)
        );
        assert_eq!(failed.load(Ordering::Relaxed), 0, "{integration:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let reloads = t.counter("retryscope.config.reloads", &[("result", "ok")]);
        assert_eq!(reloads, u64::from(REWRITES), "{integration:?}: every rewrite was put in force");
        assert!(sent >= SECONDS * PER_SECOND / 2, "{integration:?}: only {sent} calls");
        let _ = std::fs::remove_file(&path);
    }
}

/// The file's `fallback = "name"` selects the fallback registered in code
/// under that name (no `fallback_for` in code): it answers a call of its
/// dependency that gave up, and after a reload that turns the kill switch on,
/// answers the one failed attempt with reason `kill_switch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_selects_a_fallback_registered_in_code_and_the_kill_switch_names_itself() {
    use bytes::Bytes;
    use retryscope::StopReason;
    use retryscope_config::Format;
    use retryscope_tower::FallbackReason;

    let with_switch = |enabled: bool| {
        format!(
            "[defaults]\nattempts = 2\nbackoff = {{ initial = \"1ms\", max = \"5ms\" }}\njitter = \"none\"\n\n\
             [dependencies.pay]\npath_prefix = \"/pay\"\nfallback = \"cached\"\nenabled = {enabled}\n"
        )
    };
    for integration in BOTH {
        let server = Server::start().await;
        let path = file(&format!("fallback-{integration:?}"), &with_switch(true));
        let config = ConfigHandle::builder(KnownNames::new().fallback("cached"))
            .file(&path)
            .build()
            .expect("the file loads");
        let setup = Setup::new(code_policy()).no_budget().no_breaker().config(config.clone()).fallback(
            "cached",
            |_: &retryscope_tower::FallbackContext<'_>| -> retryscope_tower::FallbackFuture {
                Box::pin(async { Ok(http::Response::new(Bytes::from_static(b"cached"))) })
            },
        );
        let client = integration.client(setup);

        server.script("/pay/charge", [Reply::status(503), Reply::status(503)]);
        let answer = client.send(Call::get(server.url("/pay/charge"))).await.expect("the fallback's answer");
        let marked = answer.fallback.clone().expect("marked as a fallback");
        assert_eq!(
            (marked.name(), marked.reason()),
            ("cached", FallbackReason::GaveUp(StopReason::AttemptsExhausted)),
            "{integration:?}"
        );
        assert_eq!(answer.text().await, "cached", "{integration:?}");
        assert_eq!(server.seen().len(), 2, "{integration:?}: the file's two attempts");

        // A dependency the file gives no fallback: the server's answer, as it came.
        server.script("/other", [Reply::status(503), Reply::status(503)]);
        let other = client.send(Call::get(server.url("/other"))).await.expect("the 503");
        assert_eq!((other.status, other.fallback.is_none()), (503, true), "{integration:?}");

        config.reload_from_str(&with_switch(false), Format::Toml).expect("a valid reload");
        let before = server.seen().len();
        server.script("/pay/charge", [Reply::status(503), Reply::status(503)]);
        let answer = client.send(Call::get(server.url("/pay/charge"))).await.expect("the fallback's answer");
        let marked = answer.fallback.clone().expect("marked as a fallback");
        assert_eq!(marked.reason(), FallbackReason::KillSwitch, "{integration:?}");
        assert_eq!(server.seen().len() - before, 1, "{integration:?}: one attempt under the kill switch");
        let _ = std::fs::remove_file(&path);
    }
}

/// A configuration whose retries wait `300ms`, long enough to reload the file
/// while a call waits; `marker` makes each text (and so its hash) its own.
fn slow_text(marker: u32) -> String {
    format!(
        "# version {marker}\n[defaults]\nattempts = 3\nbackoff = {{ initial = \"300ms\", max = \"300ms\" }}\n\
         jitter = \"none\"\n\n[dependencies.echo]\nservice = \"test.Echo\"\nattempts = 3\n"
    )
}

/// The values of `retryscope.config.hash` over retryscope's spans of the call
/// sent inside the root span `caller` (its attempt spans and operation span), how
/// many spans the call made, and the names of those without the attribute.
fn hashes_of(
    spans: &[opentelemetry_sdk::trace::SpanData],
    caller: &str,
) -> (std::collections::BTreeSet<String>, usize, Vec<String>) {
    use retryscope_test_support::telemetry::attr;
    let root = spans.iter().find(|s| s.name == caller).expect("the caller's span ended");
    let trace = root.span_context.trace_id();
    // retryscope's spans: the transport's own (h2's `FramedWrite::buffer`) are not the call's.
    let ours: Vec<_> = spans
        .iter()
        .filter(|s| s.span_context.trace_id() == trace && attr(s, "retryscope.dependency").is_some())
        .collect();
    let hashes = ours.iter().filter_map(|s| attr(s, "retryscope.config.hash")).collect();
    let without = ours
        .iter()
        .filter(|s| attr(s, "retryscope.config.hash").is_none())
        .map(|s| s.name.to_string())
        .collect();
    (hashes, ours.len(), without)
}

/// `retryscope.config.hash` on every span of a configured call — each attempt
/// span and the operation span — is the hash of the snapshot in force when
/// the call began: a reload while the call waits between its attempts changes
/// none of its spans, and the next call carries the new hash. A client built
/// in code (no `config`) puts no hash on its spans.
#[tokio::test]
async fn each_calls_spans_carry_the_hash_of_the_configuration_it_began_with() {
    use retryscope_config::Format;
    use retryscope_test_support::telemetry::Telemetry;
    use tracing::Instrument as _;

    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        let path = file(&format!("hash-{integration:?}"), &slow_text(1));
        let config = handle(&path);
        let first = config.snapshot().hash_str().to_string();
        let client = integration.client(
            Setup::new(code_policy())
                .meter(&t)
                .operation_spans()
                .no_budget()
                .no_breaker()
                .config(config.clone()),
        );
        server.script("/x", [Reply::status(503), Reply::status(503), Reply::ok("yes")]);
        let call = client.send(Call::get(server.url("/x"))).instrument(tracing::info_span!("call-1"));
        let reload = async {
            // The first attempt has failed; the call waits 300 ms for its second.
            tokio::time::sleep(Duration::from_millis(150)).await;
            config.reload_from_str(&slow_text(2), Format::Toml).expect("a valid reload").to_string()
        };
        let (answer, second) = tokio::join!(call, reload);
        assert_eq!(answer.expect("an answer").status, 200, "{integration:?}");
        assert_ne!(first, second, "two texts, two hashes");
        assert_eq!(config.snapshot().hash_str().as_ref(), second, "{integration:?}: the reload took");

        server.script("/x", [Reply::status(503), Reply::ok("yes")]);
        let answer = client.send(Call::get(server.url("/x"))).instrument(tracing::info_span!("call-2")).await;
        assert_eq!(answer.expect("an answer").status, 200, "{integration:?}");

        let spans = t.spans();
        // Three attempts and the operation span; then two attempts and the operation span.
        assert_eq!(hashes_of(&spans, "call-1"), ([first].into(), 4, vec![]), "{integration:?}");
        assert_eq!(hashes_of(&spans, "call-2"), ([second].into(), 3, vec![]), "{integration:?}");

        // Built in code: no hash on its spans.
        let plain = integration
            .client(Setup::new(code_policy()).meter(&t).operation_spans().no_budget().no_breaker());
        server.script("/x", [Reply::ok("yes")]);
        let answer = plain.send(Call::get(server.url("/x"))).instrument(tracing::info_span!("call-3")).await;
        assert_eq!(answer.expect("an answer").status, 200, "{integration:?}");
        let (hashes, spans, _) = hashes_of(&t.spans(), "call-3");
        assert_eq!((hashes.len(), spans), (0, 2), "{integration:?}: no hash on its two spans");
        let _ = std::fs::remove_file(&path);
    }
}

/// The same for the tower layer's gRPC mode (the only gRPC integration), on
/// a raw HTTP/2 gRPC server on 127.0.0.1: the file's `test.Echo` dependency
/// (matched by service) sets the attempts and backoff, the service config's
/// codes say UNAVAILABLE is retried; a reload while the call waits changes
/// none of its spans' hash.
#[tokio::test]
async fn each_grpc_calls_spans_carry_the_hash_of_the_configuration_it_began_with() {
    use retryscope_config::Format;
    use retryscope_test_support::telemetry::Telemetry;
    use tracing::Instrument as _;

    let t = Telemetry::install();
    let path = file("hash-grpc", &slow_text(1));
    let config = handle(&path);
    let first = config.snapshot().hash_str().to_string();
    let retry = echo_retry();
    let server = H2Server::start(vec![UNAVAILABLE, UNAVAILABLE, Answer::Ok("ok"), UNAVAILABLE]).await;
    let layer = RetryLayer::grpc(retry)
        .origin(server.uri())
        .meter(&t.meter)
        .operation_spans()
        .config(config.clone())
        .build();
    let mut client = EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()));

    let reload = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        config.reload_from_str(&slow_text(2), Format::Toml).expect("a valid reload").to_string()
    };
    let call = client.unary(echo("x")).instrument(tracing::info_span!("call-1"));
    let (answer, second) = tokio::join!(call, reload);
    assert_eq!(answer.expect("the third attempt answers").into_inner().message, "ok");
    assert_eq!(server.streams().len(), 3, "the file's three attempts");
    let answer = client.unary(echo("y")).instrument(tracing::info_span!("call-2")).await;
    assert_eq!(answer.expect("the second attempt answers").into_inner().message, "ok");

    let spans = t.spans();
    assert_eq!(hashes_of(&spans, "call-1"), ([first].into(), 4, vec![]));
    assert_eq!(hashes_of(&spans, "call-2"), ([second].into(), 3, vec![]));
    let _ = std::fs::remove_file(&path);
}

/// A tonic channel's calls find their file settings with their method and
/// keep them until the configuration changes (what saves a configured gRPC
/// call its per-call lookup): each reload is still taken by the very next
/// call — the kill switch, then the file that lifts it — with no wait and
/// no call in between.
#[tokio::test]
async fn a_channels_grpc_calls_take_each_reload_from_the_next_call_on() {
    use retryscope_config::Format;

    let path = file("grpc-each-reload", &echo_text(true));
    let config = handle(&path);
    let server = H2Server::start(vec![
        // The file's three attempts, twice: the second call is served from what the first found.
        UNAVAILABLE,
        UNAVAILABLE,
        Answer::Ok("one"),
        UNAVAILABLE,
        UNAVAILABLE,
        Answer::Ok("two"),
        // The kill switch: one attempt.
        UNAVAILABLE,
        // Lifted: three attempts again.
        UNAVAILABLE,
        UNAVAILABLE,
        Answer::Ok("four"),
    ])
    .await;
    let mut client = echo_channel(&server, config.clone());

    for (n, expected) in [(1, "one"), (2, "two")] {
        let answer = client.unary(echo("x")).await.expect("the third attempt answers");
        assert_eq!(answer.into_inner().message, expected);
        assert_eq!(server.streams().len(), 3 * n, "call {n}: the file's three attempts");
    }
    config.reload_from_str(&echo_text(false), Format::Toml).expect("a valid reload");
    let status = client.unary(echo("x")).await.expect_err("one attempt, answered UNAVAILABLE");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(server.streams().len(), 7, "the kill switch: the next call made one attempt");
    config.reload_from_str(&echo_text(true), Format::Toml).expect("a valid reload");
    let answer = client.unary(echo("x")).await.expect("the third attempt answers");
    assert_eq!(answer.into_inner().message, "four");
    assert_eq!(server.streams().len(), 10, "lifted: the next call made three attempts");
    let _ = std::fs::remove_file(&path);
}

/// A method the channel's service config does not name, given attempts by
/// the file: it retries UNAVAILABLE, as a request's own policy does. (The
/// file's three attempts retried no status at all: one stream, the caller
/// got the first UNAVAILABLE.)
#[tokio::test]
async fn the_files_policy_for_a_method_the_service_config_does_not_name_retries_unavailable() {
    let path = file("grpc-unnamed-method", &echo_text(true));
    let other_only = retryscope_tower::grpc::GrpcRetry::from_service_config(
        r#"{"methodConfig": [{"name": [{"service": "test.Other"}],
          "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
            "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#,
    )
    .expect("valid service config");
    let server = H2Server::start(vec![UNAVAILABLE, UNAVAILABLE, Answer::Ok("third")]).await;
    let layer = RetryLayer::grpc(other_only).origin(server.uri()).config(handle(&path)).build();
    let mut client = EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()));
    let answer = client.unary(echo("x")).await.expect("the third attempt answers");
    assert_eq!(answer.into_inner().message, "third");
    assert_eq!(server.streams().len(), 3, "the file's three attempts");
    let _ = std::fs::remove_file(&path);
}

/// The kill switch means one request on the wire: A6's transparent retry of
/// a stream the server refused unprocessed is a second one, so it stops it
/// too; lifted, the transparent retry is back.
#[tokio::test]
async fn the_kill_switch_stops_a6s_transparent_retry_too() {
    use retryscope_config::Format;

    let path = file("grpc-kill-transparent", &echo_text(false));
    let config = handle(&path);
    let refused = Answer::Reset(h2::Reason::REFUSED_STREAM);
    let server = H2Server::start(vec![refused.clone(), refused, Answer::Ok("sent again")]).await;
    let mut client = echo_channel(&server, config.clone());

    let status = client.unary(echo("x")).await.expect_err("refused, and not sent again");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(server.streams().len(), 1, "the kill switch: one request on the wire");
    config.reload_from_str(&echo_text(true), Format::Toml).expect("a valid reload");
    let answer = client.unary(echo("x")).await.expect("the transparent retry answers");
    assert_eq!(answer.into_inner().message, "sent again");
    assert_eq!(server.streams().len(), 3, "lifted: the refused stream was sent again");
    let _ = std::fs::remove_file(&path);
}

/// A service config that retries `test.Echo` five times and throttles with
/// two tokens: the first failure leaves one, half, and A6 retries only above
/// half.
fn two_tokens() -> retryscope_tower::grpc::GrpcRetry {
    retryscope_tower::grpc::GrpcRetry::from_service_config(
        r#"{"methodConfig": [{"name": [{"service": "test.Echo"}],
          "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
            "backoffMultiplier": 1, "retryableStatusCodes": ["UNAVAILABLE"]}}],
          "retryThrottling": {"maxTokens": 2, "tokenRatio": 0.1}}"#,
    )
    .expect("valid service config")
}

/// A file's budget meets A6's retry throttling. On a channel whose service
/// config throttles, the token bucket guards each server's calls, unless
/// the file writes a budget for their dependency, which replaces it for
/// them; the status a refusal ends a call with names the guard that
/// refused.
#[tokio::test]
async fn a_files_budget_replaces_a_throttled_channels_token_bucket_and_the_refusal_names_it() {
    let throttled = two_tokens();
    let cases = [
        ("bucket", "", "the retry throttling (token bucket) refused a retry"),
        // No retry at all: the file's budget, not the bucket, is asked.
        ("budget", "budget = { ratio = 0.0, min_per_second = 0 }\n", "the retry budget refused a retry"),
    ];
    for (name, budget, refused) in cases {
        let text = format!("[dependencies.echo]\nservice = \"test.Echo\"\nattempts = 3\n{budget}");
        let path = file(&format!("grpc-throttled-{name}"), &text);
        let server = H2Server::start(vec![UNAVAILABLE; 3]).await;
        let layer = RetryLayer::grpc(throttled.clone())
            .origin(server.uri())
            .config(handle(&path))
            .no_telemetry()
            .build();
        let mut client = EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()));
        let status = client.unary(echo("x")).await.expect_err("answered UNAVAILABLE");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{name}: {status:?}");
        assert!(status.message().contains(refused), "{name}: {status:?}");
        assert_eq!(server.streams().len(), 1, "{name}: the retry was refused");
        let _ = std::fs::remove_file(&path);
    }
}

/// With a budget of code's as well (`budget_per_dependency`), the channel's
/// token bucket is asked beside whichever budget applies — the file's, for a
/// dependency that writes one — and is not replaced: here both budgets allow
/// every retry, and the bucket (two tokens) still refuses the second
/// attempt; the message names both guards, since either may refuse.
#[tokio::test]
async fn beside_a_budget_of_codes_the_bucket_is_asked_whatever_budget_the_file_writes() {
    let throttled = two_tokens();
    let generous = || RetryBudget::builder().ratio(1.0).min_per_second(1_000).build().expect("valid budget");
    for (name, budget) in [("code", ""), ("file", "budget = { ratio = 1.0, min_per_second = 1000 }\n")] {
        let text = format!("[dependencies.echo]\nservice = \"test.Echo\"\nattempts = 3\n{budget}");
        let path = file(&format!("grpc-throttled-beside-{name}"), &text);
        let server = H2Server::start(vec![UNAVAILABLE; 3]).await;
        let layer = RetryLayer::grpc(throttled.clone())
            .origin(server.uri())
            .config(handle(&path))
            .budget_per_dependency(generous)
            .no_telemetry()
            .build();
        let mut client = EchoClient::new(layer.layer(Endpoint::from(server.uri()).connect_lazy()));
        let status = client.unary(echo("x")).await.expect_err("answered UNAVAILABLE");
        assert_eq!(status.code(), tonic::Code::Unavailable, "{name}: {status:?}");
        let refused = "the retry budget or retry throttling (token bucket) refused a retry";
        assert!(status.message().contains(refused), "{name}: {status:?}");
        assert_eq!(server.streams().len(), 1, "{name}: the bucket refused the retry both budgets allowed");
        let _ = std::fs::remove_file(&path);
    }
}

/// Where a file's policy meets a caller's `grpc-timeout`: the file names the
/// dependency (three attempts within 15 s), the caller gives the call 400 ms,
/// and the caller's deadline still bounds the call — on the wire, where each
/// attempt's `grpc-timeout` is what is left of the 400 ms, never the file's
/// 15 s — as it does for a layer built in code.
#[tokio::test]
async fn a_callers_grpc_timeout_bounds_a_configured_call() {
    let path = file(
        "grpc-timeout",
        "[dependencies.echo]\nservice = \"test.Echo\"\nattempts = 3\ndeadline = \"15s\"\n\
         backoff = { initial = \"1ms\", max = \"1ms\" }\njitter = \"none\"\n",
    );
    let config = handle(&path);
    let server = H2Server::start(vec![UNAVAILABLE, Answer::Ok("ok")]).await;
    let mut client = echo_channel(&server, config);
    let mut request = tonic::Request::new(echo("x"));
    request.set_timeout(Duration::from_millis(400));
    let answer = client.unary(request).await.expect("the retry answers");
    assert_eq!(answer.into_inner().message, "ok");
    let timeouts: Vec<u64> = server
        .streams()
        .iter()
        .map(|s| {
            let value = s.timeout.as_deref().expect("grpc-timeout on each attempt");
            value.strip_suffix('u').and_then(|n| n.parse().ok()).expect("microseconds")
        })
        .collect();
    assert_eq!(timeouts.len(), 2, "the file's retry");
    assert!(timeouts.iter().all(|&t| t <= 400_000), "the caller's 400 ms, not the file's 15 s: {timeouts:?}");
    assert!(timeouts[1] < timeouts[0], "the retry carries what is left: {timeouts:?}");
    let _ = std::fs::remove_file(&path);
}

/// reqwest's own `RequestBuilder::timeout` bounds a configured call as it
/// bounds one built in code: the file's ten attempts 150 ms apart and its
/// 15-s deadline do not outlast the caller's 400 ms. (A tower caller's limit
/// is its own `RetryOptions::policy`, which wins over the file:
/// `each_call_takes_its_dependencys_attempts_from_the_file`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_own_timeout_bounds_a_configured_reqwest_call() {
    let path = file(
        "reqwest-timeout",
        "[dependencies.slow]\npath_prefix = \"/slow\"\nattempts = 10\ndeadline = \"15s\"\n\
         backoff = { initial = \"150ms\", max = \"150ms\" }\njitter = \"none\"\n",
    );
    let server = Server::start().await;
    let client = common::Integration::Reqwest
        .client(Setup::new(code_policy()).no_budget().no_breaker().config(handle(&path)));
    server.script("/slow/x", std::iter::repeat_n(Reply::status(503), 100));
    let started = Instant::now();
    let answer = client.send(Call::get(server.url("/slow/x")).timeout(Duration::from_millis(400))).await;
    let took = started.elapsed();
    if let Ok(answer) = answer {
        assert_eq!(answer.status, 503, "the last answer, if any");
    }
    let attempts = server.seen().iter().filter(|s| s.path == "/slow/x").count();
    // 0, 150 and 300 ms fit in 400 ms; a fourth (450 ms) does not. Five
    // would be the builder's policy, ten the file's without the caller's limit.
    assert!((2..=3).contains(&attempts), "the file's retries within the caller's 400 ms: {attempts}");
    assert!(took < Duration::from_millis(1000), "the file's 15 s did not lengthen 400 ms: {took:?}");
    let _ = std::fs::remove_file(&path);
}

/// Where a channel's kept file settings meet a request's own policy: a call
/// with none takes the file's three attempts (and the method keeps them);
/// the next call, with its own five-attempt policy, makes five — a request's
/// own policy wins over the file — and under the kill switch one, whatever
/// it asks.
#[tokio::test]
async fn a_requests_own_policy_meets_a_channels_kept_file_settings() {
    use retryscope_config::Format;

    let path = file("grpc-own-policy", &echo_text(true));
    let config = handle(&path);
    let mut answers = vec![UNAVAILABLE, UNAVAILABLE, Answer::Ok("file")];
    answers.extend([UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, Answer::Ok("own")]);
    answers.push(UNAVAILABLE);
    let server = H2Server::start(answers).await;
    let mut client = echo_channel(&server, config.clone());
    let own = || {
        let mut request = tonic::Request::new(echo("x"));
        request.extensions_mut().insert(RetryOptions::new().policy(code_policy()));
        request
    };

    let answer = client.unary(echo("x")).await.expect("the file's third attempt answers");
    assert_eq!(answer.into_inner().message, "file");
    assert_eq!(server.streams().len(), 3, "the file's three attempts");
    let answer = client.unary(own()).await.expect("the request's fifth attempt answers");
    assert_eq!(answer.into_inner().message, "own");
    assert_eq!(server.streams().len(), 8, "the request's own five attempts");
    config.reload_from_str(&echo_text(false), Format::Toml).expect("a valid reload");
    let status = client.unary(own()).await.expect_err("one attempt, answered UNAVAILABLE");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(server.streams().len(), 9, "the kill switch caps the request's own policy to one");
    let _ = std::fs::remove_file(&path);
}

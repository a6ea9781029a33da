//! The guards, the body rule and idempotency keys of a retryscope-config
//! file, applied by a configured client (`config(handle)`) of both
//! integrations against a real HTTP server on 127.0.0.1. Each client's
//! builder has no budget, breaker or pacer of its own, and no body rule or
//! key generation, where the file's are under test: what the server sees
//! can only come from the file.

use bytes::Bytes;
use retryscope::{ErrorType, StopReason, Verdict};
use retryscope_config::{ConfigHandle, Format, KnownNames};
use retryscope_test_support::{Reply, Server};
use retryscope_tower::{BodyLimit, FallbackContext, FallbackFuture, FallbackReason, body_rule_fn};
use std::time::Duration;

mod common;

use common::{Answer, BOTH, Call, Setup, code_policy};

/// Quick retries for every dependency, then `rest`.
fn file_text(rest: &str) -> String {
    format!("[defaults]\nbackoff = {{ initial = \"1ms\", max = \"5ms\" }}\njitter = \"none\"\n\n{rest}")
}

fn handle(known: KnownNames, text: &str) -> ConfigHandle {
    let config = retryscope_config::Config::parse(text, Format::Toml, "guards.toml", &known).expect("valid");
    ConfigHandle::builder(known).config(config).build().expect("a handle")
}

fn cached(_: &FallbackContext<'_>) -> FallbackFuture {
    Box::pin(async { Ok(http::Response::new(Bytes::from_static(b"cached"))) })
}

/// A breaker from the file opens on a failing server and the file's
/// fallback answers while it is open; a reload that keeps the breaker's
/// settings (another key changed) keeps it open, one that changes them gives
/// a fresh, closed breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_from_the_file_opens_serves_the_fallback_and_survives_a_reload_that_keeps_it() {
    let breaker = |cool_down: &str, attempts: u32| {
        file_text(&format!(
            "[dependencies.pay]\npath_prefix = \"/pay\"\nattempts = {attempts}\nfallback = \"cached\"\n\
             breaker = {{ min_calls = 2, failure_ratio = 0.5, cool_down = \"{cool_down}\" }}\n"
        ))
    };
    for integration in BOTH {
        let server = Server::start().await;
        let config = handle(KnownNames::new().fallback("cached"), &breaker("60s", 1));
        let setup = Setup::new(code_policy())
            .no_budget()
            .no_breaker()
            .config(config.clone())
            .fallback("cached", cached);
        let client = integration.client(setup);
        server.script("/pay/charge", std::iter::repeat_n(Reply::status(503), 100));

        for _ in 0..2 {
            let answer = client.send(Call::get(server.url("/pay/charge"))).await.expect("the fallback");
            let marked = answer.fallback.clone().expect("a fallback");
            assert_eq!(
                marked.reason(),
                FallbackReason::GaveUp(StopReason::AttemptsExhausted),
                "{integration:?}"
            );
        }
        assert_eq!(server.seen().len(), 2, "{integration:?}: one attempt each, as the file says");
        let open = |why: &str| {
            let client = &client;
            let server = &server;
            let why = why.to_owned();
            async move {
                let before = server.seen().len();
                let answer = client.send(Call::get(server.url("/pay/charge"))).await.expect("the fallback");
                let marked = answer.fallback.clone().expect("a fallback");
                assert_eq!(
                    (marked.reason(), server.seen().len() - before),
                    (FallbackReason::GaveUp(StopReason::CircuitOpen), 0),
                    "{integration:?}: {why}"
                );
                assert_eq!(answer.text().await, "cached", "{integration:?}");
            }
        };
        open("two failures of two opened the file's breaker").await;

        // Another key changed, the breaker's settings kept: still open.
        config.reload_from_str(&breaker("60s", 2), Format::Toml).expect("a valid reload");
        open("the reload kept the breaker and its state").await;

        // The breaker's settings changed: a fresh one, closed.
        config.reload_from_str(&breaker("30s", 1), Format::Toml).expect("a valid reload");
        let before = server.seen().len();
        let answer = client.send(Call::get(server.url("/pay/charge"))).await.expect("the fallback");
        assert_eq!(
            (answer.fallback.map(|f| f.reason()), server.seen().len() - before),
            (Some(FallbackReason::GaveUp(StopReason::AttemptsExhausted)), 1),
            "{integration:?}: a fresh breaker lets the call through"
        );
    }
}

/// A budget from the file (no retries to spend) stops the retries of its
/// dependency; a dependency without one retries as the file says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_from_the_file_stops_retries() {
    let text = file_text(
        "[dependencies.tight]\npath_prefix = \"/tight\"\nattempts = 3\n\
         budget = { ratio = 0.0, min_per_second = 0 }\n\n\
         [dependencies.loose]\npath_prefix = \"/loose\"\nattempts = 3\n",
    );
    for integration in BOTH {
        let server = Server::start().await;
        let client = integration
            .client(Setup::new(code_policy()).no_budget().config(handle(KnownNames::new(), &text)));
        server.script("/tight", std::iter::repeat_n(Reply::status(503), 10));
        server.script("/loose", std::iter::repeat_n(Reply::status(503), 10));
        let tight = client.get(&server.url("/tight")).await;
        let loose = client.get(&server.url("/loose")).await;
        let seen = server.seen();
        let count = |p: &str| seen.iter().filter(|s| s.path == p).count();
        assert_eq!((count("/tight"), count("/loose")), (1, 3), "{integration:?}: {tight:?} {loose:?}");
        assert_eq!(tight, Answer::Status(503), "{integration:?}: the budget's refusal gives the last answer");
    }
}

/// A pacer from the file learns a 429's `Retry-After` and holds the next call
/// of its dependency; the builder has none, so another dependency is not held.
#[tokio::test(start_paused = true)]
async fn a_pacer_from_the_file_holds_the_next_call_after_a_retry_after() {
    let text = file_text(
        "attempts = 1\ndeadline = \"15s\"\n\n[dependencies.paced]\npath_prefix = \"/paced\"\npacer = {}\n",
    );
    for integration in BOTH {
        let server = Server::start().await;
        let client = integration.client(
            Setup::new(code_policy())
                .no_budget()
                .no_breaker()
                .no_pacer()
                .config(handle(KnownNames::new(), &text)),
        );
        server.script("/paced", [Reply::with_header(429, "retry-after", "2")]);
        server.script("/free", [Reply::with_header(429, "retry-after", "2")]);
        assert_eq!(client.get(&server.url("/paced")).await, Answer::Status(429), "{integration:?}");
        assert_eq!(client.get(&server.url("/free")).await, Answer::Status(429), "{integration:?}");

        let start = tokio::time::Instant::now();
        assert_eq!(client.get(&server.url("/free")).await, Answer::Status(200), "{integration:?}");
        assert!(start.elapsed() < Duration::from_millis(10), "{integration:?}: no pacer, no hold");
        let start = tokio::time::Instant::now();
        assert_eq!(client.get(&server.url("/paced")).await, Answer::Status(200), "{integration:?}");
        let held = start.elapsed();
        assert!(held >= Duration::from_secs(2), "{integration:?}: held {held:?}");
        assert!(held <= Duration::from_millis(2_400 + 10), "{integration:?}: held {held:?}");
    }
}

const TRY_AGAIN: ErrorType = ErrorType::Kind("try_again");

/// The file's `body_rule = "name"` selects the rule registered in code under
/// that name, and its `idempotency_keys = true` gives a POST a key — the
/// same on every attempt — which makes it retryable; a dependency that
/// writes neither gets neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_rule_and_idempotency_keys_from_the_file_reach_the_server() {
    let text = file_text(
        "attempts = 3\n\n[dependencies.orders]\npath_prefix = \"/orders\"\n\
         body_rule = \"try_again\"\nidempotency_keys = true\n",
    );
    let try_again = || {
        body_rule_fn(
            |_, _| true,
            |_, _, body: &[u8]| {
                body.windows(9).any(|w| w == b"try again").then_some(Verdict::retryable(TRY_AGAIN))
            },
        )
    };
    for integration in BOTH {
        let server = Server::start().await;
        let known = KnownNames::new().body_rule("try_again");
        let limit = BodyLimit::new(1024).expect("a valid limit");
        let client = integration.client(
            Setup::new(code_policy()).body_rule("try_again", limit, try_again()).config(handle(known, &text)),
        );
        server.script("/orders", [Reply::ok("try again"), Reply::status(503), Reply::ok("placed")]);
        server.script("/plain", [Reply::ok("try again"), Reply::status(503)]);

        let orders = client.send(Call::post(server.url("/orders")).body("order")).await.expect("an answer");
        assert_eq!(orders.status, 200, "{integration:?}");
        assert_eq!(orders.text().await, "placed", "{integration:?}: the body rule retried the first 200");
        let plain = client.send(Call::post(server.url("/plain")).body("order")).await.expect("an answer");
        assert_eq!(plain.text().await, "try again", "{integration:?}: no body rule, no key, one attempt");

        let seen = server.seen();
        let keys = |p: &str| -> Vec<Option<String>> {
            seen.iter().filter(|s| s.path == p).map(|s| s.headers.get("idempotency-key").cloned()).collect()
        };
        let orders = keys("/orders");
        assert_eq!(orders.len(), 3, "{integration:?}: three attempts, the key making the POST retryable");
        let first = orders[0].clone().expect("a generated key");
        assert!(first.len() == 38 && first.starts_with('"'), "{integration:?}: a quoted UUID: {first}");
        assert!(orders.iter().all(|k| k.as_deref() == Some(first.as_str())), "{integration:?}: {orders:?}");
        assert_eq!(keys("/plain"), vec![None], "{integration:?}");
    }
}

/// A dependency the file names but gives no guard key still has one set of
/// guards, made by the builder's factories and kept under its name: a
/// breaker opened by failures on one host refuses its calls to another,
/// while a call no dependency matches keeps the builder's per-host breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_dependency_without_guard_keys_has_one_set_of_the_builders_guards() {
    use retryscope::CircuitBreaker;
    use retryscope_test_support::telemetry::Telemetry;
    use std::collections::BTreeSet;

    let text = file_text("[dependencies.search]\npath_prefix = \"/search\"\nattempts = 1\n");
    let breaker = || {
        CircuitBreaker::builder()
            .min_calls(2)
            .failure_ratio(0.5)
            .cool_down(Duration::from_secs(60))
            .build()
            .expect("valid settings")
    };
    for integration in BOTH {
        let t = Telemetry::install();
        let (a, b) = (Server::start().await, Server::start().await);
        let setup = Setup::new(code_policy())
            .meter(&t)
            .no_budget()
            .breaker_per_dependency(breaker)
            .config(handle(KnownNames::new(), &text));
        let client = integration.client(setup);
        a.script("/search/q", std::iter::repeat_n(Reply::status(503), 2));
        for _ in 0..2 {
            assert_eq!(client.get(&a.url("/search/q")).await, Answer::Status(503), "{integration:?}");
        }
        let other_host = client.get(&b.url("/search/q")).await;
        assert!(
            matches!(other_host, Answer::GaveUp(StopReason::CircuitOpen, _)),
            "{integration:?}: `search`'s one breaker opened on host a refuses host b: {other_host:?}"
        );
        assert_eq!(b.seen().len(), 0, "{integration:?}: nothing sent while open");
        assert_eq!(client.get(&b.url("/other")).await, Answer::Status(200), "{integration:?}");
        assert_eq!(b.seen().len(), 1, "{integration:?}: no dependency matched: host b's own breaker");

        let host_b = format!("127.0.0.1:{}", b.addr.port());
        let (breakers, _) = t.series("retryscope.breaker.state", "retryscope.dependency");
        assert_eq!(breakers, BTreeSet::from(["search".to_owned(), host_b]), "{integration:?}");
        assert_eq!(t.requests("search"), 3, "{integration:?}: its calls counted under the file's name");
    }
}

/// The kill switch and a breaker from the file together: each call makes
/// its first attempt only, and those failures still open the breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_and_a_breaker_from_the_file_apply_together() {
    let text = file_text(
        "[dependencies.pay]\npath_prefix = \"/pay\"\nattempts = 3\nenabled = false\n\
         breaker = { min_calls = 2, failure_ratio = 0.5, cool_down = \"60s\" }\n",
    );
    for integration in BOTH {
        let server = Server::start().await;
        let client = integration.client(
            Setup::new(code_policy()).no_budget().no_breaker().config(handle(KnownNames::new(), &text)),
        );
        server.script("/pay", std::iter::repeat_n(Reply::status(503), 10));
        assert_eq!(client.get(&server.url("/pay")).await, Answer::Status(503), "{integration:?}");
        assert_eq!(client.get(&server.url("/pay")).await, Answer::Status(503), "{integration:?}");
        assert_eq!(server.seen().len(), 2, "{integration:?}: first attempts only");
        let third = client.get(&server.url("/pay")).await;
        assert!(
            matches!(third, Answer::GaveUp(StopReason::CircuitOpen, _)),
            "{integration:?}: the breaker opened: {third:?}"
        );
        assert_eq!(server.seen().len(), 2, "{integration:?}: nothing sent while open");
    }
}

/// Hedging and a budget from the file together: copies beyond the first are
/// charged to the budget, so an empty one sends none; without a budget, the
/// same hedging sends its copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hedging_and_a_budget_from_the_file_apply_together() {
    let text = file_text(
        "[dependencies.broke]\npath_prefix = \"/broke\"\nhedging = { max_copies = 3, delay = \"20ms\" }\n\
         budget = { ratio = 0.0, min_per_second = 0 }\n\n\
         [dependencies.rich]\npath_prefix = \"/rich\"\nhedging = { max_copies = 3, delay = \"20ms\" }\n",
    );
    for integration in BOTH {
        let server = Server::start().await;
        let client = integration
            .client(Setup::new(code_policy()).no_budget().config(handle(KnownNames::new(), &text)));
        let slow = || std::iter::repeat_n(Reply::ok("slow").after(Duration::from_millis(300)), 3);
        server.script("/broke", slow());
        server.script("/rich", slow());
        assert_eq!(client.get(&server.url("/broke")).await, Answer::Status(200), "{integration:?}");
        assert_eq!(client.get(&server.url("/rich")).await, Answer::Status(200), "{integration:?}");
        let seen = server.seen();
        let count = |p: &str| seen.iter().filter(|s| s.path == p).count();
        assert_eq!((count("/broke"), count("/rich")), (1, 3), "{integration:?}");
    }
}

/// The gauges report the file's guards: a named dependency's under its name
/// in the file (as its calls are counted), the defaults' per server; a
/// dependency a reload removes is dropped, and reports no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauges_report_the_files_guards_and_forget_a_removed_dependency() {
    use retryscope_test_support::telemetry::Telemetry;
    use std::collections::BTreeSet;

    let with_pay = file_text(
        "attempts = 1\nbudget = { ratio = 0.1 }\n\n[dependencies.pay]\npath_prefix = \"/pay\"\n\
         breaker = { min_calls = 5 }\n",
    );
    let without_pay = file_text("attempts = 1\nbudget = { ratio = 0.1 }\n");
    for integration in BOTH {
        let t = Telemetry::install();
        let server = Server::start().await;
        let config = handle(KnownNames::new(), &with_pay);
        let client = integration
            .client(Setup::new(code_policy()).meter(&t).no_budget().no_breaker().config(config.clone()));
        assert_eq!(client.get(&server.url("/pay/x")).await, Answer::Status(200), "{integration:?}");
        assert_eq!(client.get(&server.url("/other")).await, Answer::Status(200), "{integration:?}");
        let host = format!("127.0.0.1:{}", server.addr.port());
        let (budgets, _) = t.series("retryscope.budget.available", "retryscope.dependency");
        assert_eq!(budgets, BTreeSet::from(["pay".to_owned(), host.clone()]), "{integration:?}");
        let (breakers, _) = t.series("retryscope.breaker.state", "retryscope.dependency");
        assert_eq!(breakers, BTreeSet::from(["pay".to_owned()]), "{integration:?}: no breaker from code");
        assert_eq!(t.requests("pay"), 1, "{integration:?}: the call counted under the file's name");

        config.reload_from_str(&without_pay, Format::Toml).expect("a valid reload");
        assert_eq!(client.get(&server.url("/pay/x")).await, Answer::Status(200), "{integration:?}");
        let (budgets, _) = t.series("retryscope.budget.available", "retryscope.dependency");
        assert_eq!(budgets, BTreeSet::from([host.clone()]), "{integration:?}: `pay` dropped");
        let (_, breakers) = t.series("retryscope.breaker.state", "retryscope.dependency");
        assert_eq!(breakers, 0, "{integration:?}");
    }
}

/// A dependency the file names gets the builder's own guards for the keys
/// the file does not write, beside the file's: the builder's concurrency
/// limit (one slot, no wait) holds a dependency whose breaker comes from
/// the file, and the builder's `no_breaker()` does not take the file's
/// breaker away. The file's set is a copy of the builder's template with
/// the file's keys changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_dependency_keeps_the_builders_guards_for_the_keys_the_file_does_not_write() {
    use retryscope::overload::{Aimd, ConcurrencyLimiter};
    let text = file_text(
        "[dependencies.pay]\npath_prefix = \"/pay\"\nattempts = 1\n\
         breaker = { min_calls = 1, failure_ratio = 0.5, cool_down = \"60s\" }\n",
    );
    for integration in BOTH {
        let server = Server::start().await;
        let one_slot = || {
            let one = Aimd::builder().initial_limit(1).min_limit(1).max_limit(1).build().expect("valid");
            ConcurrencyLimiter::new(one)
        };
        let setup = Setup::new(code_policy())
            .no_budget()
            .no_breaker()
            .concurrency_limit_per_dependency(one_slot)
            .config(handle(KnownNames::new(), &text));
        let client = integration.client(setup);
        server.script("/pay/slow", [Reply::status(200).after(Duration::from_millis(1500))]);

        // The builder's limit: a second call while the first holds the one slot.
        let (slow_url, second_url) = (server.url("/pay/slow"), server.url("/pay/second"));
        let (slow, second) = tokio::join!(client.get(&slow_url), async {
            // Long enough for the first to hold its slot on a loaded machine,
            // well before its answer comes.
            tokio::time::sleep(Duration::from_millis(300)).await;
            client.get(&second_url).await
        });
        assert_eq!(slow, Answer::Status(200), "{integration:?}");
        assert!(
            matches!(second, Answer::GaveUp(StopReason::ConcurrencyLimited { limit: 1, .. }, None)),
            "{integration:?}: the builder's limit holds the file's dependency: {second:?}"
        );
        assert_eq!(server.seen().iter().filter(|s| s.path == "/pay/second").count(), 0, "{integration:?}");

        // The file's breaker, though the builder has none: one failure opens it.
        server.script("/pay/down", [Reply::status(503)]);
        assert_eq!(client.get(&server.url("/pay/down")).await, Answer::Status(503), "{integration:?}");
        let before = server.seen().len();
        let refused = client.get(&server.url("/pay/down")).await;
        assert!(
            matches!(refused, Answer::GaveUp(StopReason::CircuitOpen, _)),
            "{integration:?}: the file's breaker is open: {refused:?}"
        );
        assert_eq!(server.seen().len(), before, "{integration:?}: an open breaker sends nothing");
    }
}

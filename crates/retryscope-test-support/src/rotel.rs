//! A real OpenTelemetry collector for over-the-wire tests: rotel-agent on free
//! loopback ports, printing everything it receives.
//!
//! Shared by the otel crate's tests and the integrations' README tests.
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long to wait for the collector to listen and for data to show up.
const PATIENCE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

/// The rotel-agent binary named by `RETRYSCOPE_ROTEL`. Without it the test
/// says it was skipped — except under CI, which installs rotel and must never
/// pass a test without running it.
pub fn binary() -> Option<PathBuf> {
    crate::external::required("RETRYSCOPE_ROTEL", "path to rotel-agent").map(PathBuf::from)
}

/// A rotel-agent process on free loopback ports, killed on drop.
pub struct Collector {
    child: Child,
    output: PathBuf,
    pid_file: PathBuf,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
}

impl Collector {
    pub fn start(binary: &Path, tag: &str) -> Self {
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

    pub fn printed(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// Polls the collector's output until it holds every needle.
    pub fn wait_for(&self, needles: &[&str]) -> Result<String, String> {
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

/// A span as rotel's detailed debug log printed it.
#[derive(Debug, Clone)]
pub struct PrintedSpan {
    pub trace_id: String,
    /// Empty for a root span.
    pub parent_id: String,
    pub id: String,
    pub name: String,
    /// `SPAN_KIND_CLIENT`, `SPAN_KIND_INTERNAL`, …
    pub kind: String,
    /// The attribute lines, `key: Value(..)`, as printed.
    pub attributes: Vec<String>,
}

impl PrintedSpan {
    /// The printed value of attribute `key` (`Int(2)`, `Str(x)`), if any.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.iter().find_map(|a| a.strip_prefix(key)?.strip_prefix(": "))
    }
}

/// Every span in rotel's detailed output.
pub fn spans(printed: &str) -> Vec<PrintedSpan> {
    printed
        .split("Span #")
        .skip(1)
        .filter_map(|block| {
            // A block ends where the next section (a scope, a resource) begins.
            let block = block.split("ScopeSpans #").next().unwrap_or(block);
            let block = block.split("ResourceSpans #").next().unwrap_or(block);
            let field = |prefix: &str| {
                block.lines().find_map(|l| l.trim().strip_prefix(prefix)).map(|v| v.trim().to_owned())
            };
            let attributes = block
                .lines()
                .skip_while(|l| !l.starts_with("Attributes:"))
                .skip(1)
                .take_while(|l| l.trim_start().starts_with("->"))
                .map(|l| l.trim_start().trim_start_matches("->").trim().to_owned())
                .collect();
            Some(PrintedSpan {
                trace_id: field("Trace ID       :")?,
                parent_id: field("Parent ID      :").unwrap_or_default(),
                id: field("ID             :")?,
                name: field("Name           :")?,
                kind: field("Kind           :")?,
                attributes,
            })
        })
        .collect()
}

//! What a fault does to one call, and how a spec names it.

use super::error::FaultSpecError;
use http::StatusCode;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One fault: what the injecting layer does instead of (or to) the real call.
///
/// | kind | the layer | the retry layer above sees |
/// |---|---|---|
/// | [`Status`](Self::Status) | answers with the status (and `Retry-After`), the call never sent | that response |
/// | [`Grpc`](Self::Grpc) | answers a Trailers-Only gRPC status | that status |
/// | [`Refused`](Self::Refused) | fails with a refused connection | `connect`, nothing sent |
/// | [`Reset`](Self::Reset) | fails with a reset connection | `reset`, maybe sent |
/// | [`Stall`](Self::Stall) | never answers | the attempt timeout |
/// | [`Latency`](Self::Latency) | waits, then sends the call | the real answer, later |
/// | [`SlowBody`](Self::SlowBody) | sends the call, delays every body frame | the real answer, slowly |
/// | [`BrokenBody`](Self::BrokenBody) | sends the call, fails its body with a reset | the head, then a body error |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultKind {
    /// An HTTP status, with a `Retry-After` in seconds when set.
    Status {
        /// The status answered.
        status: StatusCode,
        /// `Retry-After`, in whole seconds.
        retry_after: Option<Duration>,
    },
    /// A gRPC status code (0 to 16), as a Trailers-Only answer.
    Grpc(u8),
    /// The connection is refused: nothing reaches the server.
    Refused,
    /// The connection is reset before an answer.
    Reset,
    /// No answer at all, until the attempt's timeout cuts it.
    Stall,
    /// The call is sent this much later.
    Latency(Duration),
    /// Every frame of the real body arrives this much later.
    SlowBody(Duration),
    /// The real head arrives, then its body fails with a reset.
    BrokenBody,
}

impl FaultKind {
    /// `retryscope.fault.injected` (and `retryscope.fault.kind`) of [`Status`](Self::Status).
    pub const STATUS: &'static str = "status";
    /// … of [`Grpc`](Self::Grpc).
    pub const GRPC: &'static str = "grpc_status";
    /// … of [`Refused`](Self::Refused).
    pub const REFUSED: &'static str = "refused";
    /// … of [`Reset`](Self::Reset).
    pub const RESET: &'static str = "reset";
    /// … of [`Stall`](Self::Stall).
    pub const STALL: &'static str = "stall";
    /// … of [`Latency`](Self::Latency).
    pub const LATENCY: &'static str = "latency";
    /// … of [`SlowBody`](Self::SlowBody).
    pub const SLOW_BODY: &'static str = "slow_body";
    /// … of [`BrokenBody`](Self::BrokenBody).
    pub const BROKEN_BODY: &'static str = "broken_body";
    /// Every label value, for dashboards and tests.
    pub const ALL: [&'static str; 8] = [
        Self::STATUS,
        Self::GRPC,
        Self::REFUSED,
        Self::RESET,
        Self::STALL,
        Self::LATENCY,
        Self::SLOW_BODY,
        Self::BROKEN_BODY,
    ];

    /// The kind as telemetry labels it: bounded, one of [`ALL`](Self::ALL).
    pub const fn label(self) -> &'static str {
        match self {
            Self::Status { .. } => Self::STATUS,
            Self::Grpc(_) => Self::GRPC,
            Self::Refused => Self::REFUSED,
            Self::Reset => Self::RESET,
            Self::Stall => Self::STALL,
            Self::Latency(_) => Self::LATENCY,
            Self::SlowBody(_) => Self::SLOW_BODY,
            Self::BrokenBody => Self::BROKEN_BODY,
        }
    }

    /// A 503.
    pub const fn unavailable() -> Self {
        Self::Status { status: StatusCode::SERVICE_UNAVAILABLE, retry_after: None }
    }

    /// A 429 that asks for `retry_after` (whole seconds are sent).
    pub const fn too_many_requests(retry_after: Duration) -> Self {
        Self::Status { status: StatusCode::TOO_MANY_REQUESTS, retry_after: Some(retry_after) }
    }

    /// Whether the layer answers without sending the call.
    pub const fn answers_instead(self) -> bool {
        matches!(self, Self::Status { .. } | Self::Grpc(_) | Self::Refused | Self::Reset | Self::Stall)
    }
}

/// The highest gRPC status code (`UNAUTHENTICATED`).
const MAX_GRPC_CODE: u8 = 16;
/// The longest delay a spec may ask for: a fault is for tests and game days,
/// and a typo (`latency=200s`) should not hold calls for hours.
pub const MAX_FAULT_DELAY: Duration = Duration::from_secs(600);

/// Parses the kinds of a spec:
///
/// - `503`, `500`, any status 100–599; `429+retry-after=20` adds `Retry-After: 20`;
/// - `grpc=14`, a gRPC code 0–16;
/// - `refused`, `reset`, `stall`, `broken-body`;
/// - `latency=200ms`, `slow-body=50ms` (units `ms` or `s`, at most 600 s).
impl FromStr for FaultKind {
    type Err = FaultSpecError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || FaultSpecError::Kind(text.to_owned());
        let (name, value) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (text, None),
        };
        let kind = match (name, value) {
            ("refused", None) => Self::Refused,
            ("reset", None) => Self::Reset,
            ("stall", None) => Self::Stall,
            ("broken-body", None) => Self::BrokenBody,
            ("latency", Some(delay)) => Self::Latency(parse_delay(delay).ok_or_else(bad)?),
            ("slow-body", Some(delay)) => Self::SlowBody(parse_delay(delay).ok_or_else(bad)?),
            ("grpc", Some(code)) => {
                Self::Grpc(code.parse().ok().filter(|c| *c <= MAX_GRPC_CODE).ok_or_else(bad)?)
            }
            (status, None) => parse_status(status).ok_or_else(bad)?,
            (status, Some(seconds)) => {
                // `429+retry-after=20`: the `=` split it after `retry-after`.
                let status = status.strip_suffix("+retry-after").ok_or_else(bad)?;
                let Self::Status { status, .. } = parse_status(status).ok_or_else(bad)? else {
                    return Err(bad());
                };
                let seconds: u64 = seconds.parse().map_err(|_| bad())?;
                let retry_after = Duration::from_secs(seconds);
                if retry_after > MAX_FAULT_DELAY {
                    return Err(bad());
                }
                Self::Status { status, retry_after: Some(retry_after) }
            }
        };
        Ok(kind)
    }
}

fn parse_status(text: &str) -> Option<FaultKind> {
    if text.len() != 3 {
        return None;
    }
    // `StatusCode` takes up to 999; HTTP defines classes 1xx to 5xx only.
    let status = StatusCode::from_bytes(text.as_bytes()).ok().filter(|s| s.as_u16() < 600)?;
    Some(FaultKind::Status { status, retry_after: None })
}

fn parse_delay(text: &str) -> Option<Duration> {
    let delay = if let Some(ms) = text.strip_suffix("ms") {
        Duration::from_millis(ms.parse().ok()?)
    } else {
        Duration::from_secs(text.strip_suffix('s')?.parse().ok()?)
    };
    (delay <= MAX_FAULT_DELAY).then_some(delay)
}

/// The spec form, which [`FromStr`] reads back.
impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Status { status, retry_after: None } => write!(f, "{}", status.as_u16()),
            Self::Status { status, retry_after: Some(after) } => {
                write!(f, "{}+retry-after={}", status.as_u16(), after.as_secs())
            }
            Self::Grpc(code) => write!(f, "grpc={code}"),
            Self::Refused => f.write_str("refused"),
            Self::Reset => f.write_str("reset"),
            Self::Stall => f.write_str("stall"),
            Self::Latency(delay) => write!(f, "latency={}ms", delay.as_millis()),
            Self::SlowBody(delay) => write!(f, "slow-body={}ms", delay.as_millis()),
            Self::BrokenBody => f.write_str("broken-body"),
        }
    }
}

//! The errors of fault injection: a spec that does not parse, and the
//! transport failure an injected fault stands for.

use super::kind::FaultKind;
use std::error::Error as StdError;
use std::fmt;
use std::io;

/// A fault spec (or header) that does not parse: which part.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FaultSpecError {
    /// Not a kind [`FaultKind`]'s `FromStr` knows.
    Kind(String),
    /// Not a percentage from 0 to 100.
    Rate(String),
    /// Not `KIND@PERCENT[@DEPENDENCY][/ROUTE]`.
    Rule(String),
}

impl fmt::Display for FaultSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kind(kind) => write!(
                f,
                "unknown fault {kind:?}: expected a status (503, 429+retry-after=20), grpc=CODE, refused, reset, stall, latency=DURATION, slow-body=DURATION or broken-body"
            ),
            Self::Rate(rate) => write!(f, "fault rate {rate:?} is not a percentage from 0 to 100"),
            Self::Rule(rule) => write!(f, "fault rule {rule:?} is not KIND@PERCENT[@DEPENDENCY][/ROUTE]"),
        }
    }
}

impl StdError for FaultSpecError {}

/// The failure of an attempt a [`Refused`](FaultKind::Refused), a
/// [`Reset`](FaultKind::Reset) or a [`BrokenBody`](FaultKind::BrokenBody)
/// fault replaced. Its source is the `io::Error` the real failure carries
/// (`ConnectionRefused`, `ConnectionReset`), so classifiers that walk the
/// source chain judge it as they judge the real one; a refusal also proves
/// that nothing was sent, as a real connect failure does.
#[derive(Debug)]
pub struct InjectedFault {
    kind: FaultKind,
    io: io::Error,
}

impl InjectedFault {
    /// The failure `kind` stands for.
    pub fn new(kind: FaultKind) -> Self {
        let io = match kind {
            FaultKind::Refused => io::ErrorKind::ConnectionRefused,
            _ => io::ErrorKind::ConnectionReset,
        };
        Self { kind, io: io::Error::from(io) }
    }

    /// The fault injected.
    pub const fn kind(&self) -> FaultKind {
        self.kind
    }

    /// Whether it stands for a refused connection: nothing was sent.
    pub(crate) fn refused(&self) -> bool {
        self.kind == FaultKind::Refused
    }
}

impl fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "injected fault ({})", self.kind)
    }
}

impl StdError for InjectedFault {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.io)
    }
}

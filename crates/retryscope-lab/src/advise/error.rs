//! Why `advise` wrote nothing: each refusal names what is missing or wrong,
//! so that no recommendation is ever made from nothing.

use std::fmt;

/// A refusal of `retryscope advise`.
#[derive(Debug)]
pub enum AdviseError {
    /// A command-line value that cannot be read (`--range`, `--deadline`, …).
    Argument {
        /// The flag.
        flag: &'static str,
        /// Why.
        why: String,
    },
    /// Prometheus did not answer (refused, timed out, not HTTP).
    Unreachable {
        /// The URL asked.
        url: String,
        /// The client's error.
        source: reqwest::Error,
    },
    /// Prometheus answered with an error for a query.
    Query {
        /// The PromQL sent.
        query: String,
        /// The HTTP status.
        status: u16,
        /// Prometheus's own error text (bounded).
        error: String,
    },
    /// An answer larger than [`super::prom::MAX_RESPONSE_BYTES`].
    TooLarge {
        /// The PromQL sent.
        query: String,
        /// The cap.
        limit: usize,
    },
    /// An answer that is not the HTTP API's JSON.
    Malformed {
        /// The PromQL sent.
        query: String,
        /// What was wrong.
        why: String,
    },
    /// A series the advice needs is not in the range.
    Missing {
        /// The series (`retryscope_requests_total`).
        metric: &'static str,
        /// The selector and range it was looked for in.
        selector: String,
        /// The dependency it is missing for, when others have it.
        dependency: Option<String>,
        /// What the selector does match (retryscope series, by name), to tell
        /// "matches nothing" from "renamed".
        matched: Vec<String>,
    },
    /// A value no service can have observed (NaN, negative, above a day).
    Absurd {
        /// The series.
        metric: &'static str,
        /// The dependency.
        dependency: String,
        /// The value read.
        value: f64,
        /// Why it is refused.
        why: &'static str,
    },
    /// More dependencies than one file may name.
    TooManyDependencies {
        /// How many the selector matched.
        found: usize,
        /// The cap (`retryscope_config::MAX_DEPENDENCIES`).
        limit: usize,
    },
    /// The configuration in force (`--config`) or the written file was refused.
    Config(retryscope_config::ConfigError),
    /// The configuration in force could not be read as TOML.
    InForce {
        /// The file.
        path: String,
        /// The parser's error.
        source: toml::de::Error,
    },
    /// Writing the file, or starting the runtime.
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

impl fmt::Display for AdviseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Argument { flag, why } => write!(f, "{flag}: {why}"),
            Self::Unreachable { url, .. } => write!(f, "Prometheus does not answer at {url}"),
            Self::Query { query, status, error } => {
                write!(f, "Prometheus refused the query `{query}` (HTTP {status}): {error}")
            }
            Self::TooLarge { query, limit } => {
                write!(
                    f,
                    "Prometheus's answer to `{query}` is over {limit} bytes: narrow the selector or the range"
                )
            }
            Self::Malformed { query, why } => {
                write!(f, "Prometheus's answer to `{query}` is not the HTTP API's JSON: {why}")
            }
            Self::Missing { metric, selector, dependency, matched } => {
                write!(f, "no {metric}{selector}")?;
                if let Some(dependency) = dependency {
                    write!(f, " for dependency {dependency:?}")?;
                }
                if matched.is_empty() {
                    write!(f, ": the selector matches no retryscope series in the range")
                } else {
                    write!(
                        f,
                        ": the selector matches {} but not {metric} (renamed, or not exported?)",
                        matched.join(", ")
                    )
                }
            }
            Self::Absurd { metric, dependency, value, why } => {
                write!(
                    f,
                    "{metric} of dependency {dependency:?} is {value}: {why}; nothing recommended from it"
                )
            }
            Self::TooManyDependencies { found, limit } => write!(
                f,
                "the selector matches {found} dependencies, more than the {limit} one file may name: narrow it"
            ),
            Self::Config(error) => write!(f, "{error}"),
            Self::InForce { path, .. } => write!(f, "{path}: not a TOML configuration"),
            Self::Io { what, .. } => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for AdviseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Unreachable { source, .. } => Some(source),
            Self::InForce { source, .. } => Some(source),
            Self::Io { source, .. } => Some(source),
            Self::Config(error) => error.source(),
            _ => None,
        }
    }
}

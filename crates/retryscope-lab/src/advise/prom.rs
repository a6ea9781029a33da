//! The reader: Prometheus's HTTP API (`/api/v1/query`, `/api/v1/query_range`),
//! bounded in time and in size, since the server is not ours to trust.

use super::error::AdviseError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The most bytes one answer may hold: a selector that matches far more than a
/// service's series would otherwise be read into memory whole.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// How long one query may take, connect included.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long connecting may take: an address nothing listens on fails fast.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest Prometheus error text kept in a refusal.
const MAX_ERROR_TEXT: usize = 500;

/// One series of an instant query: its labels and its value.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The labels (no `__name__` after an aggregation).
    pub labels: BTreeMap<String, String>,
    /// The value; NaN and infinities as Prometheus wrote them.
    pub value: f64,
}

/// One series of a range query: its labels and its points, oldest first.
#[derive(Debug, Clone)]
pub struct Series {
    /// The labels.
    pub labels: BTreeMap<String, String>,
    /// `(unix seconds, value)`.
    pub points: Vec<(f64, f64)>,
}

/// A Prometheus server, read through its HTTP API.
#[derive(Debug, Clone)]
pub struct Prometheus {
    base: String,
    client: reqwest::Client,
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "lowercase")]
enum Data {
    Vector(Vec<VectorItem>),
    Matrix(Vec<MatrixItem>),
    Scalar((f64, String)),
}

#[derive(Deserialize)]
struct VectorItem {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

#[derive(Deserialize)]
struct MatrixItem {
    metric: BTreeMap<String, String>,
    values: Vec<(f64, String)>,
}

/// Prometheus writes values as strings: `"0.25"`, `"NaN"`, `"+Inf"`.
fn number(text: &str, query: &str) -> Result<f64, AdviseError> {
    text.parse::<f64>().map_err(|_| AdviseError::Malformed {
        query: query.to_owned(),
        why: format!("value {text:?} is not a number"),
    })
}

impl Prometheus {
    /// A reader of the server at `url` (`http://127.0.0.1:9090`).
    pub fn new(url: &str) -> Result<Self, AdviseError> {
        let base = url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(AdviseError::Argument {
                flag: "--prometheus",
                why: format!("{url:?} is not an http:// or https:// URL"),
            });
        }
        let client = reqwest::Client::builder()
            .timeout(QUERY_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|source| AdviseError::Unreachable { url: base.clone(), source })?;
        Ok(Self { base, client })
    }

    /// The server's URL, as given.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// `expr` evaluated at `at` (unix seconds).
    pub async fn query(&self, expr: &str, at: f64) -> Result<Vec<Sample>, AdviseError> {
        let params = [("query", expr.to_owned()), ("time", format!("{at:.3}"))];
        match self.get("/api/v1/query", &params, expr).await? {
            Data::Vector(items) => items
                .into_iter()
                .map(|i| Ok(Sample { labels: i.metric, value: number(&i.value.1, expr)? }))
                .collect(),
            Data::Scalar((_, v)) => Ok(vec![Sample { labels: BTreeMap::new(), value: number(&v, expr)? }]),
            _ => Err(AdviseError::Malformed {
                query: expr.to_owned(),
                why: "not an instant vector".to_owned(),
            }),
        }
    }

    /// `expr` evaluated from `start` to `end` every `step` seconds.
    pub async fn query_range(
        &self,
        expr: &str,
        start: f64,
        end: f64,
        step: f64,
    ) -> Result<Vec<Series>, AdviseError> {
        let params = [
            ("query", expr.to_owned()),
            ("start", format!("{start:.3}")),
            ("end", format!("{end:.3}")),
            ("step", format!("{step:.3}")),
        ];
        match self.get("/api/v1/query_range", &params, expr).await? {
            Data::Matrix(items) => items
                .into_iter()
                .map(|i| {
                    let points = i.values.iter().map(|(t, v)| Ok((*t, number(v, expr)?))).collect::<Result<
                        _,
                        AdviseError,
                    >>(
                    )?;
                    Ok(Series { labels: i.metric, points })
                })
                .collect(),
            _ => Err(AdviseError::Malformed { query: expr.to_owned(), why: "not a range vector".to_owned() }),
        }
    }

    /// One GET, its body read chunk by chunk up to [`MAX_RESPONSE_BYTES`].
    async fn get(&self, path: &str, params: &[(&str, String)], expr: &str) -> Result<Data, AdviseError> {
        let url = format!("{}{path}", self.base);
        let unreachable = |source| AdviseError::Unreachable { url: self.base.clone(), source };
        let url = reqwest::Url::parse_with_params(&url, params).map_err(|e| AdviseError::Argument {
            flag: "--prometheus",
            why: format!("{:?}: {e}", self.base),
        })?;
        let mut response = self.client.get(url).send().await.map_err(unreachable)?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(AdviseError::TooLarge { query: expr.to_owned(), limit: MAX_RESPONSE_BYTES });
            }
            body.extend_from_slice(&chunk);
        }
        // Prometheus answers 400/422/503 with the same envelope and an error.
        let envelope: Envelope = serde_json::from_slice(&body).map_err(|e| {
            if (200..300).contains(&status) {
                AdviseError::Malformed { query: expr.to_owned(), why: e.to_string() }
            } else {
                AdviseError::Query {
                    query: expr.to_owned(),
                    status,
                    error: bounded(&String::from_utf8_lossy(&body)),
                }
            }
        })?;
        if envelope.status != "success" {
            let error = envelope.error.unwrap_or_else(|| "no error text".to_owned());
            return Err(AdviseError::Query { query: expr.to_owned(), status, error: bounded(&error) });
        }
        envelope
            .data
            .ok_or_else(|| AdviseError::Malformed { query: expr.to_owned(), why: "no `data`".to_owned() })
    }
}

/// At most [`MAX_ERROR_TEXT`] bytes of a server's text, cut on a character.
fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_TEXT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

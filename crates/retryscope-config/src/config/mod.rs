//! A loaded configuration: parsed, checked, and turned into match tables
//! once, so that finding a call's settings allocates nothing.

use crate::error::{ConfigError, ConfigErrorKind, Location};
use crate::matcher::{Matcher, Target, most_specific_first};
use crate::names::KnownNames;
use crate::schema::{Block, File};
use crate::settings::{DependencySettings, Refusal, resolve};
use crate::subject::SubjectPattern;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// The most dependencies one file may name: every lookup walks at most this
/// many rules, and each name may become a metric label.
pub const MAX_DEPENDENCIES: usize = 256;

/// The longest dependency name.
pub const MAX_NAME_LEN: usize = 64;

/// The largest file read (1 MiB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// The text's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// TOML: refusals name line and column.
    Toml,
    /// JSON: syntax refusals name line and column, others the path.
    Json,
}

impl Format {
    /// The format a file's extension names (`.toml`, `.json`).
    pub fn of_path(path: &Path) -> Result<Format, ConfigError> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => Ok(Format::Toml),
            Some("json") => Ok(Format::Json),
            _ => Err(ConfigError::new(
                ConfigErrorKind::NoFile,
                "",
                "the file's name must end in .toml or .json (it says which format it is)",
            )
            .at(&Arc::from(path.display().to_string()), None)),
        }
    }
}

/// A stable hash of a configuration's text (FNV-1a, 64 bits): the same
/// text gives the same hash in every process and on every host, so the
/// hash on a span or gauge names the file that was in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConfigHash(pub u64);

impl ConfigHash {
    /// The hash of `text`.
    pub fn of(text: &[u8]) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in text {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Self(h)
    }
}

impl fmt::Display for ConfigHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A rule of the match table: a dependency's matcher and its settings.
#[derive(Debug)]
struct Rule {
    matcher: Matcher,
    settings: Arc<DependencySettings>,
}

/// A checked configuration: the defaults and every dependency's effective
/// settings, with its match table.
#[derive(Debug)]
pub struct Config {
    hash: ConfigHash,
    hash_text: Arc<str>,
    origin: Arc<str>,
    defaults: Arc<DependencySettings>,
    /// Most specific first.
    rules: Vec<Rule>,
}

impl Config {
    /// Parses and checks `text`; `origin` names it in refusals (a file name,
    /// or `<string>`).
    pub fn parse(
        text: &str,
        format: Format,
        origin: &str,
        known: &KnownNames,
    ) -> Result<Config, ConfigError> {
        let origin: Arc<str> = Arc::from(origin);
        let doc = Doc::parse(text, format, &origin)?;
        let file: File = match &doc {
            Doc::Toml(_) => toml::from_str(text).map_err(|e| toml_error(text, &origin, e))?,
            Doc::Json(v) => serde_json::from_value(v.clone()).map_err(|e| {
                // `from_value` has no positions; `from_str` does, for the same error.
                let located = serde_json::from_str::<File>(text).err();
                json_error(&origin, located.unwrap_or(e))
            })?,
        };
        build(file, &doc, text, origin, known)
    }

    /// Reads and checks the file at `path` (format from its extension),
    /// following symlinks.
    pub fn from_path(path: &Path, known: &KnownNames) -> Result<Config, ConfigError> {
        let format = Format::of_path(path)?;
        let text = read(path)?;
        Config::parse(&text, format, &path.display().to_string(), known)
    }

    /// The hash of the text this was loaded from.
    pub fn hash(&self) -> ConfigHash {
        self.hash
    }

    /// The hash as 16 hex digits, as spans and gauges carry it.
    pub fn hash_str(&self) -> &Arc<str> {
        &self.hash_text
    }

    /// Where it was loaded from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The settings of calls no dependency matches.
    pub fn defaults(&self) -> &Arc<DependencySettings> {
        &self.defaults
    }

    /// The settings of `target`'s call: the most specific dependency that
    /// matches, else the defaults. Walks at most [`MAX_DEPENDENCIES`] rules
    /// and allocates nothing.
    pub fn resolve(&self, target: &Target<'_>) -> &Arc<DependencySettings> {
        self.rules.iter().find(|r| r.matcher.matches(target)).map_or(&self.defaults, |r| &r.settings)
    }

    /// A dependency's settings by its name in the file.
    pub fn dependency(&self, name: &str) -> Option<&Arc<DependencySettings>> {
        self.rules.iter().map(|r| &r.settings).find(|s| s.name() == Some(name))
    }

    /// Every dependency's settings, by name.
    pub fn dependencies(&self) -> impl Iterator<Item = &Arc<DependencySettings>> {
        let mut all: Vec<_> = self.rules.iter().map(|r| &r.settings).collect();
        all.sort_by(|a, b| a.name().cmp(&b.name()));
        all.into_iter()
    }

    /// The effective table: one row for the defaults, then one per
    /// dependency (by name), each with the defaults merged in.
    pub fn table(&self) -> String {
        // Every key a client applies from the file; `code` where the file
        // leaves a guard, the body rule or idempotency keys to the builder.
        const HEAD: [&str; 17] = [
            "dependency",
            "match",
            "retries",
            "attempts",
            "backoff",
            "jitter",
            "attempt_timeout",
            "deadline",
            "retry_statuses",
            "hedging",
            "priority",
            "fallback",
            "budget",
            "breaker",
            "pacer",
            "body_rule",
            "idempotency_keys",
        ];
        let mut rows = vec![HEAD.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()];
        rows.push(self.defaults.row());
        rows.extend(self.dependencies().map(|d| d.row()));
        let widths: Vec<usize> =
            (0..HEAD.len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
        let mut out = format!("config {} ({})\n", self.hash, self.origin);
        for row in rows {
            let line: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

mod build;
mod document;
use build::build;
pub(crate) use document::read;
use document::{Doc, json_error, toml_error};

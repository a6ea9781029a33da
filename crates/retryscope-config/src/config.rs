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

/// Reads `path` through its name (a ConfigMap's `..data` symlink swap is
/// seen on the next read), at most [`MAX_FILE_BYTES`].
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let origin: Arc<str> = Arc::from(path.display().to_string());
    let io = |e: std::io::Error| {
        ConfigError::new(ConfigErrorKind::Io, "", format!("cannot read the file: {e}"))
            .with_source(e)
            .at(&origin, None)
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text).map_err(io)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::new(
            ConfigErrorKind::OutOfRange,
            "",
            format!("the file must be at most {MAX_FILE_BYTES} bytes"),
        )
        .at(&origin, None));
    }
    Ok(text)
}

/// The parsed document, kept to find where a refused value is written.
enum Doc<'t> {
    Toml(toml::Spanned<toml::de::DeTable<'t>>),
    Json(serde_json::Value),
}

impl<'t> Doc<'t> {
    fn parse(text: &'t str, format: Format, origin: &Arc<str>) -> Result<Self, ConfigError> {
        match format {
            Format::Toml => {
                toml::de::DeTable::parse(text).map(Doc::Toml).map_err(|e| toml_error(text, origin, e))
            }
            Format::Json => serde_json::from_str(text).map(Doc::Json).map_err(|e| json_error(origin, e)),
        }
    }

    /// Whether the file writes `path`.
    fn has(&self, path: &[&str]) -> bool {
        match self {
            Doc::Toml(t) => toml_span(t, path).is_some(),
            Doc::Json(v) => path.iter().try_fold(v, |v, k| v.get(k)).is_some(),
        }
    }

    fn location(&self, text: &str, path: &[&str]) -> Option<Location> {
        match self {
            Doc::Toml(t) => toml_span(t, path).map(|s| line_column(text, s.start)),
            Doc::Json(_) => None,
        }
    }
}

/// The byte range of the value at `path`, or of the deepest table on it.
fn toml_span(root: &toml::Spanned<toml::de::DeTable<'_>>, path: &[&str]) -> Option<std::ops::Range<usize>> {
    use toml::de::DeValue;
    let (first, rest) = path.split_first()?;
    let mut value = root.get_ref().iter().find(|(k, _)| k.get_ref() == first).map(|(_, v)| v)?;
    for key in rest {
        let DeValue::Table(t) = value.get_ref() else { return None };
        value = t.iter().find(|(k, _)| k.get_ref() == key).map(|(_, v)| v)?;
    }
    Some(value.span())
}

fn line_column(text: &str, offset: usize) -> Location {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Location { line, column }
}

fn toml_error(text: &str, origin: &Arc<str>, e: toml::de::Error) -> ConfigError {
    let location = e.span().map(|s| line_column(text, s.start));
    let message = e.message().trim_end().to_owned();
    ConfigError::new(ConfigErrorKind::Syntax, "", message).with_source(e).at(origin, location)
}

fn json_error(origin: &Arc<str>, e: serde_json::Error) -> ConfigError {
    let location = (e.line() > 0).then(|| Location { line: e.line(), column: e.column() });
    let text = e.to_string();
    let message = match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    };
    ConfigError::new(ConfigErrorKind::Syntax, "", message).with_source(e).at(origin, location)
}

fn build(
    file: File,
    doc: &Doc<'_>,
    text: &str,
    origin: Arc<str>,
    known: &KnownNames,
) -> Result<Config, ConfigError> {
    let place = |path: &[&str]| -> (String, Option<Location>) { (path.join("."), doc.location(text, path)) };
    let fail = |kind, path: &[&str], message: String| {
        let (p, loc) = place(path);
        ConfigError::new(kind, p, message).at(&origin, loc)
    };
    for key in ["host", "path_prefix", "service", "method", "subject"] {
        if doc.has(&["defaults", key]) {
            return Err(fail(
                ConfigErrorKind::Match,
                &["defaults", key],
                format!("defaults apply to every call: `{key}` belongs to a dependency"),
            ));
        }
    }
    if file.dependencies.len() > MAX_DEPENDENCIES {
        return Err(fail(
            ConfigErrorKind::OutOfRange,
            &["dependencies"],
            format!("at most {MAX_DEPENDENCIES} dependencies, got {}", file.dependencies.len()),
        ));
    }
    // A refusal about `key` points at the dependency's own value if it writes
    // one, else at the defaults' (the value it inherited).
    let locate = |refusal: Refusal, dep: Option<&str>| -> ConfigError {
        let keys: Vec<&str> = refusal.key.split('.').collect();
        let mut path: Vec<&str> = Vec::new();
        if let Some(name) = dep {
            let own: Vec<&str> = ["dependencies", name].into_iter().chain(keys.iter().copied()).collect();
            if doc.has(&own) || !doc.has(&[&["defaults"][..], &keys].concat()) {
                path = own;
            }
        }
        if path.is_empty() {
            path = ["defaults"].into_iter().chain(keys.iter().copied()).collect();
        }
        let (p, loc) = place(&path);
        let mut e = (*refusal.error).at(&origin, loc);
        e.set_path(p);
        e
    };
    let defaults =
        Arc::new(resolve(&file.defaults, None, String::new(), known).map_err(|r| locate(r, None))?);
    let mut rules: Vec<(Matcher, DependencySettings)> = Vec::with_capacity(file.dependencies.len());
    for (name, block) in &file.dependencies {
        let at = ["dependencies", name.as_str()];
        if name.is_empty()
            || name.len() > MAX_NAME_LEN
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            return Err(fail(
                ConfigErrorKind::OutOfRange,
                &at,
                format!("a dependency's name must be 1..={MAX_NAME_LEN} characters of A-Z a-z 0-9 _ - ."),
            ));
        }
        let matcher = matcher(
            block,
            &|key, message| fail(ConfigErrorKind::Match, &[at[0], at[1], key], message),
            &at,
            &fail,
        )?;
        // A gRPC call keeps its service config's retryable codes and hedging
        // (A6), reads no HTTP body and gets no idempotency key: written on a
        // gRPC dependency, these would be ignored.
        if block.service.is_some() {
            let ignored = [
                ("retry_statuses", block.retry_statuses.is_some()),
                ("hedging", block.hedging.is_some()),
                ("body_rule", block.body_rule.is_some()),
                ("idempotency_keys", block.idempotency_keys.is_some()),
            ];
            if let Some((key, _)) = ignored.into_iter().find(|(_, set)| *set) {
                return Err(fail(
                    ConfigErrorKind::NotApplied,
                    &[at[0], at[1], key],
                    format!(
                        "`{key}` is not applied to gRPC calls: they keep the service config's \
                         retryable codes and hedging policy (set them there), read no HTTP body \
                         and carry no idempotency key"
                    ),
                ));
            }
        }
        // A `subject` rule matches only jobs, and a job worker applies none
        // of these: written there, they would be ignored.
        if block.subject.is_some()
            && let Some(key) = block.job_ignored_key()
        {
            return Err(fail(
                ConfigErrorKind::NotApplied,
                &[at[0], at[1], key],
                format!(
                    "`{key}` is not applied to jobs: a `subject` rule matches only a job worker's \
                     executions, which apply `attempts`, `backoff`, `jitter`, `attempt_timeout`, \
                     `deadline` and `enabled` (the worker's guards are set in code)"
                ),
            ));
        }
        let merged = block.over(&file.defaults);
        let merged = if block.subject.is_some() { merged.for_jobs() } else { merged };
        let mut settings = resolve(&merged, Some(Arc::from(name.as_str())), matcher.describe(), known)
            .map_err(|r| locate(r, Some(name)))?;
        settings.job = block.subject.is_some();
        rules.push((matcher, settings));
    }
    // Ambiguity: two rules one call could match (`Matcher::overlaps`) with
    // the same specificity — neither would win for that call.
    for (i, (a, a_settings)) in rules.iter().enumerate() {
        for (b, b_settings) in &rules[i + 1..] {
            if a.overlaps(b) && a.specificity() == b.specificity() {
                let (an, bn) = (a_settings.name().unwrap_or(""), b_settings.name().unwrap_or(""));
                return Err(fail(
                    ConfigErrorKind::Match,
                    &["dependencies", bn],
                    format!(
                        "matches the same calls as dependency {an:?} ({}) as specifically ({}): \
                         one call could belong to either; make one more specific \
                         (a port, a longer path prefix, a gRPC method, a subject with more \
                         literal tokens) or make them disjoint",
                        a.describe(),
                        b.describe()
                    ),
                ));
            }
        }
    }
    rules.sort_by(|(a, _), (b, _)| most_specific_first(a, b));
    let rules = rules
        .into_iter()
        .enumerate()
        .map(|(index, (matcher, mut settings))| {
            settings.index = Some(index);
            Rule { matcher, settings: Arc::new(settings) }
        })
        .collect();
    let hash = ConfigHash::of(text.as_bytes());
    Ok(Config { hash, hash_text: Arc::from(hash.to_string()), origin, defaults, rules })
}

fn matcher(
    block: &Block,
    bad: &dyn Fn(&str, String) -> ConfigError,
    at: &[&str; 2],
    fail: &dyn Fn(ConfigErrorKind, &[&str], String) -> ConfigError,
) -> Result<Matcher, ConfigError> {
    let (host, port) = match &block.host {
        None => (None, None),
        Some(h) => {
            let (name, port) = match h.rsplit_once(':') {
                Some((name, port)) => {
                    let port: u16 = port
                        .parse()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| bad("host", format!("the port in {h:?} must be 1..=65535")))?;
                    (name, Some(port))
                }
                None => (h.as_str(), None),
            };
            if name.is_empty() || name.contains(['/', ' ', '*']) {
                return Err(bad("host", format!("{h:?} is not a host or host:port")));
            }
            (Some(name.to_owned()), port)
        }
    };
    if let Some(p) = &block.path_prefix
        && !p.starts_with('/')
    {
        return Err(bad("path_prefix", format!("{p:?} must start with '/'")));
    }
    if block.method.is_some() && block.service.is_none() {
        return Err(bad("method", "a gRPC method needs its `service`".to_owned()));
    }
    if block.path_prefix.is_some() && block.service.is_some() {
        return Err(bad(
            "path_prefix",
            "a dependency matches an HTTP path prefix or a gRPC service, not both".to_owned(),
        ));
    }
    for (key, v) in [("service", &block.service), ("method", &block.method)] {
        if let Some(v) = v
            && (v.is_empty() || v.contains('/'))
        {
            return Err(bad(key, format!("{v:?} must be a non-empty name without '/'")));
        }
    }
    let subject = match &block.subject {
        None => None,
        Some(text) => {
            if host.is_some() || block.path_prefix.is_some() || block.service.is_some() {
                return Err(bad(
                    "subject",
                    "a dependency matches a job's `subject` or a call's host, path prefix or gRPC \
                     service, not both"
                        .to_owned(),
                ));
            }
            Some(SubjectPattern::parse(text).map_err(|why| {
                bad("subject", format!("{why}: a NATS subject pattern is tokens separated by '.', each a name, '*' (one token) or, last, '>' (the rest)"))
            })?)
        }
    };
    if host.is_none() && block.path_prefix.is_none() && block.service.is_none() && subject.is_none() {
        return Err(fail(
            ConfigErrorKind::Match,
            &at[..],
            "a dependency must match something: set `host` (or host:port), `path_prefix`, `service` \
             or, for jobs, `subject`"
                .to_owned(),
        ));
    }
    Ok(Matcher {
        host,
        port,
        path_prefix: block.path_prefix.clone(),
        service: block.service.clone(),
        method: block.method.clone(),
        subject,
    })
}

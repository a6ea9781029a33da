//! Building a [`Config`] from the parsed file: `defaults`, each
//! dependency and each rule resolved and checked.

use super::*;
use crate::GuardKeys;

pub(super) fn build(
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
        settings.own_sets = GuardKeys {
            budget: block.budget.is_some(),
            breaker: block.breaker.is_some(),
            pacer: block.pacer.is_some(),
            in_flight_budget: block.in_flight_budget.is_some(),
        };
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

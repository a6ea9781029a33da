//! Which dependency a call belongs to: a dependency matches by host (or
//! `host:port`), by path prefix, or by gRPC service (and method) — or, for a
//! job, by its NATS subject; the most specific match wins, and two rules
//! that could match one call equally specifically are refused when the file
//! is loaded.

use crate::subject::{SubjectPattern, SubjectSpecificity};
use std::cmp::Ordering;

/// The call being matched, borrowed from the request: looking it up
/// allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The host, as the URI names it.
    pub host: &'a str,
    /// The port, when the URI or the scheme gives one.
    pub port: Option<u16>,
    /// The URI path (`/v1/orders`; for gRPC, `/package.Service/Method`).
    pub path: &'a str,
    /// The gRPC service and method, for a gRPC call.
    pub grpc: Option<(&'a str, &'a str)>,
    /// The NATS subject, for a job ([`Target::job`]): only a `subject` rule
    /// matches a job, and a `subject` rule matches nothing else.
    pub subject: Option<&'a str>,
}

impl<'a> Target<'a> {
    /// An HTTP call to `host` (and `port`) at `path`.
    pub fn http(host: &'a str, port: Option<u16>, path: &'a str) -> Self {
        Self { host, port, path, grpc: None, subject: None }
    }

    /// A gRPC call: its service and method read from `path`
    /// (`/package.Service/Method`).
    pub fn grpc(host: &'a str, port: Option<u16>, path: &'a str) -> Self {
        let grpc = path.strip_prefix('/').and_then(|rest| rest.split_once('/'));
        Self { host, port, path, grpc, subject: None }
    }

    /// A job's execution, published to `subject` (`orders.created`).
    pub fn job(subject: &'a str) -> Self {
        Self { host: "", port: None, path: "", grpc: None, subject: Some(subject) }
    }
}

/// What one dependency matches; at least one part is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Matcher {
    pub(crate) host: Option<String>,
    pub(crate) port: Option<u16>,
    pub(crate) path_prefix: Option<String>,
    pub(crate) service: Option<String>,
    pub(crate) method: Option<String>,
    /// A job's subject pattern; set alone (the loader refuses it beside the
    /// call parts).
    pub(crate) subject: Option<SubjectPattern>,
}

/// How specific a matcher is, compared part by part in this order: a gRPC
/// method, a gRPC service, the length of the path prefix, a port, a host,
/// then a job's subject pattern ([`SubjectSpecificity`]: literal tokens
/// first). A larger value wins. The subject comes last because it only ever
/// decides between two `subject` rules: a `subject` rule sets no other part
/// and matches only jobs, a call rule matches no job, so a call rule and a
/// `subject` rule never compete for one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Specificity {
    method: bool,
    service: bool,
    path_len: usize,
    port: bool,
    host: bool,
    subject: SubjectSpecificity,
}

impl Matcher {
    pub(crate) fn specificity(&self) -> Specificity {
        Specificity {
            method: self.method.is_some(),
            service: self.service.is_some(),
            path_len: self.path_prefix.as_ref().map_or(0, String::len),
            port: self.port.is_some(),
            host: self.host.is_some(),
            subject: self.subject.as_ref().map(SubjectPattern::specificity).unwrap_or_default(),
        }
    }

    /// Whether `target` is a call of this dependency. Bounded by the
    /// lengths of the strings compared; allocates nothing.
    pub(crate) fn matches(&self, target: &Target<'_>) -> bool {
        // A job matches subject rules only; a call, every rule but those.
        match (&self.subject, target.subject) {
            (Some(pattern), Some(subject)) => return pattern.matches(subject),
            (None, None) => {}
            _ => return false,
        }
        if let Some(host) = &self.host
            && !same_host(host, target.host)
        {
            return false;
        }
        if self.port.is_some() && self.port != target.port {
            return false;
        }
        if let Some(prefix) = &self.path_prefix
            && !path_has_prefix(target.path, prefix)
        {
            return false;
        }
        if let Some(service) = &self.service {
            let Some((s, m)) = target.grpc else { return false };
            if s != service {
                return false;
            }
            if let Some(method) = &self.method
                && m != method
            {
                return false;
            }
        }
        true
    }

    /// Whether one call could match both `self` and `other`: every part
    /// both set agrees (path prefixes: one is a prefix of the other).
    pub(crate) fn overlaps(&self, other: &Matcher) -> bool {
        fn agree(a: &Option<String>, b: &Option<String>, same: impl Fn(&str, &str) -> bool) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => same(a, b),
                _ => true,
            }
        }
        match (&self.subject, &other.subject) {
            (Some(a), Some(b)) => return a.overlaps(b),
            (None, None) => {}
            // A job rule and a call rule never match one target.
            _ => return false,
        }
        let ports = match (self.port, other.port) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        agree(&self.host, &other.host, |a, b| a.eq_ignore_ascii_case(b))
            && ports
            && agree(&self.path_prefix, &other.path_prefix, |a, b| {
                path_has_prefix(a, b) || path_has_prefix(b, a)
            })
            && agree(&self.service, &other.service, |a, b| a == b)
            && agree(&self.method, &other.method, |a, b| a == b)
    }

    /// The matcher as the effective table shows it.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        match (&self.host, self.port) {
            (Some(h), Some(p)) => parts.push(format!("host={h}:{p}")),
            (Some(h), None) => parts.push(format!("host={h}")),
            _ => {}
        }
        if let Some(p) = &self.path_prefix {
            parts.push(format!("path_prefix={p}"));
        }
        match (&self.service, &self.method) {
            (Some(s), Some(m)) => parts.push(format!("grpc={s}/{m}")),
            (Some(s), None) => parts.push(format!("grpc={s}")),
            _ => {}
        }
        if let Some(subject) = &self.subject {
            parts.push(format!("subject={}", subject.as_str()));
        }
        parts.join(" ")
    }
}

/// Host names compare without regard to ASCII case. Most calls name a host
/// as the file does (reqwest's URLs lower-case it, and a file usually writes
/// it as the service's URL does), so an exact comparison (lengths first, then one `memcmp`)
/// answers first; lower-casing byte by byte, which was most of a one-rule
/// lookup's cost (~160 of ~310 instructions per call, issue 35), runs only
/// when the bytes differ but the lengths do not.
fn same_host(rule: &str, target: &str) -> bool {
    rule.len() == target.len() && (rule == target || rule.eq_ignore_ascii_case(target))
}

/// `/api/v1` has the prefix `/api` and `/api/`, not `/ap`: a prefix ends at a
/// segment boundary.
fn path_has_prefix(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// Orders rules most specific first; the order among overlapping rules of
/// equal specificity never matters, since the loader refuses them.
pub(crate) fn most_specific_first(a: &Matcher, b: &Matcher) -> Ordering {
    b.specificity().cmp(&a.specificity())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(host: Option<&str>, port: Option<u16>, path: Option<&str>) -> Matcher {
        Matcher {
            host: host.map(str::to_owned),
            port,
            path_prefix: path.map(str::to_owned),
            service: None,
            method: None,
            subject: None,
        }
    }

    #[test]
    fn hosts_match_whatever_their_ascii_case() {
        let rule = m(Some("api.example.com"), None, None);
        for host in ["api.example.com", "API.example.COM", "Api.Example.Com"] {
            assert!(rule.matches(&Target::http(host, None, "/")), "{host}");
        }
        let upper = m(Some("API.Example.com"), None, None);
        assert!(upper.matches(&Target::http("api.example.com", None, "/")));
        for other in ["api.example.co", "api.example.comm", "apx.example.com", ""] {
            assert!(!rule.matches(&Target::http(other, None, "/")), "{other}");
        }
    }

    #[test]
    fn prefixes_end_at_a_segment() {
        assert!(path_has_prefix("/api/v1", "/api"));
        assert!(path_has_prefix("/api", "/api"));
        assert!(!path_has_prefix("/apiv1", "/api"));
        assert!(path_has_prefix("/anything", "/"));
    }

    #[test]
    fn overlap_needs_every_part_set_on_both_sides_to_agree() {
        assert!(m(Some("a"), None, None).overlaps(&m(Some("A"), Some(80), None)));
        assert!(!m(Some("a"), None, None).overlaps(&m(Some("b"), None, None)));
        assert!(m(Some("a"), None, None).overlaps(&m(None, None, Some("/x"))));
        assert!(!m(None, None, Some("/x")).overlaps(&m(None, None, Some("/y"))));
        assert!(m(None, None, Some("/x")).overlaps(&m(None, None, Some("/x/y"))));
    }

    #[test]
    fn a_subject_rule_matches_jobs_only_and_a_call_rule_no_job() {
        let job_rule = Matcher {
            subject: Some(SubjectPattern::parse("orders.*").unwrap_or_else(|e| panic!("{e}"))),
            ..m(None, None, None)
        };
        let root = m(None, None, Some("/"));
        assert!(job_rule.matches(&Target::job("orders.created")));
        assert!(!job_rule.matches(&Target::http("orders.created", None, "/")));
        assert!(!root.matches(&Target::job("orders.created")));
        assert!(root.matches(&Target::http("h", None, "/x")));
        assert!(!job_rule.overlaps(&root) && !root.overlaps(&job_rule));
    }

    #[test]
    fn grpc_targets_read_service_and_method_from_the_path() {
        let t = Target::grpc("h", None, "/pkg.Svc/Get");
        assert_eq!(t.grpc, Some(("pkg.Svc", "Get")));
    }
}

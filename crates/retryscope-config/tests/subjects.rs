//! Jobs matched by their NATS subject: a `subject` rule serves a job
//! worker's executions only, refuses (with its line) every key a worker does
//! not apply, and is checked for malformed patterns and ambiguous overlaps
//! like any other matcher.

// Test fixtures: a valid file failing to load is a broken test.
#![allow(clippy::unwrap_used)]

use retryscope_config::{Config, ConfigErrorKind, Format, KnownNames, Location, Target};
use std::time::Duration;

fn toml(text: &str) -> Result<Config, retryscope_config::ConfigError> {
    Config::parse(
        text,
        Format::Toml,
        "svc.toml",
        &KnownNames::new().body_rule("quota_json").fallback("cache"),
    )
}

#[test]
fn a_subject_rule_matches_jobs_and_a_host_rule_never_does() {
    let c = toml(
        "[defaults]\nattempts = 5\n\
         [dependencies.orders]\nsubject = \"orders.*\"\nattempts = 3\n\
         [dependencies.root]\npath_prefix = \"/\"\nattempts = 2\n",
    )
    .unwrap();
    assert_eq!(c.resolve(&Target::job("orders.created")).name(), Some("orders"));
    assert_eq!(c.resolve(&Target::job("orders.created")).policy().max_attempts(), 3);
    // Not `orders.*`: two tokens exactly. Unmatched jobs take the defaults,
    // never a call rule (`/` would match every HTTP call).
    assert_eq!(c.resolve(&Target::job("orders.created.eu")).name(), None);
    assert_eq!(c.resolve(&Target::job("orders.created.eu")).policy().max_attempts(), 5);
    // A call whose host or path looks like the subject is never a job.
    assert_eq!(c.resolve(&Target::http("orders.created", None, "/")).name(), Some("root"));
    assert!(c.dependency("orders").unwrap().is_job());
    assert!(!c.dependency("root").unwrap().is_job());
}

#[test]
fn the_most_specific_subject_wins_literals_first() {
    let c = toml(
        "[dependencies.all]\nsubject = \"orders.>\"\n\
         [dependencies.any]\nsubject = \"orders.*\"\n\
         [dependencies.created]\nsubject = \"orders.created\"\n",
    )
    .unwrap();
    assert_eq!(c.resolve(&Target::job("orders.created")).name(), Some("created"));
    assert_eq!(c.resolve(&Target::job("orders.paid")).name(), Some("any"));
    assert_eq!(c.resolve(&Target::job("orders.paid.eu")).name(), Some("all"));
}

#[test]
fn two_subject_rules_one_subject_could_match_equally_specifically_are_refused() {
    let e = toml("[dependencies.a]\nsubject = \"orders.*\"\n[dependencies.b]\nsubject = \"*.created\"\n")
        .unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::Match);
    assert!(e.message().contains("subject=orders.*") && e.message().contains("subject=*.created"), "{e}");
    // As specific, but no subject matches both: fine.
    toml("[dependencies.a]\nsubject = \"orders.*\"\n[dependencies.b]\nsubject = \"invoices.*\"\n").unwrap();
    toml("[dependencies.a]\nsubject = \"orders.*\"\n[dependencies.b]\nsubject = \"orders.*.*\"\n").unwrap();
}

#[test]
fn a_malformed_subject_is_refused_with_its_line() {
    for bad in ["orders.", "orders..created", "orders.>.eu", "orders*", ""] {
        let e = toml(&format!("[dependencies.a]\nattempts = 2\nsubject = \"{bad}\"\n")).unwrap_err();
        assert_eq!(e.kind(), ConfigErrorKind::Match, "{bad:?}: {e}");
        assert_eq!(e.path(), "dependencies.a.subject", "{e}");
        assert_eq!(e.location(), Some(Location { line: 3, column: 11 }), "{e}");
    }
    let e = toml("[dependencies.a]\nhost = \"api\"\nsubject = \"orders.*\"\n").unwrap_err();
    assert!(e.message().contains("not both"), "{e}");
    let e = toml("[defaults]\nsubject = \"orders.*\"\n").unwrap_err();
    assert_eq!(e.path(), "defaults.subject");
}

/// A `subject` rule matches only jobs, and a worker applies none of these:
/// each is refused where it is written, never accepted and ignored.
#[test]
fn keys_a_job_worker_does_not_apply_are_refused_on_a_subject_rule() {
    for (key, written) in [
        ("retry_statuses", "retry_statuses = [503]"),
        ("body_rule", "body_rule = \"quota_json\""),
        ("hedging", "hedging = { max_copies = 2 }"),
        ("idempotency_keys", "idempotency_keys = true"),
        ("pacer", "pacer = { adaptive = true }"),
        ("fallback", "fallback = \"cache\""),
        ("priority", "priority = \"sheddable\""),
        ("budget", "budget = { ratio = 0.5 }"),
        ("breaker", "breaker = { min_calls = 3 }"),
    ] {
        let e = toml(&format!("[dependencies.orders]\nsubject = \"orders.*\"\nattempts = 3\n{written}\n"))
            .unwrap_err();
        assert_eq!(e.kind(), ConfigErrorKind::NotApplied, "{e}");
        assert_eq!(e.path(), format!("dependencies.orders.{key}"), "{e}");
        assert_eq!(e.location().map(|l| l.line), Some(4), "{e}");
        assert!(e.to_string().starts_with("svc.toml:4:"), "{e}");
        assert!(e.message().contains("not applied to jobs"), "{e}");
    }
}

/// The same keys in `defaults` serve HTTP and gRPC calls: a subject rule does
/// not inherit them (its row shows `-`), and its `attempt_timeout` counts
/// only where the file writes it.
#[test]
fn a_subject_rule_inherits_the_policy_from_defaults_and_nothing_else() {
    let c = toml(
        "[defaults]\nattempts = 4\ndeadline = \"30s\"\nretry_statuses = [503]\nbudget = { ratio = 0.2 }\n\
         [dependencies.orders]\nsubject = \"orders.*\"\n\
         [dependencies.mail]\nsubject = \"mail.*\"\nattempt_timeout = \"2m\"\n",
    )
    .unwrap();
    let orders = c.dependency("orders").unwrap();
    assert_eq!(orders.policy().max_attempts(), 4);
    assert_eq!(orders.policy().deadline(), Some(Duration::from_secs(30)));
    assert!(!orders.sets_guards(), "a subject rule inherits no guard from defaults");
    assert_eq!(orders.written_attempt_timeout(), None, "not written: the worker keeps its own");
    assert_eq!(c.dependency("mail").unwrap().written_attempt_timeout(), Some(Duration::from_secs(120)));
    let table = c.table();
    let row = table.lines().find(|l| l.starts_with("orders")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "orders",
            "subject=orders.*",
            "on",
            "4",
            "200ms..5s",
            "x2",
            "full",
            "code",
            "30s",
            "-",
            "-",
            "-",
            "-",
            "code",
            "code",
            "-",
            "-",
            "-"
        ],
        "{table}"
    );
}

#[test]
fn the_kill_switch_leaves_a_job_one_attempt() {
    let c = toml("[dependencies.orders]\nsubject = \"orders.*\"\nattempts = 3\nenabled = false\n").unwrap();
    let orders = c.resolve(&Target::job("orders.created"));
    assert_eq!(orders.policy().max_attempts(), 1);
    assert_eq!(orders.configured_policy().max_attempts(), 3);
}

//! Loud validation: every refusal names the file, the line and column (TOML)
//! or the path (JSON), and the allowed range; nothing is accepted and ignored.

// Test fixtures: a failure to write a temp file or flush the SDK is a broken test machine.
#![allow(clippy::unwrap_used)]

use retryscope_config::{Config, ConfigErrorKind, Format, KnownNames, Location, Target};
use std::error::Error;
use std::time::Duration;

fn toml(text: &str) -> Result<Config, retryscope_config::ConfigError> {
    Config::parse(
        text,
        Format::Toml,
        "svc.toml",
        &KnownNames::new().body_rule("quota_json").fallback("stale_cache"),
    )
}

#[test]
fn an_unknown_key_is_refused_with_its_line_and_column() {
    let e =
        toml("[defaults]\nattempts = 3\n\n[dependencies.pay]\nhost = \"pay\"\nattemps = 2\n").unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::Syntax);
    assert_eq!(e.location(), Some(Location { line: 6, column: 1 }));
    assert!(e.to_string().starts_with("svc.toml:6:1: "), "{e}");
    assert!(e.message().contains("attemps"), "{e}");
}

#[test]
fn a_value_out_of_range_names_the_range_and_where_it_is_written() {
    let e = toml("[dependencies.pay]\nhost = \"pay\"\nattempts = 0\n").unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::OutOfRange);
    assert_eq!(e.to_string(), "svc.toml:3:12: dependencies.pay.attempts: must be 1..=100, got 0");

    let e = toml("[dependencies.pay]\nhost = \"pay\"\nbackoff = { initial = \"3s\", max = \"1s\" }\n")
        .unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::OutOfRange);
    assert!(e.source().is_some(), "the engine's PolicyError is kept as the source: {e}");
    assert!(!e.to_string().contains("PolicyError"), "Display is without the source: {e}");
}

/// The guards, the body rule and idempotency keys load (a client applies
/// them: see retryscope-conformance's `configured.rs`); which guard keys the
/// file writes is kept, since a key not written leaves the guard to the
/// builder.
#[test]
fn guards_body_rule_and_keys_load_and_say_which_keys_are_written() {
    let c = toml(
        "[defaults]\nbudget = { ratio = 0.2 }\n\
         [dependencies.pay]\nhost = \"pay\"\nbreaker = { min_calls = 5, cool_down = \"2s\" }\n\
         pacer = { adaptive = true }\nbody_rule = \"quota_json\"\nidempotency_keys = true\n\
         [dependencies.search]\nhost = \"search\"\nbudget = { enabled = false }\nidempotency_keys = false\n",
    )
    .unwrap();
    let pay = c.dependency("pay").unwrap();
    let sets = pay.sets();
    assert_eq!((sets.budget, sets.breaker, sets.pacer), (true, true, true));
    assert_eq!(pay.budget().and_then(|b| b.ratio), Some(0.2), "inherited from the defaults");
    let breaker = pay.breaker().unwrap();
    assert_eq!((breaker.min_calls, breaker.cool_down), (Some(5), Some(Duration::from_secs(2))));
    assert!(pay.pacer().unwrap().adaptive);
    assert_eq!((pay.body_rule(), pay.idempotency_keys()), (Some("quota_json"), Some(true)));
    let search = c.dependency("search").unwrap();
    assert_eq!((search.sets().budget, search.budget()), (true, None), "written off");
    assert_eq!((search.sets().breaker, search.sets().pacer), (false, false), "left to the builder");
    assert_eq!(search.idempotency_keys(), Some(false));
    let defaults = c.defaults();
    assert_eq!((defaults.idempotency_keys(), defaults.body_rule()), (None, None));
    // Equal settings make equal guards; a key written with its defaults is
    // not the same as a key left to the builder.
    let again = toml("[defaults]\nbudget = { ratio = 0.2 }\n[dependencies.pay]\nhost = \"pay\"\nbreaker = { min_calls = 5, cool_down = \"2s\" }\npacer = { adaptive = true }\n").unwrap();
    assert!(!pay.guards_differ(again.dependency("pay").unwrap()));
    let plain = toml("[dependencies.pay]\nhost = \"pay\"\n").unwrap();
    let written = toml("[dependencies.pay]\nhost = \"pay\"\nbudget = {}\n").unwrap();
    assert!(plain.dependency("pay").unwrap().guards_differ(written.dependency("pay").unwrap()));
    assert!(!plain.dependency("pay").unwrap().sets_guards());
}

/// What a gRPC call does not apply is refused on a gRPC dependency, where it
/// is written, saying why: never accepted and ignored.
#[test]
fn http_only_keys_on_a_grpc_dependency_are_refused() {
    for (key, written) in [
        ("retry_statuses", "retry_statuses = [503]"),
        ("hedging", "hedging = { max_copies = 2 }"),
        ("body_rule", "body_rule = \"quota_json\""),
        ("idempotency_keys", "idempotency_keys = true"),
    ] {
        let e = toml(&format!("[dependencies.orders]\nservice = \"shop.Orders\"\n{written}\n")).unwrap_err();
        assert_eq!(e.kind(), ConfigErrorKind::NotApplied, "{e}");
        assert_eq!(e.path(), format!("dependencies.orders.{key}"), "{e}");
        assert_eq!(e.location().map(|l| l.line), Some(3), "{e}");
        assert!(e.message().contains("gRPC"), "{e}");
    }
    // The guards apply to gRPC calls: accepted.
    let c = toml("[dependencies.orders]\nservice = \"shop.Orders\"\nbreaker = { min_calls = 3 }\n").unwrap();
    assert!(c.dependency("orders").unwrap().sets().breaker);
}

#[test]
fn a_throttled_backoff_is_read_and_refused_loudly_when_out_of_range() {
    let c = toml("[defaults]\nbackoff = { initial = \"50ms\", max = \"20s\", throttled_initial = \"1s\" }\n")
        .unwrap();
    let policy = c.defaults().policy();
    assert_eq!(policy.base_delay(), Duration::from_millis(50));
    assert_eq!(policy.throttled_base_delay(), Duration::from_secs(1));
    assert_eq!(policy.throttled_max_delay(), Duration::from_secs(20));
    // Equal to the cap it applies to, its own or the backoff's: loaded as written.
    for (written, base, cap) in [
        ("backoff = { throttled_initial = \"1s\", throttled_max = \"1s\" }", 1000, 1000),
        ("backoff = { max = \"2s\", throttled_initial = \"2s\" }", 2000, 2000),
        ("backoff = { throttled_max = \"200ms\" }", 200, 200),
    ] {
        let c = toml(&format!("[dependencies.pay]\nhost = \"pay\"\n{written}\n"))
            .unwrap_or_else(|e| panic!("{written}: a base equal to its cap is refused: {e}"));
        let policy = c.dependency("pay").unwrap().policy();
        assert_eq!(policy.throttled_base_delay(), Duration::from_millis(base), "{written}");
        assert_eq!(policy.throttled_max_delay(), Duration::from_millis(cap), "{written}");
    }
    // Above the cap it applies to, its own or the backoff's.
    for (written, key, column) in [
        ("backoff = { throttled_initial = \"2s\", throttled_max = \"1s\" }", "throttled_initial", 33),
        ("backoff = { max = \"2s\", throttled_initial = \"3s\" }", "throttled_initial", 45),
        ("backoff = { throttled_max = \"0s\" }", "throttled_max", 29),
    ] {
        let e = toml(&format!("[dependencies.pay]\nhost = \"pay\"\n{written}\n")).unwrap_err();
        assert_eq!(e.kind(), ConfigErrorKind::OutOfRange, "{e}");
        assert_eq!(e.path(), format!("dependencies.pay.backoff.{key}"), "{e}");
        assert_eq!(e.location(), Some(Location { line: 3, column }), "{e}");
        assert!(e.source().is_some(), "the engine's PolicyError is kept: {e}");
    }
}

#[test]
fn a_refusal_of_an_inherited_value_points_at_the_defaults() {
    // The dependency's max is fine on its own; the default initial is above it.
    let e = toml("[defaults]\nbackoff = { initial = \"3s\" }\n[dependencies.pay]\nhost = \"pay\"\nbackoff = { max = \"1s\" }\n")
        .unwrap_err();
    assert_eq!(e.path(), "defaults.backoff.initial");
    assert_eq!(e.location().map(|l| l.line), Some(2));
}

#[test]
fn a_bad_duration_is_refused_with_the_format_expected() {
    let e = toml("[defaults]\ndeadline = \"2 seconds\"\n").unwrap_err();
    assert_eq!(e.location().map(|l| l.line), Some(2));
    assert!(e.message().contains("\"250ms\""), "{e}");
}

#[test]
fn names_never_registered_in_code_are_refused() {
    let e = toml("[dependencies.pay]\nhost = \"pay\"\nfallback = \"cache\"\n").unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::UnknownName);
    assert!(e.message().contains("stale_cache"), "{e}");
    assert_eq!(e.path(), "dependencies.pay.fallback");
    assert_eq!(e.location(), Some(Location { line: 3, column: 12 }));
    let ok = toml("[dependencies.pay]\nhost = \"pay\"\nfallback = \"stale_cache\"\n").unwrap();
    let pay = ok.dependency("pay").unwrap();
    assert_eq!(pay.fallback(), Some("stale_cache"));
}

#[test]
fn two_rules_matching_the_same_calls_equally_specifically_are_refused() {
    let e = toml("[dependencies.a]\nhost = \"api\"\n[dependencies.b]\nhost = \"API\"\n").unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::Match);
    assert_eq!(e.path(), "dependencies.b");
    // Same specificity (a path prefix of the same length) but disjoint: fine.
    toml("[dependencies.a]\npath_prefix = \"/aa\"\n[dependencies.b]\npath_prefix = \"/bb\"\n").unwrap();
    // Overlapping host and path rules differ in specificity: the path wins.
    let c = toml("[dependencies.a]\nhost = \"api\"\n[dependencies.b]\npath_prefix = \"/v1\"\nattempts = 2\n")
        .unwrap();
    assert_eq!(c.resolve(&Target::http("api", None, "/v1/x")).name(), Some("b"));
    assert_eq!(c.resolve(&Target::http("api", None, "/v2")).name(), Some("a"));
    // A host rule and a host:port rule overlap; the port is more specific.
    let c = toml("[dependencies.a]\nhost = \"api\"\n[dependencies.b]\nhost = \"api:8443\"\n").unwrap();
    assert_eq!(c.resolve(&Target::http("api", Some(8443), "/")).name(), Some("b"));
    assert_eq!(c.resolve(&Target::http("api", Some(80), "/")).name(), Some("a"));
}

#[test]
fn a_dependency_must_match_something_and_defaults_match_nothing() {
    let e = toml("[dependencies.a]\nattempts = 2\n").unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::Match);
    let e = toml("[defaults]\nhost = \"x\"\n").unwrap_err();
    assert_eq!(e.path(), "defaults.host");
}

#[test]
fn grpc_rules_match_service_then_method() {
    let c = toml(
        "[dependencies.svc]\nservice = \"shop.Orders\"\nattempts = 3\n\
         [dependencies.get]\nservice = \"shop.Orders\"\nmethod = \"Get\"\nattempts = 2\n",
    )
    .unwrap();
    assert_eq!(c.resolve(&Target::grpc("h", None, "/shop.Orders/Get")).name(), Some("get"));
    assert_eq!(c.resolve(&Target::grpc("h", None, "/shop.Orders/Put")).name(), Some("svc"));
    assert!(c.resolve(&Target::http("h", None, "/shop.Orders/Put")).name().is_none());
    let get = c.dependency("get").unwrap();
    assert_eq!(get.policy().max_attempts(), 2);
}

#[test]
fn the_kill_switch_leaves_one_attempt_and_no_hedge() {
    let c = toml("[dependencies.s]\nhost = \"s\"\nattempts = 4\nenabled = false\nhedging = { max_copies = 2 }\ndeadline = \"3s\"\n")
        .unwrap();
    let s = c.dependency("s").unwrap();
    assert!(!s.enabled());
    assert_eq!(s.policy().max_attempts(), 1);
    assert_eq!(s.policy().deadline(), Some(Duration::from_secs(3)));
    assert_eq!(s.configured_policy().max_attempts(), 4);
    assert!(s.hedge_policy().is_none());
}

#[test]
fn json_uses_the_same_schema_and_names_lines_or_paths() {
    let known = KnownNames::new();
    let c = Config::parse(
        r#"{"defaults": {"attempts": 2}, "dependencies": {"pay": {"host": "pay", "retry_statuses": [503]}}}"#,
        Format::Json,
        "svc.json",
        &known,
    )
    .unwrap();
    let pay = c.dependency("pay").unwrap();
    assert_eq!(pay.policy().max_attempts(), 2);
    assert!(pay.classifier().retries(503) && !pay.classifier().retries(502));

    let e =
        Config::parse("{\"defaults\": {\n  \"atempts\": 2}}", Format::Json, "svc.json", &known).unwrap_err();
    assert_eq!(e.location().map(|l| l.line), Some(2));
    let e =
        Config::parse(r#"{"defaults": {"attempts": 500}}"#, Format::Json, "svc.json", &known).unwrap_err();
    assert_eq!(e.to_string(), "svc.json: defaults.attempts: must be 1..=100, got 500");
}

/// A guard turned off is checked all the same: a bad value beside `enabled =
/// false` would otherwise surface only when an operator turns it on, in an
/// incident. (They were accepted unread.)
#[test]
fn a_guards_values_are_checked_when_it_is_turned_off_too() {
    for (block, key) in [
        ("budget = { enabled = false, ratio = 7.0 }", "budget.ratio"),
        ("breaker = { enabled = false, failure_ratio = 0.0 }", "breaker.failure_ratio"),
        ("hedging = { enabled = false, max_copies = 50 }", "hedging.max_copies"),
        ("in_flight_budget = { enabled = false, share = 3.0 }", "in_flight_budget.share"),
    ] {
        let e = toml(&format!("[dependencies.s]\nhost = \"s\"\n{block}\n")).unwrap_err();
        assert_eq!(e.kind(), ConfigErrorKind::OutOfRange, "{block}: {e}");
        assert!(e.path().ends_with(key), "{block}: {e}");
    }
    // Off with good values: accepted, and off.
    let c = toml("[dependencies.s]\nhost = \"s\"\nbudget = { enabled = false, ratio = 0.5 }\n").unwrap();
    assert!(c.dependency("s").unwrap().budget().is_none());
}

/// A key written twice in a JSON object is refused with its line, as TOML
/// refuses it: serde_json alone keeps the last, and `"enabled": false,
/// "enabled": true` lifted a kill switch without a word; a dependency
/// written twice replaced the first.
#[test]
fn a_json_key_written_twice_is_refused_as_toml_refuses_it() {
    let known = KnownNames::new();
    let twice = "{\"dependencies\": {\"s\": {\"host\": \"s\",\n  \"enabled\": false,\n  \"enabled\": true}}}";
    let e = Config::parse(twice, Format::Json, "svc.json", &known).unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::Syntax, "{e}");
    assert!(e.message().contains("duplicate key `enabled`"), "{e}");
    assert_eq!(e.location().map(|l| l.line), Some(3));
    let dependency_twice = r#"{"dependencies": {"s": {"host": "a"}, "s": {"host": "b"}}}"#;
    let e = Config::parse(dependency_twice, Format::Json, "svc.json", &known).unwrap_err();
    assert!(e.message().contains("duplicate key `s`"), "{e}");
    let e = toml("[dependencies.s]\nhost = \"s\"\nenabled = false\nenabled = true\n").unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::Syntax, "{e}");
}

#[test]
fn retried_statuses_are_checked_and_replace_the_default_set() {
    let e = toml("[defaults]\nretry_statuses = [200]\n").unwrap_err();
    assert!(e.message().contains("400..=599"), "{e}");
    let c = toml("[defaults]\nretry_statuses = [429, 503]\n").unwrap();
    let d = c.defaults();
    assert!(d.classifier().retries(429) && !d.classifier().retries(500));
}

#[test]
fn an_in_flight_budget_is_read_inherited_and_refused_loudly_when_out_of_range() {
    let c = toml(
        "[defaults]\nin_flight_budget = { min = 5 }\n[dependencies.pay]\nhost = \"pay\"\nin_flight_budget = { share = 0.1 }\n\
         [dependencies.off]\nhost = \"off\"\nin_flight_budget = { enabled = false }\n",
    )
    .unwrap();
    let pay = c.dependencies().find(|d| d.name() == Some("pay")).unwrap();
    let settings = pay.in_flight_budget().unwrap();
    // The share its own, the floor the defaults'.
    assert_eq!((settings.share, settings.min), (0.1, 5));
    assert!(pay.sets().in_flight_budget);
    let off = c.dependencies().find(|d| d.name() == Some("off")).unwrap();
    assert_eq!(off.in_flight_budget(), None);
    assert!(off.sets().in_flight_budget, "written, as off");
    assert!(c.table().contains("code+in_flight=10%/min=5"), "{}", c.table());
    // The ranges' ends (share 0.001..=1, min at most 100,000) load, beside
    // the other key's default (0.2, 3) ...
    for (written, share, min) in [
        ("in_flight_budget = { share = 0.001 }", 0.001, 3),
        ("in_flight_budget = { share = 1.0 }", 1.0, 3),
        ("in_flight_budget = { min = 100000 }", 0.2, 100_000),
    ] {
        let c = toml(&format!("[dependencies.pay]\nhost = \"pay\"\n{written}\n")).unwrap();
        let settings = c.dependency("pay").unwrap().in_flight_budget().unwrap();
        assert_eq!((settings.share, settings.min), (share, min), "{written}");
    }
    // ... and just past them is refused.
    for (written, key) in [
        ("in_flight_budget = { share = 0.0 }", "share"),
        ("in_flight_budget = { share = 0.0009 }", "share"),
        ("in_flight_budget = { share = 1.5 }", "share"),
        ("in_flight_budget = { share = 1.001 }", "share"),
        ("in_flight_budget = { min = 100001 }", "min"),
    ] {
        let e = toml(&format!("[dependencies.pay]\nhost = \"pay\"\n{written}\n")).unwrap_err();
        assert_eq!(e.kind(), ConfigErrorKind::OutOfRange, "{e}");
        assert_eq!(e.path(), format!("dependencies.pay.in_flight_budget.{key}"), "{e}");
        assert_eq!(e.location().map(|l| l.line), Some(3), "{e}");
        assert!(e.source().is_some(), "the engine's SettingError is kept: {e}");
    }
    let e = toml("[dependencies.pay]\nhost = \"pay\"\nin_flight_budget = { shares = 0.2 }\n").unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::Syntax, "{e}");
}

/// "At most 256 dependencies" (`MAX_DEPENDENCIES`), at its edge: a file with
/// 256 loads and its 256th rule is looked up like the first; one more is
/// refused, naming the bound and the count.
#[test]
fn a_file_of_256_dependencies_loads_and_one_more_is_refused() {
    use retryscope_config::MAX_DEPENDENCIES;
    assert_eq!(MAX_DEPENDENCIES, 256, "the guide's figure");
    let file = |count: usize| {
        (0..count)
            .map(|n| format!("[dependencies.d{n}]\nhost = \"h{n}\"\nattempts = 2\n"))
            .collect::<String>()
    };
    let c = toml(&file(MAX_DEPENDENCIES)).unwrap();
    let last = MAX_DEPENDENCIES - 1;
    for n in [0, last] {
        let name = format!("d{n}");
        let resolved = c.resolve(&Target::http(&format!("h{n}"), None, "/"));
        assert_eq!(resolved.name(), Some(name.as_str()));
        assert_eq!(resolved.policy().max_attempts(), 2, "{name}: its own attempts");
    }

    let e = toml(&file(MAX_DEPENDENCIES + 1)).unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::OutOfRange, "{e}");
    assert_eq!(e.path(), "dependencies", "{e}");
    assert!(e.message().contains("at most 256 dependencies, got 257"), "{e}");
}

/// The guide's "Loud validation": a value out of range is refused with its
/// place "and the allowed range" — the in-flight budget's keys as every other
/// guard key's (`budget.window`: "must be within 1s..=3600s"); they once said
/// only "must be in range".
#[test]
fn an_in_flight_budget_out_of_range_is_refused_naming_the_range() {
    for (written, range) in [
        ("in_flight_budget = { share = 0.0009 }", "0.001..=1"),
        ("in_flight_budget = { share = 1.5 }", "0.001..=1"),
        ("in_flight_budget = { min = 100001 }", "at most 100000"),
    ] {
        let e = toml(&format!("[dependencies.pay]\nhost = \"pay\"\n{written}\n")).unwrap_err();
        assert!(e.message().contains(range), "{written}: {e}");
    }
}

/// The guide's "Loud validation", key by key: every numeric or duration key
/// the file accepts, written just past each of its bounds, is refused as out
/// of range, naming the range and the line and column of the value; written
/// at the bound (for an open bound: the nearest value the file can write,
/// 1 ms for a duration, the next float for a ratio) it loads. Each row is
/// tried in `defaults` and in a dependency. Keys whose bound is 0 and whose
/// type is unsigned (`budget.min_per_second`, `in_flight_budget.min`) or a
/// duration (`hedging.delay`) cannot be written past it: TOML refuses `-1`
/// as a u32, a duration has no sign. A cap written below a base the file
/// leaves to the engine (`Policy::interactive()`'s 200 ms) is refused at the
/// cap, the place the file has.
#[test]
fn every_numeric_key_out_of_range_is_refused_naming_its_range_and_place() {
    // The floats next to the bounds, written as TOML reads them back.
    assert_eq!("1.0000000000000002".parse::<f64>().unwrap(), 1.0f64.next_up());
    assert_eq!("0.0009999999999999998".parse::<f64>().unwrap(), 0.001f64.next_down());
    assert_eq!("5e-324".parse::<f64>().unwrap(), 0.0f64.next_up());
    assert_eq!("-5e-324".parse::<f64>().unwrap(), 0.0f64.next_down());
    // (key, other keys of its table the row needs, just past, at the edge, the range said)
    let rows: &[(&str, &str, &str, &str, &str)] = &[
        ("attempts", "", "0", "1", "must be 1..=100"),
        ("attempts", "", "101", "100", "must be 1..=100"),
        ("backoff.initial", "", "\"0ms\"", "\"1ms\"", "must be above zero"),
        ("backoff.initial", "max = \"24h\"", "\"86400001ms\"", "\"24h\"", "at most 86400s"),
        ("backoff.initial", "max = \"1s\"", "\"1001ms\"", "\"1s\"", "must not exceed max_delay (1s)"),
        ("backoff.max", "initial = \"1ms\"", "\"0ms\"", "\"1ms\"", "must be above zero"),
        ("backoff.max", "", "\"86400001ms\"", "\"24h\"", "at most 86400s"),
        ("backoff.max", "", "\"199ms\"", "\"200ms\"", "must not exceed max_delay (199ms)"),
        ("backoff.multiplier", "", "0.0", "5e-324", "must be a finite number above 0"),
        ("backoff.multiplier", "", "inf", "1.7976931348623157e308", "must be a finite number above 0"),
        ("backoff.throttled_initial", "", "\"0ms\"", "\"1ms\"", "must be above zero"),
        ("backoff.throttled_initial", "max = \"2s\"", "\"2001ms\"", "\"2s\"", "at most 2s"),
        ("backoff.throttled_initial", "throttled_max = \"1s\"", "\"1001ms\"", "\"1s\"", "at most 1s"),
        ("backoff.throttled_max", "throttled_initial = \"1ms\"", "\"0ms\"", "\"1ms\"", "must be above zero"),
        ("backoff.throttled_max", "", "\"86400001ms\"", "\"24h\"", "at most 86400s"),
        ("backoff.throttled_max", "", "\"199ms\"", "\"200ms\"", "at most 199ms"),
        ("attempt_timeout", "", "\"0ms\"", "\"1ms\"", "must be above zero"),
        ("attempt_timeout", "", "\"86400001ms\"", "\"24h\"", "at most 86400s"),
        ("deadline", "", "\"0ms\"", "\"1ms\"", "must be above zero"),
        ("deadline", "", "\"86400001ms\"", "\"24h\"", "at most 86400s"),
        ("retry_statuses", "", "[399]", "[400]", "must be 400..=599"),
        ("retry_statuses", "", "[600]", "[599]", "must be 400..=599"),
        ("hedging.max_copies", "", "0", "1", "at least 1 and at most 5"),
        ("hedging.max_copies", "", "6", "5", "at least 1 and at most 5"),
        ("hedging.delay", "", "\"86400001ms\"", "\"24h\"", "at most 86400s"),
        ("budget.ratio", "", "-5e-324", "0.0", "within 0..=1"),
        ("budget.ratio", "", "1.0000000000000002", "1.0", "within 0..=1"),
        ("budget.min_per_second", "", "1000001", "1000000", "at most 1000000"),
        ("budget.window", "", "\"999ms\"", "\"1s\"", "within 1s..=3600s"),
        ("budget.window", "", "\"3600001ms\"", "\"1h\"", "within 1s..=3600s"),
        ("breaker.failure_ratio", "", "0.0", "5e-324", "within (0, 1]"),
        ("breaker.failure_ratio", "", "1.0000000000000002", "1.0", "within (0, 1]"),
        ("breaker.min_calls", "", "0", "1", "at least 1"),
        ("breaker.window", "", "\"999ms\"", "\"1s\"", "within 1s..=3600s"),
        ("breaker.window", "", "\"3600001ms\"", "\"1h\"", "within 1s..=3600s"),
        ("breaker.cool_down", "", "\"0ms\"", "\"1ms\"", "within (0s, 86400s]"),
        ("breaker.cool_down", "", "\"86400001ms\"", "\"24h\"", "within (0s, 86400s]"),
        ("breaker.half_open_probes", "", "0", "1", "within 1..=65535"),
        ("breaker.half_open_probes", "", "65536", "65535", "within 1..=65535"),
        ("in_flight_budget.share", "", "0.0009999999999999998", "0.001", "within 0.001..=1"),
        ("in_flight_budget.share", "", "1.0000000000000002", "1.0", "within 0.001..=1"),
        ("in_flight_budget.min", "", "100001", "100000", "at most 100000"),
    ];
    // One line writing `key = value`, inline in its table where it has one.
    let line = |key: &str, others: &str, value: &str| match key.split_once('.') {
        None => format!("{key} = {value}"),
        Some((table, key)) if others.is_empty() => format!("{table} = {{ {key} = {value} }}"),
        Some((table, key)) => format!("{table} = {{ {others}, {key} = {value} }}"),
    };
    for (block, header) in
        [("defaults", "[defaults]\n"), ("dependencies.pay", "[dependencies.pay]\nhost = \"pay\"\n")]
    {
        let line_no = header.lines().count() + 1;
        for &(key, others, past, edge, range) in rows {
            let written = line(key, others, past);
            let case = format!("{block}: {written}");
            let Err(e) = toml(&format!("{header}{written}\n")) else { panic!("{case}: loaded") };
            assert_eq!(e.kind(), ConfigErrorKind::OutOfRange, "{case}: {e}");
            assert_eq!(e.path(), format!("{block}.{key}"), "{case}: {e}");
            assert!(e.message().contains(range), "{case}: the range {range:?} not named: {e}");
            // The value's own place: where `past` starts on its line.
            let column = written.rfind(past).unwrap() + 1;
            assert_eq!(e.location(), Some(Location { line: line_no, column }), "{case}: {e}");
            assert!(e.to_string().starts_with(&format!("svc.toml:{line_no}:{column}: ")), "{case}: {e}");

            let written = line(key, others, edge);
            if let Err(e) = toml(&format!("{header}{written}\n")) {
                panic!("{block}: {written}: the edge is refused: {e}");
            }
        }
    }
}

//! `advise`'s rules on figures made here, no Prometheus needed: whatever was
//! observed and whatever the caller's deadline, no duration of a call is above
//! the deadline, and the file written from them is one `check-config` accepts.

use proptest::prelude::*;
use retryscope_lab::advise::observe::{Observed, Quantiles};
use retryscope_lab::advise::replay;
use retryscope_lab::advise::rules::{self, Caller, Value};
use retryscope_lab::advise::writer::{self, Match};
use std::time::Duration;

/// Every duration in a value, tables included.
fn durations(v: &Value, out: &mut Vec<(String, Duration)>, at: &str) {
    match v {
        Value::Duration(d) => out.push((at.to_owned(), *d)),
        Value::Table(t) => t.iter().for_each(|(k, v)| durations(v, out, &format!("{at}.{k}"))),
        _ => {}
    }
}

fn observed(
    requests: f64,
    first_failed: f64,
    status: &str,
    p50: f64,
    tail: f64,
    outage_s: u64,
    held: f64,
) -> Observed {
    let mut o = Observed { name: "dep.internal:8443".to_owned(), requests, ..Observed::default() };
    o.attempts.insert(1, requests);
    o.attempts.insert(2, first_failed);
    o.first_failures = first_failed;
    if first_failed > 0.0 {
        o.failures.insert(status.to_owned(), first_failed);
        o.retries.insert(status.to_owned(), first_failed);
    }
    o.latency.insert(1, Quantiles { p50, p95: p50 * tail.sqrt(), p99: p50 * tail, p999: p50 * tail * 1.2 });
    o.longest_outage = Duration::from_secs(outage_s);
    o.held = held;
    o
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    #[test]
    fn no_call_duration_is_above_the_deadline_and_the_file_loads(
        deadline_ms in prop_oneof![20u64..2_000, 2_000u64..120_000, 120_000u64..=86_400_000],
        requests in 0.0f64..1e6,
        failed_share in 0.0f64..1.0,
        status in prop::sample::select(vec!["503", "429", "404", "timeout"]),
        p50 in prop_oneof![0.0001f64..0.1, 0.1f64..30.0],
        tail in 1.0f64..500.0,
        outage_s in 0u64..3600,
        held in prop::sample::select(vec![0.0, 12.0]),
        idempotent: bool,
    ) {
        let deadline = Duration::from_millis(deadline_ms);
        let o = observed(requests, requests * failed_share, status, p50, tail, outage_s, held);
        let caller = Caller { deadline: Some(deadline), file_deadline: None, idempotent, attempts_in_force: None };
        let advice = rules::advise(&o, &caller);
        let mut all = Vec::new();
        // A call's durations; a guard's windows and cool-down span many calls.
        advice
            .keys
            .iter()
            .filter(|k| !matches!(k.key, "budget" | "breaker"))
            .for_each(|k| durations(&k.value, &mut all, k.key));
        for (key, d) in &all {
            prop_assert!(*d <= deadline, "{key} = {d:?} above the deadline {deadline:?}");
            prop_assert!(!d.is_zero(), "{key} is zero");
        }
        if let Some(Value::Int(n)) = advice.key("attempts") {
            prop_assert!((1..=5).contains(n));
        }
        // The timeout cuts no healthy attempt (p99.9) where one fits in the
        // deadline, and the attempts sent all fit in it.
        if let Some(Value::Duration(timeout)) = advice.key("attempt_timeout") {
            let attempts = match advice.key("attempts") { Some(Value::Int(n)) => *n, _ => 4 };
            let p999 = Duration::from_secs_f64(o.latency[&1].p999);
            if p999 <= deadline {
                prop_assert!(*timeout + Duration::from_millis(1) >= p999, "{timeout:?} under p99.9 {p999:?}");
            }
            prop_assert!(*timeout * attempts <= deadline.max(Duration::from_millis(10) * attempts),
                "{attempts} × {timeout:?} over {deadline:?}");
        }
        let m = writer::match_of(&o.name);
        let text = writer::render(&["test".to_owned()], &[(advice.clone(), m)]);
        let config = writer::check(&text, "advised.toml");
        prop_assert!(config.is_ok(), "{:?}\n{text}", config.err());
    }
}

#[test]
fn a_host_and_port_name_is_matched_by_it_under_a_name_the_file_allows() {
    assert_eq!(writer::match_of("127.0.0.1:8080"), Match::Host("127.0.0.1:8080".to_owned()));
    assert_eq!(writer::file_name("127.0.0.1:8080"), "127.0.0.1_8080");
    assert!(matches!(writer::match_of("_OTHER"), Match::Unmatchable(_)));
    assert!(matches!(writer::match_of("a/b"), Match::Unmatchable(_)));
    assert!(matches!(writer::match_of("host:99999"), Match::Unmatchable(_)));
    assert_eq!(writer::duration(Duration::from_millis(1500)), "1500ms");
    assert_eq!(writer::duration(Duration::from_secs(120)), "2m");
}

/// Known answers of the attempt timeout rule: 1.5 × p99.9, never below
/// p99.9, never above deadline / attempts; fewer attempts where p99.9 does not fit.
#[test]
fn the_attempt_timeout_cuts_no_healthy_call_and_fits_the_deadline() {
    let timeout_and_attempts =
        |deadline_ms: u64, p99: f64, p999: f64, failing: bool, in_force: Option<u32>| {
            let mut o = observed(10_000.0, if failing { 500.0 } else { 0.0 }, "503", p99 / 4.0, 4.0, 0, 0.0);
            o.latency.insert(1, Quantiles { p50: p99 / 4.0, p95: p99 / 2.0, p99, p999 });
            let caller = Caller {
                deadline: Some(Duration::from_millis(deadline_ms)),
                file_deadline: None,
                idempotent: false,
                attempts_in_force: in_force,
            };
            let advice = rules::advise(&o, &caller);
            let Some(Value::Duration(t)) = advice.key("attempt_timeout") else {
                panic!("no timeout: {advice:#?}")
            };
            let n = match advice.key("attempts") {
                Some(Value::Int(n)) => Some(*n),
                _ => None,
            };
            (t.as_millis() as u64, n)
        };
    // A generous deadline: 1.5 × p99.9 = 150 ms, 3 attempts.
    assert_eq!(timeout_and_attempts(10_000, 0.095, 0.1, true, None), (150, Some(3)));
    // p99 near half the deadline (the old rule's min(deadline / 2, 2 × p99) = 500 ms cut
    // every attempt slower than 500 ms, p99.9 = 700 ms): one attempt, the whole deadline.
    assert_eq!(timeout_and_attempts(1_000, 0.48, 0.7, true, None), (1000, Some(1)));
    // p99.9 = 400 ms fits twice, not three times, in 1 s: 2 attempts of 500 ms.
    assert_eq!(timeout_and_attempts(1_000, 0.3, 0.4, true, None), (500, Some(2)));
    // Not failing (a heavy tail only): the file in force's 2 attempts are what must fit;
    // p99.9 = 2 s fits once in 3 s, so 1 attempt is written, of 3 s.
    let heavy = |p99: f64| {
        let mut o = observed(10_000.0, 0.0, "503", p99 / 20.0, 20.0, 0, 0.0);
        o.latency.insert(1, Quantiles { p50: p99 / 20.0, p95: p99 / 4.0, p99, p999: 2.0 });
        let caller = Caller {
            deadline: Some(Duration::from_secs(3)),
            file_deadline: None,
            idempotent: false,
            attempts_in_force: Some(2),
        };
        rules::advise(&o, &caller)
    };
    let a = heavy(1.0);
    assert_eq!(a.key("attempt_timeout"), Some(&Value::Duration(Duration::from_secs(3))), "{a:#?}");
    assert_eq!(a.key("attempts"), Some(&Value::Int(1)), "{a:#?}");
    // No p99.9 known: p99 is the floor, 1.5 × p99 the timeout.
    assert_eq!(timeout_and_attempts(10_000, 0.2, 0.0, true, None), (300, Some(3)));
}

#[test]
fn a_hedge_delay_above_the_deadline_is_not_written() {
    let o = observed(10_000.0, 0.0, "503", 2.0, 100.0, 0, 0.0);
    let caller = Caller {
        deadline: Some(Duration::from_secs(1)),
        file_deadline: None,
        idempotent: true,
        attempts_in_force: None,
    };
    let advice = rules::advise(&o, &caller);
    assert!(advice.key("hedging").is_none(), "{advice:#?}");
    assert!(advice.notes.iter().any(|n| n.contains("no hedge")), "{:?}", advice.notes);
}

/// A dependency failing 30 % of attempts for its whole range.
fn flaky() -> Observed {
    let mut o = observed(6_000.0, 1_800.0, "503", 0.02, 3.0, 0, 0.0);
    o.window = Duration::from_secs(600);
    o.timeline_step = 15.0;
    o.timeline = vec![0.3; 41];
    o
}

fn side(attempts: u32, budget: Option<retryscope_config::BudgetSettings>) -> replay::Side {
    let policy =
        retryscope::Policy::interactive().to_builder().max_attempts(attempts).build().expect("policy");
    replay::Side { policy, budget, breaker: None, hedge: None }
}

#[test]
fn a_replay_answers_more_calls_with_retries_and_says_when_a_recommendation_is_worse() {
    let o = flaky();
    let one = replay::replay(&o, &side(1, None), None, 42).expect("replays");
    let four = replay::replay(&o, &side(4, None), None, 42).expect("replays");
    // One attempt answers ~70 %; four ~99 % at ~1.4 attempts a call.
    assert!((0.67..0.73).contains(&one.answered), "{one:?}");
    assert!(four.answered > 0.98 && (1.35..1.5).contains(&four.amplification), "{four:?}");
    assert!(replay::worse(&one, &four), "fewer calls answered is worse");
    // A 10 % budget answers fewer than unbounded retries but loads the dependency less.
    let budget =
        retryscope_config::BudgetSettings { ratio: Some(0.1), min_per_second: Some(0), window: None };
    let budgeted = replay::replay(&o, &side(4, Some(budget)), None, 42).expect("replays");
    assert!(budgeted.amplification < four.amplification, "{budgeted:?} vs {four:?}");
    assert!(replay::worse(&four, &budgeted), "more load is worse");
    // The same seed replays the same figures.
    assert_eq!(replay::replay(&o, &side(4, None), None, 42).expect("replays"), four);
}

#[test]
fn priority_is_sheddable_for_a_batch_caller_critical_for_an_interactive_one_and_unsaid_otherwise() {
    let o = flaky();
    let with = |deadline: Option<u64>, o: &Observed| {
        let caller = Caller {
            deadline: deadline.map(Duration::from_secs),
            file_deadline: None,
            idempotent: false,
            attempts_in_force: None,
        };
        rules::advise(o, &caller)
    };
    assert_eq!(with(Some(600), &o).key("priority"), Some(&Value::Name("sheddable")));
    assert_eq!(with(Some(60), &o).key("priority"), Some(&Value::Name("sheddable")));
    assert_eq!(with(Some(15), &o).key("priority"), Some(&Value::Name("critical")));
    // 30 s: neither; no deadline: the data cannot tell.
    let a = with(Some(30), &o);
    assert!(
        a.key("priority").is_none() && a.notes.iter().any(|n| n.starts_with("priority not written")),
        "{a:#?}"
    );
    assert!(with(None, &o).key("priority").is_none());
    // Operations that took 8 attempts: a background policy's.
    let mut batch = flaky();
    batch.operations.insert("8".to_owned(), 12.0);
    assert_eq!(with(None, &batch).key("priority"), Some(&Value::Name("sheddable")));
}

#[test]
fn a_hedge_in_the_replay_cuts_the_tail_and_adds_load() {
    // The heavy tail: p50 18 ms, p95 225 ms, p99 2 s, p99.9 2.4 s; nothing fails.
    let mut o = observed(6_000.0, 0.0, "503", 0.018, 1.0, 0, 0.0);
    o.latency.insert(1, Quantiles { p50: 0.018, p95: 0.225, p99: 2.0, p999: 2.4 });
    o.window = Duration::from_secs(600);
    o.timeline_step = 15.0;
    o.timeline = vec![0.0; 41];
    let plain = replay::replay(&o, &side(3, None), None, 7).expect("replays");
    let mut hedged_side = side(3, None);
    hedged_side.hedge =
        Some(retryscope_config::HedgeSettings { max_copies: 2, delay: Duration::from_millis(225) });
    let hedged = replay::replay(&o, &hedged_side, None, 7).expect("replays");
    // The copy after p95 answers most of the slowest 5 %: p99 falls from ~2 s to
    // under a second; about 5 % more attempts (the copies).
    assert!(plain.p99 > 1.5 && hedged.p99 < 1.0, "{} → {}", plain.p99, hedged.p99);
    assert!((1.03..1.08).contains(&hedged.amplification), "{}", hedged.amplification);
    assert!((plain.amplification - 1.0).abs() < 1e-9);
    assert!(plain.recovery.is_none(), "no outage recorded, no recovery");
}

#[test]
fn recorded_timeouts_are_replayed_as_slow_attempts_a_longer_timeout_answers() {
    // 40 % of attempts cut by the 25 ms timeout in force; successes under it.
    let mut o = observed(6_000.0, 2_400.0, "timeout", 0.015, 1.5, 0, 0.0);
    o.window = Duration::from_secs(600);
    o.timeline_step = 15.0;
    o.timeline = vec![0.4; 41];
    o.timeout_in_force = Some(Duration::from_millis(25));
    let with_timeout = |o: &Observed, ms: u64| {
        let policy = retryscope::Policy::interactive()
            .to_builder()
            .max_attempts(1)
            .attempt_timeout(Duration::from_millis(ms))
            .build()
            .expect("policy");
        replay::replay(o, &replay::Side { policy, budget: None, breaker: None, hedge: None }, None, 3)
            .expect("replays")
    };
    // The timeout in force replays its own cuts: about 60 % answered.
    let tight = with_timeout(&o, 25);
    assert!((0.57..0.63).contains(&tight.answered), "{tight:?}");
    // Twice the timeout answers them all (they took 1-2 × 25 ms); 37 ms about half of them.
    assert!(with_timeout(&o, 50).answered > 0.99);
    let half = with_timeout(&o, 37);
    assert!((0.75..0.85).contains(&half.answered), "{half:?}");
    // Without the timeout in force known, a timeout is the dependency's failure, whatever the side's.
    o.timeout_in_force = None;
    assert!((0.57..0.63).contains(&with_timeout(&o, 50).answered));
}

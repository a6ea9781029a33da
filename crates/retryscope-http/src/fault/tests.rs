//! The fault model on its own: specs, selection, the seeded draw and the switch.

use super::*;
use std::time::Duration;

fn faults(spec: &str, seed: u64) -> Faults {
    let spec: FaultSpec = spec.parse().expect("a valid spec");
    Faults::builder().spec(spec).seed(seed).no_metrics().enabled().build()
}

fn sequence(faults: &Faults, calls: usize) -> Vec<Option<FaultKind>> {
    (0..calls).map(|_| faults.decide(&Target::new("api", "/items"))).collect()
}

#[test]
fn the_same_seed_gives_the_same_fault_sequence_twice() {
    let first = sequence(&faults("503@30,reset@20", 42), 500);
    assert_eq!(first, sequence(&faults("503@30,reset@20", 42), 500));
    assert_ne!(first, sequence(&faults("503@30,reset@20", 43), 500));
    assert!(first.contains(&Some(FaultKind::Reset)) && first.contains(&Some(FaultKind::unavailable())));
}

#[test]
fn a_ten_percent_rate_injects_ten_percent_give_or_take_one_over_ten_thousand_calls() {
    for seed in [0, 1, 42, 0xDEAD_BEEF, u64::MAX] {
        let injected = sequence(&faults("503@10", seed), 10_000).iter().filter(|k| k.is_some()).count();
        assert!((900..=1_100).contains(&injected), "seed {seed}: {injected} of 10,000");
    }
}

#[test]
fn nothing_is_injected_while_disabled_and_the_switch_acts_on_the_next_call() {
    let faults = faults("503@100", 1);
    faults.disable();
    assert!(sequence(&faults, 100).iter().all(Option::is_none));
    faults.enable();
    assert!(sequence(&faults, 100).iter().all(Option::is_some));
    let clone = faults.clone();
    clone.disable();
    assert_eq!(faults.decide(&Target::new("api", "/")), None, "every clone shares the switch");
}

#[test]
fn a_header_asks_for_a_fault_only_under_header_control_and_only_while_enabled() {
    let mut headers = http::HeaderMap::new();
    headers.insert(FAULT_KIND_HEADER, http::HeaderValue::from_static("429+retry-after=20"));
    let asked = |faults: &Faults, headers: &http::HeaderMap| {
        faults.decide(&Target::new("api", "/").with_headers(headers))
    };
    let uncontrolled = Faults::builder().no_metrics().enabled().build();
    assert_eq!(asked(&uncontrolled, &headers), None);
    let controlled = Faults::builder().header_control().no_metrics().build();
    assert_eq!(asked(&controlled, &headers), None, "built off");
    controlled.enable();
    assert_eq!(asked(&controlled, &headers), Some(FaultKind::too_many_requests(Duration::from_secs(20))));
    headers.insert(FAULT_PERCENTAGE_HEADER, http::HeaderValue::from_static("0"));
    assert_eq!(asked(&controlled, &headers), None);
}

#[test]
fn rules_select_by_dependency_and_route_at_path_boundaries() {
    let faults = faults("reset@100@payments/charge", 0);
    let at = |dependency, path| faults.decide(&Target::new(dependency, path));
    assert_eq!(at("payments", "/charge"), Some(FaultKind::Reset));
    assert_eq!(at("payments", "/charge/7"), Some(FaultKind::Reset));
    assert_eq!(at("payments", "/charges"), None);
    assert_eq!(at("inventory", "/charge"), None);
}

#[test]
fn a_spec_reads_back_what_it_writes_and_refuses_what_is_out_of_range() {
    for text in [
        "503@10",
        "429+retry-after=20@100@api:8080/v1",
        "grpc=14@5",
        "latency=200ms@50/x",
        "slow-body=20ms@1.5",
        "broken-body@100,stall@2",
    ] {
        let spec: FaultSpec = text.parse().expect(text);
        assert_eq!(spec.to_string(), text);
    }
    for text in [
        "503",
        "503@101",
        "700@10",
        "grpc=17@1",
        "latency=11m@1",
        "latency=601s@1",
        "explode@10",
        "503@10@/x",
    ] {
        assert!(text.parse::<FaultSpec>().is_err(), "{text} should not parse");
    }
}

#[test]
fn a_status_or_grpc_fault_answers_with_its_head() {
    let answer = answer(FaultKind::too_many_requests(Duration::from_secs(20)), ()).expect("an answer");
    assert_eq!(answer.status(), http::StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(answer.headers()[http::header::RETRY_AFTER], "20");
    let grpc = super::answer(FaultKind::Grpc(14), ()).expect("an answer");
    assert_eq!(grpc.headers()["grpc-status"], "14");
    assert!(super::answer(FaultKind::Reset, ()).is_none());
}

#[test]
fn an_injected_refusal_is_classified_as_a_real_one_and_proves_nothing_was_sent() {
    use crate::transport::Stage;
    use crate::transport::{Refused, walk};
    let refused = InjectedFault::new(FaultKind::Refused);
    let failure = walk(&refused, Refused::MaybeSent).expect("a named cause");
    assert_eq!(
        (failure.verdict, failure.stage),
        (retryscope::Verdict::retryable(retryscope::ErrorType::CONNECT), Stage::NotSent)
    );
    let reset = walk(&InjectedFault::new(FaultKind::Reset), Refused::MaybeSent).expect("a named cause");
    assert_eq!(
        (reset.verdict, reset.stage),
        (retryscope::Verdict::retryable(retryscope::ErrorType::RESET), Stage::Sent)
    );
}

//! Same seed, same bytes; another seed, other bytes.

use retryscope_lab::sim::amplify::{self, AmplifyConfig, AmplifyStrategy};
use retryscope_lab::sim::collapse::{self, CollapseConfig, CollapseStrategy};
use retryscope_lab::sim::herd::{self, DEFAULT_MAX_ATTEMPTS, HerdConfig, HerdStrategy};
use retryscope_lab::sim::output::to_json;
use retryscope_lab::sim::told::{self, ToldConfig, ToldStrategy};

fn herd_json(seed: u64) -> String {
    let rows: Vec<_> = HerdStrategy::ALL
        .map(|strategy| {
            let config =
                HerdConfig { strategy, clients: 20, trials: 5, seed, max_attempts: DEFAULT_MAX_ATTEMPTS };
            herd::simulate(&config).row
        })
        .to_vec();
    to_json(&rows).expect("serialisable")
}

fn amplify_json(seed: u64) -> String {
    let rows: Vec<_> = AmplifyStrategy::ALL
        .iter()
        .map(|&s| amplify::simulate(&AmplifyConfig::new(s, 0.2, seed)).expect("valid configuration").row)
        .collect();
    to_json(&rows).expect("serialisable")
}

fn collapse_json(seed: u64) -> String {
    let rows: Vec<_> = CollapseStrategy::ALL
        .iter()
        .flat_map(|&s| collapse::simulate(&CollapseConfig::new(s, seed)).expect("valid configuration"))
        .collect();
    to_json(&rows).expect("serialisable")
}

fn told_json(seed: u64) -> String {
    let rows: Vec<_> = [20, 100]
        .iter()
        .flat_map(|&clients| ToldStrategy::ALL.map(|s| ToldConfig { clients, ..ToldConfig::new(s, seed) }))
        .map(|config| told::simulate(&config).expect("valid configuration").row)
        .collect();
    to_json(&rows).expect("serialisable")
}

#[test]
fn herd_is_deterministic() {
    assert_eq!(herd_json(42), herd_json(42));
    assert_ne!(herd_json(42), herd_json(43));
}

#[test]
fn amplify_is_deterministic() {
    assert_eq!(amplify_json(42), amplify_json(42));
    assert_ne!(amplify_json(42), amplify_json(43));
}

#[test]
fn collapse_is_deterministic() {
    assert_eq!(collapse_json(42), collapse_json(42));
    assert_ne!(collapse_json(42), collapse_json(43));
}

#[test]
fn told_is_deterministic() {
    assert_eq!(told_json(42), told_json(42));
    assert_ne!(told_json(42), told_json(43));
}

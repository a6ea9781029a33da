//! A call's settings from a `retryscope-config` file: resolved once per
//! call, before its first attempt, from the snapshot in force then — a
//! reload during the call changes nothing for it. Both integrations call
//! this, so that a configured client behaves the same through reqwest and
//! tower.
//!
//! Precedence: a per-request [`RetryOptions`] policy or priority wins over the
//! file; the file's effective settings (its dependency's, else its defaults)
//! replace the builder's policy, retried statuses and hedging; where the
//! file writes them, its body rule (by name, [`NamedBodyRules`]), idempotency
//! key generation and guards (budget, breaker, pacer: see
//! `crate::file_guards`) replace the builder's, key by key. The kill switch
//! (`enabled = false`) wins over everything: one attempt, no hedge, even for a
//! request that brings its own policy — it is the operator's stop during an
//! incident.

use crate::body_rule::SharedBodyRule;
use crate::options::RetryOptions;
use retryscope::Policy;
use retryscope::classify::HttpClassifier;
use retryscope::hedge::HedgePolicy;
use retryscope::overload::Priority;
use retryscope_config::{Config, DependencySettings, Target};
use std::sync::Arc;

/// One call's configuration: the snapshot it started with and its dependency's settings.
#[derive(Debug, Clone)]
pub struct CallConfig {
    snapshot: Arc<Config>,
    settings: Arc<DependencySettings>,
}

impl CallConfig {
    /// The settings of a call to `target` (a gRPC call's path names its
    /// service and method) under `snapshot`: a walk over the match table, an
    /// atomic reference count, no allocation. A client takes its snapshot
    /// through `crate::file_guards::FileGuards::call`, with its guards.
    pub fn of(snapshot: Arc<Config>, target: &Target<'_>) -> Self {
        let settings = Arc::clone(snapshot.resolve(target));
        Self { snapshot, settings }
    }

    /// The dependency's effective settings.
    pub fn settings(&self) -> &DependencySettings {
        &self.settings
    }

    /// The configuration this call runs under.
    pub fn snapshot(&self) -> &Arc<Config> {
        &self.snapshot
    }

    /// The hash of the configuration this call runs under.
    pub fn hash(&self) -> &Arc<str> {
        self.snapshot.hash_str()
    }

    /// The policy: the request's own, else the file's; one attempt under the kill switch.
    pub fn policy(&self, options: &RetryOptions) -> Policy {
        self.settings.call_policy(options.policy_override())
    }

    /// The retried statuses.
    pub fn classifier(&self) -> HttpClassifier {
        self.settings.classifier()
    }

    /// The hedging policy, fresh for this call (its delay is fixed, so there
    /// is nothing to learn across calls); `None` under the kill switch, for
    /// a request with its own policy, or when the file hedges nothing.
    pub fn hedge(&self, options: &RetryOptions) -> Option<HedgePolicy> {
        if options.policy_override().is_some() {
            return None;
        }
        self.settings.hedge_policy()
    }

    /// The request's priority if it set one, else the file's.
    pub fn priority(&self, options: &RetryOptions) -> Priority {
        options.priority_override().unwrap_or(self.settings.priority())
    }

    // --- guards, body rule, idempotency keys from the file (issue 35) ---

    /// The body rule this call reads bodies with: the one registered in code
    /// under the name the file gives its dependency (`body_rule = "name"`),
    /// else the builder's own (`retry_on_body`). A name the client never
    /// registered (though the handle's `KnownNames` did) reads no body.
    pub fn body_rule<'a>(
        &self,
        named: &'a NamedBodyRules,
        own: Option<&'a SharedBodyRule>,
    ) -> Option<&'a SharedBodyRule> {
        match self.settings.body_rule() {
            Some(name) => named.get(name),
            None => own,
        }
    }

    /// Whether this call generates an idempotency key: the file's
    /// `idempotency_keys` where written, else the builder's choice.
    pub fn generates_keys(&self, builder: bool) -> bool {
        self.settings.idempotency_keys().unwrap_or(builder)
    }
}

/// The body rules registered in code by name (`body_rule(name, limit,
/// rule)`), that a file's `body_rule = "name"` selects. As many as code
/// registers; found by a walk, without allocating.
#[derive(Debug, Clone, Default)]
pub struct NamedBodyRules(Vec<(Arc<str>, SharedBodyRule)>);

impl NamedBodyRules {
    /// Registers `rule` under `name`, replacing one of that name.
    pub fn register(&mut self, name: &str, rule: SharedBodyRule) {
        match self.0.iter_mut().find(|(n, _)| &**n == name) {
            Some((_, kept)) => *kept = rule,
            None => self.0.push((Arc::from(name), rule)),
        }
    }

    /// The rule registered as `name`.
    pub fn get(&self, name: &str) -> Option<&SharedBodyRule> {
        self.0.iter().find(|(n, _)| &**n == name).map(|(_, rule)| rule)
    }

    /// The names registered, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| &**n)
    }
}

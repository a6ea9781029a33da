//! The names code registers, that a file may refer to: body rules and
//! fallbacks. A name the file uses and code never registered is refused.

use std::collections::BTreeSet;

/// The body rules and fallbacks registered in code, by name: the input the
/// file's `body_rule` and `fallback` keys are checked against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct KnownNames {
    body_rules: BTreeSet<String>,
    fallbacks: BTreeSet<String>,
}

impl KnownNames {
    /// No names: any `body_rule` or `fallback` in a file is refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a body rule's name.
    pub fn body_rule(mut self, name: impl Into<String>) -> Self {
        self.body_rules.insert(name.into());
        self
    }

    /// Registers a fallback's name.
    pub fn fallback(mut self, name: impl Into<String>) -> Self {
        self.fallbacks.insert(name.into());
        self
    }

    pub(crate) fn has_body_rule(&self, name: &str) -> bool {
        self.body_rules.contains(name)
    }

    pub(crate) fn has_fallback(&self, name: &str) -> bool {
        self.fallbacks.contains(name)
    }

    pub(crate) fn body_rules_list(&self) -> String {
        list(&self.body_rules)
    }

    pub(crate) fn fallbacks_list(&self) -> String {
        list(&self.fallbacks)
    }
}

fn list(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.iter().map(String::as_str).collect::<Vec<_>>().join(", ")
    }
}

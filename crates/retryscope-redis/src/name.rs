//! The operator-chosen name of a quota: the identity of an API key, never
//! the key itself.

use crate::ShareError;
use std::fmt;

/// The longest quota name: an identity, not a credential.
pub const MAX_QUOTA_NAME: usize = 64;

/// Prefixes of common API credentials: a quota name that starts with one is
/// most likely a key pasted where its name belongs, and would sit in Redis
/// key names and `MONITOR` output in clear.
const SECRET_PREFIXES: [&str; 9] =
    ["sk-", "sk_live_", "sk_test_", "rk_live_", "ghp_", "github_pat_", "xoxb-", "AKIA", "AIza"];

/// The name of a quota the replicas of a fleet share: what the operator calls
/// the API key whose quota it is (`openai-prod`, `github-ci-bot`), never the
/// key itself. 1 to [`MAX_QUOTA_NAME`] characters of `A-Z a-z 0-9 . _ -`;
/// a name that starts like a common credential (`sk-`, `ghp_`, `AKIA`, …) is
/// refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QuotaName(Box<str>);

impl QuotaName {
    /// `name`, if it is one (see the type's docs).
    pub fn new(name: &str) -> Result<Self, ShareError> {
        let refuse = |why: &'static str| Err(ShareError::QuotaName(why));
        if name.is_empty() || name.len() > MAX_QUOTA_NAME {
            return refuse("a quota name has 1 to 64 characters");
        }
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
            return refuse("a quota name has only A-Z a-z 0-9 . _ -");
        }
        if SECRET_PREFIXES.iter().any(|prefix| name.starts_with(prefix)) {
            return refuse("a quota name names an API key; this looks like the key itself");
        }
        Ok(Self(name.into()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for QuotaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_identities_and_keys_are_refused() {
        assert_eq!(QuotaName::new("openai-prod").map(|n| n.to_string()).ok().as_deref(), Some("openai-prod"));
        for bad in [
            "",
            "has space",
            "a:b",
            "sk-proj-abc123",
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            "AKIAIOSFODNN7EXAMPLE",
        ] {
            assert!(QuotaName::new(bad).is_err(), "{bad}");
        }
        assert!(QuotaName::new(&"a".repeat(65)).is_err());
        let error = QuotaName::new("sk-live").err().map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("invalid quota name: a quota name names an API key; this looks like the key itself")
        );
    }
}

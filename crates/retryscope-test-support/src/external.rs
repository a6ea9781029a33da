//! External services a test needs (Redis, PostgreSQL, rotel), named by an
//! environment variable. Without it the test says it was skipped — except
//! under CI, which starts the service and must never pass a test without it.

/// The value of `var` (an address, a URL, a path to a binary), or `None`
/// after printing `skipped: VAR not set (what)`. Panics under CI.
pub fn from_env(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(std::env::var_os("CI").is_none(), "CI must set {var} ({what})");
            println!("skipped: {var} not set ({what})");
            None
        }
    }
}

//! External services a test needs (a collector, a database, Redis), named by an
//! environment variable: without it the test says it was skipped and passes —
//! except under CI, which provides every service and must never pass a test
//! without running it.

/// The value of `var` (what it names: `what`), or `None` after printing
/// `skipped: {var} not set ({what})`. Panics when `CI` is set and `var` is not.
pub fn required(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(std::env::var_os("CI").is_none(), "CI must set {var} ({what})");
            println!("skipped: {var} not set ({what})");
            None
        }
    }
}

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

/// Whether `program` (what it is for: `what`) is on `PATH`; when it is not,
/// `false` after printing `skipped: {program} not on PATH ({what})`. Panics
/// when `CI` is set and it is not: CI installs every program a test starts.
pub fn on_path(program: &str, what: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()));
    if !found {
        assert!(std::env::var_os("CI").is_none(), "CI must have {program} on PATH ({what})");
        println!("skipped: {program} not on PATH ({what})");
    }
    found
}

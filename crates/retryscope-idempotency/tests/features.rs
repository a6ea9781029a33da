//! The Redis tests only build with the `redis` feature. The workspace's test
//! run enables it (through the examples package); this test makes sure a CI run
//! can never skip them silently.

#[test]
fn ci_runs_the_redis_tests() {
    let in_ci = std::env::var_os("CI").is_some();
    assert!(
        !in_ci || cfg!(feature = "redis"),
        "CI must build retryscope-idempotency with `redis` so that tests/redis.rs runs"
    );
}

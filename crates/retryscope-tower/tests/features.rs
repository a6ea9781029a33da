//! The gRPC tests only build with the `grpc` feature. The workspace's test run
//! enables it (through the examples package); this test makes sure a CI run can
//! never skip them silently.

#[test]
fn ci_runs_the_grpc_tests() {
    let in_ci = std::env::var_os("CI").is_some();
    if in_ci && !cfg!(feature = "grpc") {
        panic!("CI must build retryscope-tower with `grpc` so that tests/grpc.rs runs");
    }
}

//! The README and every guide page, doctested from the files themselves: each
//! Rust block compiles and runs as written (`cargo test -p
//! retryscope-conformance --doc`), so nothing a reader copies is a hand-made
//! copy that drifts. The blocks' hidden lines (`# …`) start what their text
//! says they need, from [`crate::services`], and check it with [`crate::checks`].

#[doc = include_str!("../../../README.md")]
mod readme {}

macro_rules! guide {
    ($($page:ident => $file:literal),* $(,)?) => {
        $(
            #[doc = include_str!(concat!("../../../docs/guide/", $file))]
            mod $page {}
        )*
    };
}

guide! {
    engine => "engine.md",
    dependencies => "dependencies.md",
    existing_services => "existing-services.md",
    grpc => "grpc.md",
    hedging => "hedging.md",
    fallbacks => "fallbacks.md",
    rate_limits => "rate-limits.md",
    idempotency => "idempotency.md",
    databases => "databases.md",
    jobs => "jobs.md",
    call_chains => "call-chains.md",
    lab => "lab.md",
    operations => "operations.md",
    where_features_meet => "where-features-meet.md",
    testing => "testing.md",
    configuration => "configuration.md",
    advise => "advise.md",
}

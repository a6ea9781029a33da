//! A66's instrument names, units, attributes and buckets, and A96's.

/// A66: attempts started, finished or not (counter, `{attempt}`).
pub(crate) const ATTEMPT_STARTED: &str = "grpc.client.attempt.started";
/// A66: each attempt's duration, to its status (histogram, `s`).
pub(crate) const ATTEMPT_DURATION: &str = "grpc.client.attempt.duration";
/// A66: request message bytes an attempt sent, without gRPC framing (histogram, `By`).
pub(crate) const ATTEMPT_SENT_SIZE: &str = "grpc.client.attempt.sent_total_compressed_message_size";
/// A66: response message bytes an attempt received, without gRPC framing (histogram, `By`).
pub(crate) const ATTEMPT_RCVD_SIZE: &str = "grpc.client.attempt.rcvd_total_compressed_message_size";
/// A66: each call's duration, to the status reaching the caller (histogram, `s`).
pub(crate) const CALL_DURATION: &str = "grpc.client.call.duration";
/// A96: retries of a call that had any (histogram, `{retry}`).
pub(crate) const CALL_RETRIES: &str = "grpc.client.call.retries";
/// A96: transparent retries of a call that had any (histogram, `{transparent_retry}`).
pub(crate) const CALL_TRANSPARENT_RETRIES: &str = "grpc.client.call.transparent_retries";
/// A96: hedges (copies beyond the first) of a hedged call that had any
/// (histogram, `{hedge}`).
pub(crate) const CALL_HEDGES: &str = "grpc.client.call.hedges";
/// A96: a call's time with no attempt running (histogram, `s`).
pub(crate) const CALL_RETRY_DELAY: &str = "grpc.client.call.retry_delay";

/// `grpc.method`: `package.Service/Method`, or [`OTHER_METHOD`].
pub(crate) const METHOD: &str = "grpc.method";
/// `grpc.target`: the channel's target, `scheme://authority`.
pub(crate) const TARGET: &str = "grpc.target";
/// `grpc.status`: the status name (`UNAVAILABLE`).
pub(crate) const STATUS: &str = "grpc.status";
/// A66's `grpc.method` value for methods beyond the bound on distinct names.
pub(crate) const OTHER_METHOD: &str = "other";

/// A66's latency buckets, in seconds.
pub(crate) const LATENCY_BUCKETS: [f64; 41] = [
    0.0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008,
    0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4,
    0.5, 0.65, 0.8, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0,
];
/// A66's size buckets, in bytes.
pub(crate) const SIZE_BUCKETS: [f64; 14] = [
    0.0,
    1_024.0,
    2_048.0,
    4_096.0,
    16_384.0,
    65_536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
    268_435_456.0,
    1_073_741_824.0,
    4_294_967_296.0,
];
/// A96's buckets for `grpc.client.call.retries`.
pub(crate) const RETRY_BUCKETS: [f64; 5] = [1.0, 2.0, 3.0, 4.0, 5.0];
/// A96's buckets for `grpc.client.call.transparent_retries`.
pub(crate) const TRANSPARENT_RETRY_BUCKETS: [f64; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0];

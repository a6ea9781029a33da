//! What every storm's run shares: a runtime of its own, the chart and summary
//! it writes, the linger for a last scrape, and the totals it measured.

use super::metrics::Totals;
use super::{StormArgs, StormError, error, telemetry};
use std::time::Duration;

/// Runs one storm to its end on a multi-threaded runtime of its own: what every
/// storm's `run` does once its flags are checked (and a fleet replica's).
///
/// Once the storm's future has ended, the runtime is shut down without
/// waiting for its blocking pool: whatever is still there is left over, such
/// as a fleet replica's watcher of standard input, whose read blocks until
/// the storm closes the pipe, which it does only when the replica has ended.
/// Dropped the usual way, the runtime waited for that read, and every
/// replica outlived its report until the storm gave up on it (5 s each, one
/// after another: 40 s a policy for a fleet of 8).
pub(crate) fn block_on<T>(storm: impl Future<Output = Result<T, StormError>>) -> Result<T, StormError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| error("starting the runtime", e))?;
    let result = runtime.block_on(storm);
    runtime.shutdown_background();
    result
}

/// Writes `{stem}.svg` with `chart` and `{stem}.json` with `json` into `--out`.
pub(crate) fn write_outputs<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    args: &StormArgs,
    stem: &str,
    json: &serde_json::Value,
    chart: impl FnOnce(&std::path::Path) -> Result<(), E>,
) -> Result<(), StormError> {
    std::fs::create_dir_all(&args.out).map_err(|e| error("creating --out", e))?;
    let svg = args.out.join(format!("{stem}.svg"));
    chart(&svg).map_err(|e| error("writing the chart", e))?;
    let summary = args.out.join(format!("{stem}.json"));
    std::fs::write(&summary, serde_json::to_string_pretty(json).map_err(|e| error("encoding", e))?)
        .map_err(|e| error("writing the summary", e))?;
    eprintln!("storm: wrote {} and {}", svg.display(), summary.display());
    Ok(())
}

/// Flushes the telemetry, then keeps serving metrics for `--linger` seconds
/// (for a last scrape) while the caller still holds its clients.
pub(crate) async fn finish(args: &StormArgs, telemetry: &telemetry::Telemetry) {
    telemetry.flush();
    if args.linger > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(args.linger)).await;
    }
}

/// What happened between two readings of the cumulative totals.
pub(crate) fn delta(after: Totals, before: Totals) -> Totals {
    Totals {
        requests: after.requests - before.requests.min(after.requests),
        retries: after.retries - before.retries.min(after.retries),
        attempts: after.attempts - before.attempts.min(after.attempts),
        failed: after.failed - before.failed.min(after.failed),
        succeeded: after.succeeded - before.succeeded.min(after.succeeded),
    }
}

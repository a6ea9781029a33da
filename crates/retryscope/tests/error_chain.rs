//! `RetryError` as an error reporter prints it: what happened in `Display`, the
//! last attempt's error once, as its `source()` — never twice in the chain.

use retryscope::{ErrorType, Jitter, Policy, Retryable, StopReason, Verdict};
use std::error::Error;
use std::fmt;
use std::time::Duration;

/// A dependency's error with a source of its own, as a client library's would be.
#[derive(Debug)]
struct Unavailable {
    cause: std::io::Error,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("inventory service unavailable")
    }
}

impl Error for Unavailable {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.cause)
    }
}

/// Every error of the chain, outermost first, as anyhow's `{:#}` and eyre print them.
fn chain(e: &(dyn Error + 'static)) -> Vec<String> {
    std::iter::successors(Some(e), |&e| e.source()).map(ToString::to_string).collect()
}

fn three_attempts() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .base_delay(Duration::from_millis(10))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

#[tokio::test(start_paused = true)]
async fn the_last_error_appears_exactly_once_in_the_chain() {
    let err = (|| async {
        Err::<(), _>(Unavailable {
            cause: std::io::Error::new(std::io::ErrorKind::ConnectionReset, "peer reset"),
        })
    })
    .retry(three_attempts())
    .classify(|_: &Result<(), Unavailable>| Verdict::retryable(ErrorType::Kind("unavailable")))
    .await
    .unwrap_err();
    assert_eq!(err.reason(), StopReason::AttemptsExhausted);

    let links = chain(&err);
    assert_eq!(
        links,
        [
            "gave up after 3 attempt(s): all attempts failed; last failure: unavailable",
            "inventory service unavailable",
            "peer reset",
        ]
    );
    let joined = links.join(": ");
    assert_eq!(joined.matches("inventory service unavailable").count(), 1, "{joined}");
    assert_eq!(joined.matches("peer reset").count(), 1, "{joined}");
}

#[test]
fn a_stop_without_an_error_says_what_failed_and_has_no_source() {
    let timed_out = retryscope::RetryError::<std::io::Error>::new(
        StopReason::AttemptsExhausted,
        2,
        Some(ErrorType::TIMEOUT),
        None,
    );
    assert_eq!(
        timed_out.to_string(),
        "gave up after 2 attempt(s): all attempts failed; last failure: timeout"
    );
    assert!(timed_out.source().is_none());

    let refused = retryscope::RetryError::<std::io::Error>::new(StopReason::CircuitOpen, 0, None, None);
    assert_eq!(refused.to_string(), "gave up after 0 attempt(s): the circuit breaker is open");
}

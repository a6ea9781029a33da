//! Your own retry rule for HTTP responses, asked before the built-in ones.

use http::{HeaderMap, StatusCode};
use retryscope::Verdict;
use retryscope::classify::HttpClassifier;
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

/// A user's retry rule for HTTP responses: looks at the status and headers and
/// returns a verdict, or `None` to let the built-in status rules decide.
///
/// Called once per response, on the task that made the request: keep it quick
/// and free of I/O. It sees no body — see [below](#head-rules-see-no-body-body-rules-are-opt-in-and-bounded)
/// for why, and [`BodyRule`](crate::BodyRule) for a rule that does.
///
/// What the verdict means:
///
/// - [`Verdict::Success`]: the response goes to the caller as it is, whatever
///   its status.
/// - [`Verdict::Retryable`]: retried, if the request is safe to run again and
///   the policy, budget and breaker allow. Without a hint of its own, the
///   response's `Retry-After` or `RateLimit` header is honoured, as for the
///   built-in statuses.
/// - [`Verdict::Permanent`]: returned at once, after one attempt.
///
/// The `error.type` in the verdict is what the telemetry reports: use a status
/// (`ErrorType::Status(200)`) or a `&'static str` kind of your own — a fixed
/// name, never a value from the response, so that metric labels stay bounded.
///
/// Any `Fn(StatusCode, &HeaderMap) -> Option<Verdict>` closure is a rule;
/// [`rule_fn`] helps the compiler infer its argument types.
///
/// A [`ResponseRule`] looks at a response's status and headers and either
/// decides ([`Some`] verdict) or leaves the decision to the built-in status
/// rules ([`None`]). Both integrations take one through the same setter,
/// `retry_rule`: `RetryMiddlewareBuilder::retry_rule` (retryscope-reqwest) and
/// `RetryLayerBuilder::retry_rule` (retryscope-tower, HTTP mode).
///
/// # Head rules see no body; body rules are opt-in and bounded
///
/// A `ResponseRule` never sees the body: a body is a stream, and judging it
/// means holding the response back until it has been read — which would break
/// every streamed response (server-sent events, downloads, long-polling) if
/// done for all of them. So a head rule costs nothing and reads nothing. When
/// the server says "a 200 with an error body" in its head (`x-retry: please`,
/// an error-code header, a `Retry-After` on a 200), a head rule is all you
/// need, as in the example below.
///
/// When only the body says it, use a [`BodyRule`](crate::BodyRule)
/// (`retry_on_body`): it selects, by the head, the few responses whose body
/// it reads (a JSON 200, say), reads them up to a limit of at most 1 MiB
/// within the attempt's timeout, and hands the caller the whole body whatever
/// it decides. What that costs — the selected responses' bytes held in memory
/// and their late delivery to the caller — is in
/// [`BodyRule`](crate::BodyRule). The body rule is asked first, then the
/// head rule, then the built-in rules.
///
/// # What a rule cannot override
///
/// The rule's verdict goes through the same request-safety guard as the
/// built-in one: a
/// rule that says "retry" for a POST without an `Idempotency-Key` (and not
/// marked [`idempotent`](crate::RetryOptions::idempotent)) makes it
/// unrepeatable, and the POST runs once. A body that cannot be sent again is
/// never retried either, and retrying at one layer still applies. The policy,
/// the deadline, the budget and the breaker bound the retries a rule asks for,
/// as they bound all others.
///
/// # Example
///
/// ```
/// use http::{HeaderMap, StatusCode};
/// use retryscope::{ErrorType, Verdict};
/// use retryscope_http::{ResponseRule, rule_fn};
///
/// // The server marks a 200 whose body is an error with `x-retry: please`.
/// let rule = rule_fn(|status, headers| {
///     let asked = headers.get("x-retry").is_some_and(|v| v == "please");
///     (status == StatusCode::OK && asked).then_some(Verdict::retryable(ErrorType::Kind("x_retry")))
/// });
///
/// let mut headers = HeaderMap::new();
/// assert_eq!(rule.verdict(StatusCode::OK, &headers), None, "the built-in rules decide");
/// headers.insert("x-retry", "please".parse()?);
/// assert_eq!(rule.verdict(StatusCode::OK, &headers), Some(Verdict::retryable(ErrorType::Kind("x_retry"))));
/// # Ok::<(), http::header::InvalidHeaderValue>(())
/// ```
///
/// Then `RetryMiddleware::builder(policy).retry_rule(rule)` (reqwest) or
/// `RetryLayer::builder(policy).retry_rule(rule)` (tower).
pub trait ResponseRule: Send + Sync + 'static {
    /// The verdict on a response with `status` and `headers`, or `None` to let
    /// the built-in rules decide.
    fn verdict(&self, status: StatusCode, headers: &HeaderMap) -> Option<Verdict>;
}

impl<F> ResponseRule for F
where
    F: Fn(StatusCode, &HeaderMap) -> Option<Verdict> + Send + Sync + 'static,
{
    fn verdict(&self, status: StatusCode, headers: &HeaderMap) -> Option<Verdict> {
        self(status, headers)
    }
}

/// A closure as a [`ResponseRule`]. Passing the closure through here, rather
/// than straight to `retry_rule`, lets the compiler infer its argument types
/// (`|status, headers| ..` instead of `|status: StatusCode, headers: &HeaderMap| ..`).
pub fn rule_fn<F>(rule: F) -> impl ResponseRule
where
    F: Fn(StatusCode, &HeaderMap) -> Option<Verdict> + Send + Sync + 'static,
{
    rule
}

/// A rule as the builders keep it: shared by every request of a client.
#[derive(Clone)]
pub struct SharedRule(Arc<dyn ResponseRule>);

impl SharedRule {
    /// Shares `rule`.
    pub fn new(rule: impl ResponseRule) -> Self {
        Self(Arc::new(rule))
    }
}

impl fmt::Debug for SharedRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A closure has nothing to show; that there is a rule is what matters.
        f.write_str("SharedRule(..)")
    }
}

/// The verdict on a response before the request-safety guard: the body
/// rule's verdict `judged` when it gave one
/// ([`SharedBodyRule::judge`](crate::body_rule::SharedBodyRule::judge)), then
/// the user's head `rule`, then `classifier`'s status rules. The caller
/// applies the guard ([`Safety::guard`](crate::safety::Safety::guard)) to the
/// result, so no rule can make an unsafe request run twice.
pub fn classify_response(
    judged: Option<Verdict>,
    rule: Option<&SharedRule>,
    classifier: HttpClassifier,
    status: StatusCode,
    headers: &HeaderMap,
    now: SystemTime,
) -> Verdict {
    match judged.or_else(|| rule.and_then(|rule| rule.0.verdict(status, headers))) {
        // A server that asks to be retried says when as it does for a 503: its
        // `Retry-After` counts unless the rule gave a wait of its own.
        Some(Verdict::Retryable { error, hint: None }) => {
            Verdict::Retryable { error, hint: retryscope::hints::from_headers(headers, now) }
        }
        Some(verdict) => verdict,
        None => classifier.classify_response(status, headers, now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RetryOptions;
    use crate::safety::Safety;
    use crate::transport::Stage;
    use http::Method;
    use retryscope::ErrorType;
    use retryscope::Hint;
    use std::time::Duration;

    const ASKED: ErrorType = ErrorType::Kind("x_retry");

    /// Retries whatever carries `x-retry`; makes a 503 permanent.
    struct Marked;

    impl ResponseRule for Marked {
        fn verdict(&self, status: StatusCode, headers: &HeaderMap) -> Option<Verdict> {
            if headers.contains_key("x-retry") {
                return Some(Verdict::retryable(ASKED));
            }
            (status == StatusCode::SERVICE_UNAVAILABLE).then_some(Verdict::permanent(ErrorType::Status(503)))
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, http::HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn the_rule_is_asked_first_and_none_leaves_the_built_in_rules() {
        let rule = SharedRule::new(Marked);
        let now = SystemTime::now();
        let c = HttpClassifier::new();
        let marked = headers(&[("x-retry", "please")]);
        assert_eq!(
            classify_response(None, Some(&rule), c, StatusCode::OK, &marked, now),
            Verdict::retryable(ASKED)
        );
        let plain = HeaderMap::new();
        let permanent = Verdict::permanent(ErrorType::Status(503));
        assert_eq!(
            classify_response(None, Some(&rule), c, StatusCode::SERVICE_UNAVAILABLE, &plain, now),
            permanent
        );
        let built_in = c.classify_response(StatusCode::BAD_GATEWAY, &plain, now);
        assert_eq!(classify_response(None, Some(&rule), c, StatusCode::BAD_GATEWAY, &plain, now), built_in);
        assert_eq!(classify_response(None, None, c, StatusCode::OK, &marked, now), Verdict::Success);
    }

    #[test]
    fn a_retry_the_rule_asks_for_honours_the_servers_retry_after() {
        let rule = SharedRule::new(Marked);
        let marked = headers(&[("x-retry", "please"), ("retry-after", "3")]);
        let verdict = classify_response(
            None,
            Some(&rule),
            HttpClassifier::new(),
            StatusCode::OK,
            &marked,
            SystemTime::now(),
        );
        let hint = Some(Hint::retry_after(Duration::from_secs(3)));
        assert_eq!(verdict, Verdict::Retryable { error: ASKED, hint });
    }

    #[test]
    fn the_closure_form_is_a_rule() {
        let rule =
            SharedRule::new(rule_fn(|status, _| status.is_success().then_some(Verdict::retryable(ASKED))));
        let verdict = classify_response(
            None,
            Some(&rule),
            HttpClassifier::new(),
            StatusCode::OK,
            &HeaderMap::new(),
            SystemTime::now(),
        );
        assert_eq!(verdict, Verdict::retryable(ASKED));
    }

    #[test]
    fn a_rule_cannot_make_a_post_run_twice() {
        let rule = SharedRule::new(Marked);
        let marked = headers(&[("x-retry", "please")]);
        let verdict = classify_response(
            None,
            Some(&rule),
            HttpClassifier::new(),
            StatusCode::OK,
            &marked,
            SystemTime::now(),
        );
        let safety = Safety::of(&Method::POST, &HeaderMap::new(), &RetryOptions::new(), true);
        assert_eq!(safety.guard(verdict, Stage::Sent), Verdict::unrepeatable(ASKED));
    }
}

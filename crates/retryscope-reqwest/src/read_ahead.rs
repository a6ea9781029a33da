//! Reading a selected response's body ahead for the user's body rule, and
//! handing the caller the response whole again.
//!
//! The read runs inside the attempt, so the engine's attempt timeout and
//! deadline bound it. What the rule decided travels with the response to the
//! classifier in a private extension ([`Judged`]), which [`take_judged`]
//! removes before the caller sees the response.

use reqwest::{Body, Response, ResponseBuilderExt};
use retryscope::Verdict;
use retryscope_http::__private::body_rule::SharedBodyRule;

/// The body rule's verdict on the response that carries it.
#[derive(Debug, Clone, Copy)]
struct Judged(Verdict);

/// `response` judged by `rule` when the rule selects it, with its body read
/// ahead and given back in front of the rest; any other response as it came.
/// An error while reading fails the attempt.
pub(crate) async fn judge(rule: &SharedBodyRule, response: Response) -> Result<Response, reqwest::Error> {
    if !rule.wants_body(response.status(), response.headers()) {
        return Ok(response);
    }
    let url = response.url().clone();
    let (parts, body) = http::Response::from(response).into_parts();
    let (verdict, body) = rule.read_ahead(parts.status, &parts.headers, body).await?;
    let mut response = rebuilt(parts, url, Body::wrap(body));
    if let Some(verdict) = verdict {
        response.extensions_mut().insert(Judged(verdict));
    }
    Ok(response)
}

/// The body rule's verdict on `response`, if it gave one.
pub(crate) fn judged(response: &Response) -> Option<Verdict> {
    response.extensions().get::<Judged>().map(|judged| judged.0)
}

/// Removes the body rule's verdict: the caller's response carries nothing of ours.
pub(crate) fn take_judged(mut response: Response) -> Response {
    response.extensions_mut().remove::<Judged>();
    response
}

/// A `Response` from `parts` and `body` again, still saying it came from
/// `url`: reqwest's conversion from `http::Response` reads the URL from an
/// extension only its own builder extension can set.
pub(crate) fn rebuilt(mut parts: http::response::Parts, url: reqwest::Url, body: Body) -> Response {
    if let Ok(carrier) = http::Response::builder().url(url).body(()) {
        parts.extensions.extend(carrier.into_parts().0.extensions);
    }
    Response::from(http::Response::from_parts(parts, body))
}

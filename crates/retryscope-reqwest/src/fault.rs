//! Fault injection for reqwest clients: a middleware added *after*
//! [`RetryMiddleware`](crate::RetryMiddleware), so that it runs below it and
//! the retries, budgets, breakers and pacers meet injected failures as real
//! ones.
//!
//! What to inject, how often, the live switch, the header control and the
//! marks on spans and metrics are [`Faults`]' (`retryscope_http::fault`,
//! shared with `retryscope-tower`); the middleware only applies its decisions.
//!
//! ```no_run
//! use retryscope::Policy;
//! use retryscope_reqwest::RetryMiddleware;
//! use retryscope_reqwest::fault::{FaultMiddleware, FaultSpec, Faults};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let spec: FaultSpec = "503@10,reset@2".parse()?;
//! let faults = Faults::builder().spec(spec).seed(7).build();
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryMiddleware::new(Policy::interactive()))
//!     .with(FaultMiddleware::new(faults.clone())) // below the retries
//!     .build();
//! faults.enable(); // and `faults.disable()` to stop, live
//! let _ = client.get("http://127.0.0.1:8080/inventory").send().await?;
//! # Ok(()) }
//! ```
//!
//! A response the middleware answers instead of the call, or whose body it
//! slows or breaks, is rebuilt from its parts: its `url()` is reqwest's
//! placeholder, not the request's.

pub use retryscope_http::fault::{
    FAULT_KIND_HEADER, FAULT_PERCENTAGE_HEADER, FaultBody, FaultKind, FaultRate, FaultRule, FaultSpec,
    FaultSpecError, Faults, FaultsBuilder, InjectedFault,
};

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use retryscope_http::fault::Target;

/// Injects [`Faults`] into the requests that pass it.
#[derive(Debug, Clone)]
pub struct FaultMiddleware {
    faults: Faults,
}

impl FaultMiddleware {
    /// Injects `faults` (built off: enable them to inject).
    pub const fn new(faults: Faults) -> Self {
        Self { faults }
    }
}

#[async_trait::async_trait]
impl Middleware for FaultMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        // Off, one atomic load: nothing named or built.
        if !self.faults.is_enabled() {
            return next.run(request, extensions).await;
        }
        let kind = {
            let url = request.url();
            // As the retry middleware names it: `Url::port` is `None` for the scheme's port.
            let dependency =
                retryscope::dependency::dependency_name(url.host_str().unwrap_or_default(), url.port(), None);
            self.faults.decide(&Target::new(&dependency, url.path()).with_headers(request.headers()))
        };
        let Some(kind) = kind else { return next.run(request, extensions).await };
        match kind {
            FaultKind::Latency(delay) => {
                tokio::time::sleep(delay).await;
                next.run(request, extensions).await
            }
            FaultKind::SlowBody(_) | FaultKind::BrokenBody => {
                let response = http::Response::<reqwest::Body>::from(next.run(request, extensions).await?);
                Ok(Response::from(
                    response.map(|body| reqwest::Body::wrap(FaultBody::under(Some(kind), body))),
                ))
            }
            FaultKind::Stall => std::future::pending().await,
            FaultKind::Refused | FaultKind::Reset => {
                Err(reqwest_middleware::Error::middleware(InjectedFault::new(kind)))
            }
            other => match retryscope_http::fault::answer(other, reqwest::Body::from(Vec::new())) {
                Some(answer) => Ok(Response::from(answer)),
                // A kind this middleware does not know yet fails like a reset.
                None => Err(reqwest_middleware::Error::middleware(InjectedFault::new(FaultKind::Reset))),
            },
        }
    }
}

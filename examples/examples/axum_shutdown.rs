//! An axum service that already has a `tracing` subscriber, retryscope's
//! telemetry composed into it, and a graceful shutdown, so that the
//! telemetry's `shutdown()` runs and flushes the last spans.
//!
//! ```text
//! # with a collector listening (e.g. `docker compose up -d`, or rotel-agent):
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_SERVICE_NAME=checkout \
//!     cargo run -p examples --example axum_shutdown
//! SERVE=1 cargo run -p examples --example axum_shutdown   # serve on 127.0.0.1:3000 until Ctrl-C or SIGTERM
//! ```
//!
//! `GET /orders` calls a stock service (a route of the same server that
//! answers 503 once, then 200) through `RetryMiddleware`, inside the handler's
//! span: the collector receives the handler's span and two attempt spans under
//! it. Without `SERVE`, the program calls its own `/orders` once and then shuts
//! down as it would on SIGTERM, so it exits by itself. Without a collector it
//! still exits normally: the first failed export logs one line while it runs,
//! and `shutdown()`'s error, logged at the end, names the endpoint.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Router, routing::get};
use retryscope::Policy;
use retryscope_reqwest::RetryMiddleware;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;
use tracing::Instrument as _;
use tracing_subscriber::{EnvFilter, Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _};

#[derive(Clone)]
struct App {
    client: reqwest_middleware::ClientWithMiddleware,
    stock_url: String,
    stock_calls: Arc<AtomicU32>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The service's own subscriber, with retryscope's layer added to it.
    let telemetry = retryscope_otel::OtlpConfig::default().build()?; // reads OTEL_*, installs nothing
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_filter(EnvFilter::new("info"))) // the service's own
        .with(telemetry.layer()) // retryscope's spans, with a filter of their own
        .init();
    telemetry.install_globals(); // providers and W3C propagator, before building clients

    let serve = std::env::var_os("SERVE").is_some();
    let listener =
        tokio::net::TcpListener::bind(if serve { "127.0.0.1:3000" } else { "127.0.0.1:0" }).await?;
    let addr = listener.local_addr()?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::builder().no_proxy().build()?)
        .with(RetryMiddleware::new(Policy::interactive()))
        .build();
    // A clone outlives the router: see the end of `main`.
    let state = App {
        client: client.clone(),
        stock_url: format!("http://{addr}/stock"),
        stock_calls: Arc::default(),
    };
    let app = Router::new().route("/orders", get(orders)).route("/stock", get(stock)).with_state(state);

    let (stop, stopped) = oneshot::channel();
    if serve {
        tracing::info!("serving on http://{addr}/orders until Ctrl-C or SIGTERM");
        std::mem::forget(stop); // never sent: only a signal stops the server
    } else {
        tokio::spawn(async move {
            match reqwest::get(format!("http://{addr}/orders")).await {
                Ok(response) => tracing::info!(status = %response.status(), "GET /orders"),
                Err(error) => tracing::warn!(%error, "GET /orders"),
            }
            let _ = stop.send(());
        });
    }
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal(stopped)).await?;

    // Every request has been answered: flush what they recorded, and log what was lost.
    if let Err(error) = telemetry.shutdown() {
        tracing::warn!(error = &error as &dyn std::error::Error, "telemetry not flushed");
    }
    // Only now: `serve` dropped the router's state when it returned, and the
    // client's guards (and so its budget, breaker and pacer gauges) live as
    // long as a clone of it does — the last export above needed them.
    drop(client);
    Ok(())
}

/// Ctrl-C, SIGTERM (what `docker stop` and Kubernetes send), or `stop`.
async fn shutdown_signal(stop: oneshot::Receiver<()>) {
    let terminate = async {
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => drop(terminate.recv().await),
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
        _ = stop => {}
    }
    tracing::info!("shutting down: answering what is in flight, then flushing telemetry");
}

/// Calls the stock service through the retry middleware, in the handler's span.
async fn orders(State(app): State<App>) -> Result<String, StatusCode> {
    let span = tracing::info_span!("GET /orders");
    async {
        let response = app.client.get(&app.stock_url).send().await.map_err(|_| StatusCode::BAD_GATEWAY)?;
        let stock = response.text().await.map_err(|_| StatusCode::BAD_GATEWAY)?;
        Ok(format!("ordered; {stock}"))
    }
    .instrument(span)
    .await
}

/// A stock service that fails its first call.
async fn stock(State(app): State<App>) -> (StatusCode, &'static str) {
    match app.stock_calls.fetch_add(1, Ordering::Relaxed) {
        0 => (StatusCode::SERVICE_UNAVAILABLE, "try again"),
        _ => (StatusCode::OK, "7 in stock"),
    }
}

//! The tonic unary variants: `test.Echo/Unary` over one HTTP/2 connection.

use crate::telemetry::HandRolled;
use crate::{CallError, Caller};
use bytes::Bytes;
use http_body::Body as HttpBody;
use opentelemetry::KeyValue;
use retryscope_test_support::echo::{EchoClient, echo};
use std::net::SocketAddr;
use std::time::Instant;
use tonic::body::Body;
use tonic::codegen::StdError;
use tracing::Instrument as _;

/// A lazily connecting channel to the server (it connects at the first call,
/// in the warm-up), and the server's URI for the retry layer's `origin`.
pub(crate) fn channel(server: SocketAddr) -> Result<(tonic::transport::Channel, http::Uri), CallError> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{server}"))?;
    Ok((endpoint.connect_lazy(), endpoint.uri().clone()))
}

/// One unary call through `T` (a channel, or the retry layer around one).
pub(crate) struct Call<T> {
    pub(crate) client: EchoClient<T>,
}

impl<T> Caller for Call<T>
where
    T: tonic::client::GrpcService<Body>,
    T::Error: Into<StdError>,
    T::ResponseBody: HttpBody<Data = Bytes> + Send + 'static,
    <T::ResponseBody as HttpBody>::Error: Into<StdError> + Send,
{
    async fn call(&mut self, _: u64) -> Result<(), CallError> {
        check(self.client.unary(echo("hi")).await?)
    }
}

fn check(reply: tonic::Response<retryscope_test_support::echo::EchoReply>) -> Result<(), CallError> {
    let message = reply.into_inner().message;
    if message != "hi" {
        return Err(format!("echoed {message:?}").into());
    }
    Ok(())
}

/// A bare channel inside one CLIENT span (bridged by tracing-opentelemetry),
/// with one counter add and one histogram record per call.
pub(crate) struct HandRolledCall {
    pub(crate) client: EchoClient<tonic::transport::Channel>,
    pub(crate) server: SocketAddr,
    pub(crate) metrics: HandRolled,
}

impl Caller for HandRolledCall {
    async fn call(&mut self, _: u64) -> Result<(), CallError> {
        let span = tracing::info_span!(
            "test.Echo/Unary",
            otel.kind = "client",
            rpc.system = "grpc",
            rpc.service = "test.Echo",
            rpc.method = "Unary",
            server.address = %self.server.ip(),
            server.port = self.server.port(),
            rpc.grpc.status_code = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = self.client.unary(echo("hi")).instrument(span.clone()).await;
        let code = match &result {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        };
        span.record("rpc.grpc.status_code", code as i64);
        self.metrics.record(
            started.elapsed().as_secs_f64(),
            &[
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", "test.Echo"),
                KeyValue::new("rpc.method", "Unary"),
                KeyValue::new("rpc.grpc.status_code", code as i64),
            ],
        );
        check(result?)
    }
}

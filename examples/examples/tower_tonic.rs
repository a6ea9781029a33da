//! Retry a tonic channel's calls the way gRPC specifies (gRFC A6), configured
//! by a gRPC service config, and export every attempt over OTLP.
//!
//! ```text
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 OTEL_EXPORTER_OTLP_PROTOCOL=grpc \
//!     OTEL_SERVICE_NAME=example cargo run -p examples --example tower_tonic
//! ```
//!
//! The example serves `helloworld.Greeter` on a loopback port, answering
//! UNAVAILABLE twice and then OK, and calls it through the layer: the collector
//! receives three `helloworld.Greeter/SayHello` attempt spans (`rpc.grpc.status_code` 14, 14, 0) and `retryscope.retries` = 2 with
//! `retryscope.retry.reason` = `UNAVAILABLE`.
//!
//! The Greeter's client and server below are what `tonic-build` generates from
//! `helloworld.proto`, written out by hand so that the example needs no
//! `protoc`. In an application, use the generated `GreeterClient` as it is:
//! only the channel changes.

use retryscope_tower::RetryLayer;
use retryscope_tower::grpc::GrpcRetry;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tonic::transport::Endpoint;
use tower::ServiceBuilder;

/// A gRPC service config, as gRPC's documentation writes it.
const SERVICE_CONFIG: &str = r#"{
  "methodConfig": [{
    "name": [{"service": "helloworld.Greeter"}],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.1s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let telemetry = retryscope_otel::init_otlp()?;
    let address = greeter::serve_flaky(2).await?;

    // The channel the application already has…
    let endpoint = Endpoint::from_shared(format!("http://{address}"))?;
    let channel = endpoint.connect_lazy();
    // …gains A6 retries and per-attempt telemetry with one layer. tonic clients
    // send only the path: `origin` names the server for the telemetry.
    let retry = GrpcRetry::from_service_config(SERVICE_CONFIG)?;
    let layer = RetryLayer::grpc(retry).origin(endpoint.uri().clone()).build();
    let channel = ServiceBuilder::new().layer(layer).service(channel);

    let mut client = greeter::GreeterClient::new(channel);
    let reply = client.say_hello(greeter::HelloRequest { name: "retryscope".into() }).await?;
    println!("{}", reply.into_inner().message);

    // Flush spans and metrics before exiting. A collector that is down loses
    // the telemetry, not the work: log it, and exit as usual.
    if let Err(error) = telemetry.shutdown() {
        tracing::warn!(error = &error as &dyn std::error::Error, "telemetry not flushed");
    }
    Ok(())
}

/// `helloworld.Greeter`, as tonic-build would generate it.
#[allow(unreachable_pub)] // shaped like generated code, which is `pub`
mod greeter {
    use super::{Arc, AtomicU32, Ordering};
    use tonic::body::Body;
    use tonic::codegen::{BoxFuture, StdError};
    use tonic::{IntoRequest, Status};

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HelloRequest {
        #[prost(string, tag = "1")]
        pub name: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HelloReply {
        #[prost(string, tag = "1")]
        pub message: String,
    }

    pub struct GreeterClient<T> {
        inner: tonic::client::Grpc<T>,
    }

    impl<T> GreeterClient<T>
    where
        T: tonic::client::GrpcService<Body>,
        T::Error: Into<StdError>,
        T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        <T::ResponseBody as http_body::Body>::Error: Into<StdError> + Send,
    {
        pub fn new(inner: T) -> Self {
            Self { inner: tonic::client::Grpc::new(inner) }
        }

        pub async fn say_hello(
            &mut self,
            request: impl IntoRequest<HelloRequest>,
        ) -> Result<tonic::Response<HelloReply>, Status> {
            self.inner
                .ready()
                .await
                .map_err(|e| Status::unknown(format!("service was not ready: {}", e.into())))?;
            let path = http::uri::PathAndQuery::from_static("/helloworld.Greeter/SayHello");
            self.inner.unary(request.into_request(), path, tonic_prost::ProstCodec::default()).await
        }
    }

    /// Serves the Greeter on a loopback port; the first `failures` calls get
    /// UNAVAILABLE.
    pub async fn serve_flaky(failures: u32) -> std::io::Result<std::net::SocketAddr> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let service = GreeterServer { calls: Arc::default(), failures };
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(tonic::transport::Server::builder().serve_with_incoming(service, incoming));
        Ok(address)
    }

    #[derive(Clone)]
    struct GreeterServer {
        calls: Arc<AtomicU32>,
        failures: u32,
    }

    struct SayHello(GreeterServer);

    impl tonic::server::UnaryService<HelloRequest> for SayHello {
        type Response = HelloReply;
        type Future = BoxFuture<tonic::Response<HelloReply>, Status>;

        fn call(&mut self, request: tonic::Request<HelloRequest>) -> Self::Future {
            let failing = self.0.calls.fetch_add(1, Ordering::Relaxed) < self.0.failures;
            let name = request.into_inner().name;
            Box::pin(async move {
                if failing {
                    return Err(Status::unavailable("warming up"));
                }
                Ok(tonic::Response::new(HelloReply { message: format!("Hello, {name}!") }))
            })
        }
    }

    impl tower::Service<http::Request<Body>> for GreeterServer {
        type Response = http::Response<Body>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<Self::Response, Self::Error>;

        fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<Body>) -> Self::Future {
            let server = self.clone();
            Box::pin(async move {
                let codec = tonic_prost::ProstCodec::<HelloReply, HelloRequest>::default();
                Ok(match request.uri().path() {
                    "/helloworld.Greeter/SayHello" => {
                        tonic::server::Grpc::new(codec).unary(SayHello(server), request).await
                    }
                    _ => Status::unimplemented("no such method").into_http(),
                })
            })
        }
    }
}

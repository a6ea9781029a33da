//! A fallback's answer to a gRPC call.
//!
//! There is one fallback concept for HTTP and gRPC (`retryscope-http`'s: one
//! registry per client, selected per dependency in code or by name from a
//! configuration file, run when the engine gives up, the breaker is open or
//! the kill switch is on), and one signature: a fallback returns an
//! `http::Response<Bytes>`. For a gRPC call the layer reads that response
//! as gRPC:
//!
//! - **a message**: the body is the reply message, encoded (for prost,
//!   `Bytes::from(reply.encode_to_vec())`, or [`message`]); the layer frames
//!   it and ends it with `grpc-status: 0`, so the tonic client decodes it as a
//!   server's reply;
//! - **a status**: a response whose headers carry `grpc-status` (made with
//!   [`status`]) is sent as a Trailers-Only answer, body ignored: the caller
//!   gets that `tonic::Status` (a cached "not found", `UNAVAILABLE` with a
//!   friendlier message…).
//!
//! Either way the answer carries the [`Fallback`](crate::Fallback) extension,
//! which tonic hands to the caller in `Response::extensions()`.

use crate::response::ResponseBody;
use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body::{Body, Frame};
use std::collections::VecDeque;

/// The gRPC content type, for an answer that names none.
const GRPC: HeaderValue = HeaderValue::from_static("application/grpc");

/// A fallback's answer made of `encoded`, one reply message as its codec
/// writes it (prost: `reply.encode_to_vec()`).
pub fn message(encoded: impl Into<Bytes>) -> Response<Bytes> {
    Response::new(encoded.into())
}

/// A fallback's answer that is `status`, as a Trailers-Only gRPC answer.
pub fn status(status: &tonic::Status) -> Response<Bytes> {
    let mut headers = HeaderMap::new();
    // Fails only for a message or details that cannot be a header value,
    // which tonic percent-encodes: then the code alone goes.
    if status.add_header(&mut headers).is_err() {
        headers.insert("grpc-status", HeaderValue::from(status.code() as i32));
    }
    let mut response = Response::new(Bytes::new());
    *response.headers_mut() = headers;
    response
}

/// The fallback's `response` as the gRPC call's answer (see the module).
/// A message too long for a gRPC frame (4 GiB) becomes an `INTERNAL` status
/// saying so: no caller could have decoded it.
pub(crate) fn answer<B>(response: Response<Bytes>) -> Response<ResponseBody<B>>
where
    B: Body,
    B::Data: From<Bytes>,
{
    let (mut parts, body) = response.into_parts();
    parts.status = StatusCode::OK;
    parts.headers.entry(header::CONTENT_TYPE).or_insert(GRPC);
    if parts.headers.contains_key("grpc-status") {
        return Response::from_parts(parts, ResponseBody::answered_frames(VecDeque::new()));
    }
    let Ok(length) = u32::try_from(body.len()) else {
        let too_long =
            tonic::Status::internal("the fallback's reply message is over the 4 GiB a gRPC frame holds");
        let _ = too_long.add_header(&mut parts.headers);
        return Response::from_parts(parts, ResponseBody::answered_frames(VecDeque::new()));
    };
    // The gRPC message frame: uncompressed, its length, the message.
    let mut framed = BytesMut::with_capacity(5 + body.len());
    framed.put_u8(0);
    framed.put_u32(length);
    framed.put_slice(&body);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let frames = VecDeque::from([Frame::data(framed.freeze().into()), Frame::trailers(trailers)]);
    Response::from_parts(parts, ResponseBody::answered_frames(frames))
}

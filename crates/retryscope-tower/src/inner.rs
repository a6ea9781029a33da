//! What a call asks of the service the layer wraps and of the bodies of its
//! answers: named once for the call, its attempts and their answers.

use crate::error::BoxError;
use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

/// The service the layer wraps: cloned for each attempt, its futures and
/// errors sent across tasks.
pub(crate) trait Inner<B, ResB>:
    Service<Request<B>, Response = Response<ResB>, Future: Send + 'static, Error: Into<BoxError>>
    + Clone
    + Send
    + 'static
{
}

impl<S, B, ResB> Inner<B, ResB> for S where
    S: Service<Request<B>, Response = Response<ResB>, Future: Send + 'static, Error: Into<BoxError>>
        + Clone
        + Send
        + 'static
{
}

/// The body of an answer, as a call reads it (a body rule's read-ahead
/// rebuilds it from bytes).
pub(crate) trait AnswerBody:
    Body<Data: Send + From<Bytes>, Error: Into<BoxError>> + Send + 'static
{
}

impl<T> AnswerBody for T where T: Body<Data: Send + From<Bytes>, Error: Into<BoxError>> + Send + 'static {}

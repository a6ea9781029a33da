//! The request of each attempt, and what the attempt spans read from it.

use reqwest::header::HeaderMap;
use reqwest::{Method, Request, Url};
use std::sync::{Mutex, PoisonError};

/// Hands out the request for each attempt: clones of a replayable request, or a
/// streaming request exactly once. Shared (`&self`), so that the attempt spans
/// read the method, URL and headers from the request itself rather than from a
/// copy.
#[derive(Debug)]
pub(crate) enum RequestSource {
    Replayable(Request),
    // The headers boxed: the variant is rare, and would otherwise double the
    // size of every call's source.
    Once { method: Method, url: Url, headers: Box<HeaderMap>, request: Mutex<Option<Request>> },
}

impl RequestSource {
    pub(crate) fn new(request: Request) -> Self {
        if crate::classify::is_replayable(&request) {
            Self::Replayable(request)
        } else {
            // Rare (a streamed body): the one copy the spans need.
            Self::Once {
                method: request.method().clone(),
                url: request.url().clone(),
                headers: Box::new(request.headers().clone()),
                request: Mutex::new(Some(request)),
            }
        }
    }

    pub(crate) fn next(&self) -> Option<Request> {
        match self {
            Self::Replayable(request) => request.try_clone(),
            // A poisoned lock only means a panic while taking the request: it
            // is gone or still there, either way consistent.
            Self::Once { request, .. } => request.lock().unwrap_or_else(PoisonError::into_inner).take(),
        }
    }

    /// The method and URL every attempt is sent with.
    pub(crate) fn target(&self) -> (&Method, &Url) {
        match self {
            Self::Replayable(request) => (request.method(), request.url()),
            Self::Once { method, url, .. } => (method, url),
        }
    }

    /// The headers every attempt is sent with (before the middleware's own).
    pub(crate) fn headers(&self) -> &HeaderMap {
        match self {
            Self::Replayable(request) => request.headers(),
            Self::Once { headers, .. } => headers,
        }
    }
}

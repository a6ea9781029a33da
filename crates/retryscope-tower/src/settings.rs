//! What every request of a layer shares, fixed when the layer is built.

use http::Uri;
use retryscope::Policy;
use retryscope::dependency::Dependency;
use retryscope_http::__private::{CallConfig, Client};
use std::sync::{Arc, OnceLock};

/// What a call resolves to from its layer's file: its settings (`None` for
/// a layer without a file) and its dependency's guards
/// ([`Settings::file_call`]).
pub(crate) type FileCall = (Option<CallConfig>, Arc<Dependency>);

/// What a configured layer's calls to one gRPC method resolve to from its
/// file under one configuration: its settings and guards, and the policy the
/// file gives a call that brings none of its own.
#[cfg(feature = "grpc")]
#[derive(Debug)]
pub(crate) struct Kept {
    pub(crate) file: FileCall,
    /// The file's policy for a call without a policy of its own, worked out
    /// once with the rest.
    pub(crate) policy: Option<Policy>,
}

/// What a call resolved to from its layer's file: kept for its gRPC method
/// under one configuration (shared by that method's calls, one reference
/// count a call), or resolved for this call alone.
pub(crate) enum Resolved {
    #[cfg(feature = "grpc")]
    Kept(Arc<Kept>),
    Now(FileCall),
}

impl Resolved {
    /// The call's settings from the file (`None` for a layer without one),
    /// and its dependency's guards.
    #[cfg_attr(
        not(feature = "grpc"),
        allow(clippy::infallible_destructuring_match, reason = "one variant without gRPC")
    )]
    pub(crate) fn parts(&self) -> (Option<&CallConfig>, &Arc<Dependency>) {
        let (config, guards) = match self {
            #[cfg(feature = "grpc")]
            Resolved::Kept(kept) => &kept.file,
            Resolved::Now(file) => file,
        };
        (config.as_ref(), guards)
    }
}

/// What every request of a layer shares, whatever its protocol (what only
/// gRPC's layers share is theirs: `grpc::Grpc`).
pub(crate) struct Settings {
    pub(crate) policy: Policy,
    /// What the builder's shared settings made: statuses and rules (the gRPC
    /// builder sets none: a gRPC answer's HTTP status is 200 whatever
    /// happened, and its outcome is a gRPC status, often in the trailers),
    /// guards, telemetry, the attempt header (HTTP only; gRPC calls always
    /// send `grpc-previous-rpc-attempts`, as A6 says), idempotency keys,
    /// fallbacks (HTTP and gRPC), a configuration file.
    pub(crate) client: Client,
    pub(crate) replay_limit: usize,
    pub(crate) origin: Option<Arc<Uri>>,
    /// The guards of `origin`, found at the first request without an
    /// authority of its own (a tonic channel's every call), kept for the next.
    pub(crate) origin_guards: OnceLock<Arc<Dependency>>,
    /// `origin`'s host and ports, read from it once when the layer is built:
    /// a configured layer's every call without an authority (a tonic
    /// channel's) looks its dependency up by them, and parsing the origin's
    /// authority per call cost ~1,500 instructions (issue 35's whole-call
    /// gate).
    pub(crate) origin_server: Option<OriginServer>,
}

/// The server a layer's origin names, as [`crate::spans::server`] reads it.
#[derive(Debug)]
pub(crate) struct OriginServer {
    host: Box<str>,
    /// The port the origin's URI writes, if any.
    port: Option<u16>,
    /// The origin scheme's port.
    default_port: Option<u16>,
}

impl OriginServer {
    pub(crate) fn of(origin: &Uri) -> Self {
        let server = crate::spans::server(origin, None);
        Self { host: server.address.into(), port: origin.port_u16(), default_port: server.default_port }
    }
}

impl Settings {
    /// The server a call to `uri` goes to, as (host, the port its URI writes,
    /// the scheme's port): its authority's, or the origin's for a URI without
    /// one (read once, when the layer was built).
    pub(crate) fn server<'a>(&'a self, uri: &'a Uri) -> (&'a str, Option<u16>, Option<u16>) {
        match (uri.authority(), &self.origin_server) {
            (None, Some(origin)) => (&origin.host, origin.port, origin.default_port),
            _ => {
                let server = crate::spans::server(uri, self.origin.as_deref());
                (server.address, server.uri.port_u16(), server.default_port)
            }
        }
    }

    /// What a call to `uri` (a gRPC call's path names its service and
    /// method) resolves to from the layer's file, from the snapshot in force
    /// now: its settings (`None` for a layer without a file) and its
    /// dependency's guards (the file's, else the builder's).
    pub(crate) fn file_call(&self, uri: &Uri, grpc: bool) -> FileCall {
        self.client.resolve(self.server(uri), uri.path(), grpc, || self.guards_for(uri))
    }

    /// The guards of the dependency `uri` goes to: its authority's, or the
    /// origin's for a URI without one. A registry never drops or replaces the
    /// guards of a named dependency, so the origin's are looked up once; an
    /// origin past the label bound keeps the set found then (its own host's,
    /// even if the registry later evicts it and makes another).
    pub(crate) fn guards_for(&self, uri: &Uri) -> Arc<Dependency> {
        let find = || {
            let server = crate::spans::server(uri, self.origin.as_deref());
            self.client.guards.for_server(server.address, server.uri.port_u16(), server.default_port)
        };
        match (uri.authority(), &self.origin) {
            (None, Some(_)) => Arc::clone(self.origin_guards.get_or_init(find)),
            _ => find(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_read_once_is_what_a_call_without_authority_reads() {
        let call: Uri = "/pkg.Svc/Get".parse().expect("a path");
        for origin in ["http://10.0.0.1:50051", "https://api.example.com", "http://svc:80", "grpc://x:1"] {
            let origin: Uri = origin.parse().expect("a URI");
            let read = OriginServer::of(&origin);
            let server = crate::spans::server(&call, Some(&origin));
            assert_eq!(
                (&*read.host, read.port, read.default_port),
                (server.address, server.uri.port_u16(), server.default_port),
                "{origin}"
            );
        }
    }
}

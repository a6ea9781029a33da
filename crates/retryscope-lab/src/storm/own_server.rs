//! A server a storm starts itself from PATH when the user names none (a
//! nats-server for `storm --jobs`, a redis-server for the fleet storm): what
//! each needs alike, a free loopback port and a refusal that names the Debian
//! package when the program is missing.

use crate::storm::{StormError, error};

/// A free loopback port for `program` to listen on.
pub(crate) fn free_port(program: &str) -> Result<u16, StormError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| error(&format!("finding a free port for {program}"), e))
}

/// The refusal when `program` could not be started (`e`): `needs` says what
/// needed it, `instead` how to name a server of the user's own. The Debian
/// package has the program's name.
pub(crate) fn missing(program: &str, needs: &str, instead: &str, e: std::io::Error) -> StormError {
    error(&format!("{needs}: none on PATH (install the Debian package `{program}`, or pass {instead})"), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_is_named_with_its_package_and_the_way_around_it() {
        let refusal = missing(
            "redis-server",
            "the shared policy needs a Redis",
            "--redis URL",
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert_eq!(
            refusal.to_string(),
            "the shared policy needs a Redis: none on PATH (install the Debian package `redis-server`, or pass \
             --redis URL)"
        );
        assert!(std::error::Error::source(&refusal).is_some());
        assert!(free_port("redis-server").is_ok_and(|port| port > 0));
    }
}

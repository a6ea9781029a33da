//! The bytes a shared store keeps per key: a compact, versioned binary record.
//!
//! ```text
//! version u8 (1) | state u8 (0 in flight, 1 completed, 2 not replayable) | token u64
//! | fingerprint [32] | completed only: status u16 | headers u16
//! | per header: name u16-length-prefixed, value u16-length-prefixed | body u32-length-prefixed
//! ```
//! Integers are big-endian. The first [`CLAIM_PREFIX_LEN`] bytes of an
//! in-flight record name its claim: a completion or release compares them.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};

use super::{Completion, Entry, EntryState};
use crate::{Fingerprint, StoredResponse};

const VERSION: u8 = 1;
const IN_FLIGHT: u8 = 0;
const COMPLETED: u8 = 1;
const NOT_REPLAYABLE: u8 = 2;

/// The bytes that identify an in-flight claim: version, state, token.
pub(crate) const CLAIM_PREFIX_LEN: usize = 10;

/// The prefix of the in-flight record of the claim `token`.
pub(crate) fn claim_prefix(token: u64) -> [u8; CLAIM_PREFIX_LEN] {
    let mut prefix = [0; CLAIM_PREFIX_LEN];
    prefix[0] = VERSION;
    prefix[1] = IN_FLIGHT;
    prefix[2..].copy_from_slice(&token.to_be_bytes());
    prefix
}

/// The record of a new claim.
pub(crate) fn in_flight(token: u64, fingerprint: Fingerprint) -> Vec<u8> {
    let mut out = claim_prefix(token).to_vec();
    out.extend_from_slice(&fingerprint.to_bytes());
    out
}

/// The record of a completed claim (kept as not replayable when a header or
/// the body is too long for the format).
#[cfg(test)]
pub(crate) fn completed(token: u64, fingerprint: Fingerprint, completion: &Completion) -> Vec<u8> {
    let (head, tail) = completion_parts(completion);
    let mut out = head.to_vec();
    out.extend_from_slice(&token.to_be_bytes());
    out.extend_from_slice(&fingerprint.to_bytes());
    out.extend(tail);
    out
}

/// A completed record around the claim's token and fingerprint: its first two
/// bytes (version, state) and what follows the fingerprint. The store puts
/// them around the claim's own bytes, so a completion needs no fingerprint.
pub(crate) fn completion_parts(completion: &Completion) -> ([u8; 2], Vec<u8>) {
    match completion {
        Completion::Response(response) => match encode_response(response) {
            Some(tail) => ([VERSION, COMPLETED], tail),
            None => ([VERSION, NOT_REPLAYABLE], Vec::new()),
        },
        Completion::NotReplayable => ([VERSION, NOT_REPLAYABLE], Vec::new()),
    }
}

fn encode_response(response: &StoredResponse) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(8 + response.size());
    out.extend_from_slice(&response.status.as_u16().to_be_bytes());
    out.extend_from_slice(&u16::try_from(response.headers.len()).ok()?.to_be_bytes());
    for (name, value) in &response.headers {
        for part in [name.as_str().as_bytes(), value.as_bytes()] {
            out.extend_from_slice(&u16::try_from(part.len()).ok()?.to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    out.extend_from_slice(&u32::try_from(response.body.len()).ok()?.to_be_bytes());
    out.extend_from_slice(&response.body);
    Some(out)
}

/// Why a record could not be read.
#[derive(Debug)]
pub(crate) struct Malformed(&'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed idempotency record: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// Reads a record (every length checked against what is left).
pub(crate) fn decode(bytes: &[u8]) -> Result<Entry, Malformed> {
    let mut reader = Reader(bytes);
    if reader.take(1)? != [VERSION] {
        return Err(Malformed("unknown version"));
    }
    let state = reader.take(1)?[0];
    reader.take(8)?;
    let mut fingerprint = [0; 32];
    fingerprint.copy_from_slice(reader.take(32)?);
    let fingerprint = Fingerprint::from_bytes(fingerprint);
    let state = match state {
        IN_FLIGHT => EntryState::InFlight,
        NOT_REPLAYABLE => EntryState::NotReplayable,
        COMPLETED => EntryState::Completed(decode_response(&mut reader)?),
        _ => return Err(Malformed("unknown state")),
    };
    if !reader.0.is_empty() {
        return Err(Malformed("trailing bytes"));
    }
    Ok(Entry { fingerprint, state })
}

fn decode_response(reader: &mut Reader<'_>) -> Result<StoredResponse, Malformed> {
    let status = StatusCode::from_u16(reader.u16()?).map_err(|_| Malformed("status"))?;
    let count = reader.u16()?;
    let mut headers = Vec::with_capacity(usize::from(count).min(64));
    for _ in 0..count {
        let len = usize::from(reader.u16()?);
        let name = HeaderName::from_bytes(reader.take(len)?).map_err(|_| Malformed("header name"))?;
        let len = usize::from(reader.u16()?);
        let value = HeaderValue::from_bytes(reader.take(len)?).map_err(|_| Malformed("header value"))?;
        headers.push((name, value));
    }
    let len = reader.u32()? as usize;
    let body = Bytes::copy_from_slice(reader.take(len)?);
    Ok(StoredResponse { status, headers, body })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed("truncated"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u16(&mut self) -> Result<u16, Malformed> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        let bytes = self.take(4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response() -> StoredResponse {
        StoredResponse {
            status: StatusCode::CREATED,
            headers: vec![
                (http::header::LOCATION, HeaderValue::from_static("/orders/1")),
                (http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain")),
            ],
            body: Bytes::from_static(b"order 1"),
        }
    }

    #[test]
    fn every_state_reads_back_as_written() {
        let print = Fingerprint::of(&http::Method::POST, "/orders", b"x");
        let entry = decode(&in_flight(7, print)).expect("a record");
        assert_eq!(entry, Entry { fingerprint: print, state: EntryState::InFlight });
        let done = completed(7, print, &Completion::Response(response()));
        assert_eq!(decode(&done).expect("a record").state, EntryState::Completed(response()));
        let lost = completed(7, print, &Completion::NotReplayable);
        assert_eq!(decode(&lost).expect("a record").state, EntryState::NotReplayable);
        assert_eq!(in_flight(7, print)[..CLAIM_PREFIX_LEN], claim_prefix(7));
        assert_ne!(done[..CLAIM_PREFIX_LEN], claim_prefix(7), "a completed record matches no claim");
    }

    #[test]
    fn truncated_or_garbled_records_are_errors_not_panics() {
        let print = Fingerprint::of(&http::Method::POST, "/orders", b"x");
        let done = completed(7, print, &Completion::Response(response()));
        for len in 0..done.len() {
            assert!(decode(&done[..len]).is_err(), "{len} bytes");
        }
        let mut longer = done.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut other = done;
        other[0] = 9;
        assert!(decode(&other).is_err());
    }
}

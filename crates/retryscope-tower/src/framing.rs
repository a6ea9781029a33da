//! Counting message bytes without gRPC's framing: what a replayed request
//! body ([`crate::replay`]) and gRPC's call metrics (`grpc::metrics`) share,
//! apart from `grpc/` so that the body need not know the metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts the message bytes of a gRPC stream, without the 5-byte prefix of
/// each message (A66: "does not include grpc or transport framing bytes").
pub(crate) struct MessageMeter {
    bytes: Arc<AtomicU64>,
    frame: Framing,
}

impl MessageMeter {
    /// A meter adding to `bytes`, at the start of a stream.
    pub(crate) fn new(bytes: Arc<AtomicU64>) -> Self {
        Self { bytes, frame: Framing::default() }
    }

    pub(crate) fn count(&mut self, data: &[u8]) {
        let payload = self.frame.payload_bytes(data);
        self.bytes.fetch_add(payload, Ordering::Relaxed);
    }
}

/// Where a reader of length-prefixed gRPC messages stands.
#[derive(Default)]
struct Framing {
    /// The prefix bytes read of the next message (flag and 4-byte length).
    prefix: [u8; 5],
    prefix_read: usize,
    /// Payload bytes still to come of the current message.
    payload_left: u64,
}

impl Framing {
    /// The payload bytes in `data`, which continues what came before.
    fn payload_bytes(&mut self, mut data: &[u8]) -> u64 {
        let mut payload = 0u64;
        while !data.is_empty() {
            if self.payload_left > 0 {
                let take = data.len().min(usize::try_from(self.payload_left).unwrap_or(usize::MAX));
                payload += take as u64;
                self.payload_left -= take as u64;
                data = &data[take..];
                continue;
            }
            let take = data.len().min(self.prefix.len() - self.prefix_read);
            self.prefix[self.prefix_read..self.prefix_read + take].copy_from_slice(&data[..take]);
            self.prefix_read += take;
            data = &data[take..];
            if self.prefix_read == self.prefix.len() {
                let [_, a, b, c, d] = self.prefix;
                self.payload_left = u64::from(u32::from_be_bytes([a, b, c, d]));
                self.prefix_read = 0;
            }
        }
        payload
    }
}

/// `payload` as one length-prefixed gRPC message, uncompressed: what the
/// metrics' tests feed the meters.
#[cfg(test)]
pub(crate) fn message(payload: &[u8]) -> Vec<u8> {
    let mut framed = vec![0];
    framed.extend_from_slice(&u32::try_from(payload.len()).expect("small").to_be_bytes());
    framed.extend_from_slice(payload);
    framed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_is_not_counted_however_the_bytes_are_split() {
        let stream: Vec<u8> = [message(b"hello"), message(b""), message(&[7; 300])].concat();
        for split in [1, 2, 3, 5, 7, 64, stream.len()] {
            let mut framing = Framing::default();
            let total: u64 = stream.chunks(split).map(|chunk| framing.payload_bytes(chunk)).sum();
            assert_eq!(total, 305, "chunks of {split}");
        }
    }
}

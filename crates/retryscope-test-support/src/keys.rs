//! What an idempotency key on the wire must look like, checked by hand rather
//! than with the crate that made it: an RFC 8941 String holding a UUID v4.

/// The UUID inside `value` when `value` is an sf-string (`"…"`) holding a
/// lowercase hyphenated UUID of version 4 and the RFC 9562 variant; `None`
/// otherwise.
pub fn uuid_v4_in_sf_string(value: &str) -> Option<&str> {
    let inner = value.strip_prefix('"')?.strip_suffix('"')?;
    let bytes = inner.as_bytes();
    let hyphens = [8, 13, 18, 23];
    let shaped = bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| {
            if hyphens.contains(&i) { *b == b'-' } else { matches!(b, b'0'..=b'9' | b'a'..=b'f') }
        });
    (shaped && bytes[14] == b'4' && matches!(bytes[19], b'8' | b'9' | b'a' | b'b')).then_some(inner)
}

#[cfg(test)]
mod tests {
    use super::uuid_v4_in_sf_string;

    #[test]
    fn only_a_quoted_lowercase_uuid_v4_passes() {
        let good = "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"";
        assert_eq!(uuid_v4_in_sf_string(good), Some("8e03978e-40d5-43e8-bc93-6894a57f9324"));
        assert_eq!(uuid_v4_in_sf_string("8e03978e-40d5-43e8-bc93-6894a57f9324"), None);
        assert_eq!(uuid_v4_in_sf_string("\"8e03978e-40d5-13e8-bc93-6894a57f9324\""), None);
        assert_eq!(uuid_v4_in_sf_string("\"8e03978e-40d5-43e8-1c93-6894a57f9324\""), None);
        assert_eq!(uuid_v4_in_sf_string("\"8E03978E-40D5-43E8-BC93-6894A57F9324\""), None);
    }
}

//! The seeded draw: whether the n-th call a rule selects is injected.
//!
//! A pure function of the seed, the rule's place in the list and the call's
//! number among those the rule selected, so a run that makes the same calls
//! in the same order injects the same faults into the same calls, and two
//! rules (or two dependencies under their own rules) do not disturb each
//! other's sequences.

/// A draw in `0..10_000`, compared with a rate in basis points.
pub(crate) fn draw(seed: u64, rule: u64, call: u64) -> u16 {
    // SplitMix64's finaliser over a mix of the three inputs: fast, and every
    // output bit depends on every input bit, which a plain `seed + call`
    // modulo 10,000 would not give.
    let mut z = seed ^ rule.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ call.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // The remainder is below 10,000, so it fits.
    #[allow(clippy::cast_possible_truncation, reason = "below 10,000")]
    let basis_points = (z % u64::from(super::rule::BASIS_POINTS)) as u16;
    basis_points
}

#[cfg(test)]
mod tests {
    use super::draw;

    #[test]
    fn a_draw_depends_on_the_seed_the_rule_and_the_call() {
        assert_eq!(draw(7, 0, 3), draw(7, 0, 3));
        let calls: Vec<_> = (0..64).map(|n| draw(7, 0, n)).collect();
        assert_ne!(calls, (0..64).map(|n| draw(8, 0, n)).collect::<Vec<_>>());
        assert_ne!(calls, (0..64).map(|n| draw(7, 1, n)).collect::<Vec<_>>());
    }
}

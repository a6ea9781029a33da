//! The sliding windows and the ledger.

use super::*;

fn window() -> SlottedWindow<2> {
    SlottedWindow::new(Duration::from_secs(10))
}

#[test]
fn counts_stay_for_one_window_then_expire() {
    let w = window();
    let e0 = w.epoch(0);
    w.add(e0, 0, 3);
    w.add(e0, 1, 1);
    assert_eq!(w.totals(e0), [3, 1]);
    assert_eq!(w.totals(e0 + 9), [3, 1]);
    assert_eq!(w.totals(e0 + 10), [0, 0]);
    // Writing the recycled slot restarts it.
    w.add(e0 + 10, 0, 2);
    assert_eq!(w.totals(e0 + 10), [2, 0]);
}

#[test]
fn epochs_follow_slot_length() {
    let w = window();
    assert_eq!(w.epoch(999_999_999), 0);
    assert_eq!(w.epoch(1_000_000_000), 1);
    assert_eq!(w.epoch(25_000_000_000), 25);
}

#[test]
fn slot_numbers_are_exact_whatever_the_hint() {
    let slot = SlotLength::new(Duration::from_secs(1));
    // Forwards, backwards, far and near: always the quotient.
    let readings = [0, 99_999_999, 100_000_000, 5, 250_000_000, 249_999_999, u64::MAX, 0, 100_000_001];
    for nanos in readings {
        assert_eq!(slot.epoch(nanos), nanos / 100_000_000, "{nanos}");
    }
    for nanos in (0..3_000_000_000).step_by(7_777_777) {
        assert_eq!(slot.epoch(nanos), nanos / 100_000_000, "{nanos}");
    }
}

#[test]
fn nanos_since_is_exact_and_never_negative() {
    let origin = Instant::now();
    let later = origin + Duration::new(3, 7);
    assert_eq!(nanos_since(origin, later), 3_000_000_007);
    assert_eq!(nanos_since(later, origin), 0);
}

#[test]
fn every_slot_expires_exactly_one_window_after_its_epoch() {
    // Each epoch of three laps, written alone, is live in the next
    // SLOTS epochs (itself included) and in no other.
    for written in 0..3 * SLOTS_U64 {
        let w = window();
        w.add(written, 1, 1);
        for reader in written..written + 2 * SLOTS_U64 {
            let live = reader < written + SLOTS_U64;
            assert_eq!(w.totals(reader), [0, u64::from(live)], "written {written}, read {reader}");
        }
    }
}

/// Reserves in `epoch` until one goes through; returns the reading it
/// decided on.
fn reserve(ledger: &Ledger, epoch: u64) -> Reading {
    loop {
        let reading = ledger.read(epoch);
        if ledger.reserve(reading) == Reserved::Yes {
            return reading;
        }
    }
}

#[test]
fn a_reservation_fails_once_another_came_first() {
    let ledger = Ledger::default();
    let seen = ledger.read(3);
    assert_eq!(seen.total, 0);
    reserve(&ledger, 3);
    assert_eq!(ledger.reserve(seen), Reserved::Raced);
    let fresh = ledger.read(3);
    assert_eq!((fresh.epoch, fresh.total), (3, 1));
    assert_eq!(ledger.reserve(fresh), Reserved::Yes);
    assert_eq!(ledger.total(3), 2);
}

#[test]
fn ledger_entries_expire_exactly_one_window_after_their_slot() {
    // Like `every_slot_expires_exactly_one_window_after_its_epoch`: each
    // epoch of three laps, reserved alone, counts in the next SLOTS epochs
    // and in no other, whether its slot was retired or is still the head.
    for written in 0..3 * SLOTS_U64 {
        for reader in written..written + 2 * SLOTS_U64 {
            let ledger = Ledger::default();
            reserve(&ledger, written);
            let live = reader < written + SLOTS_U64;
            assert_eq!(ledger.total(reader), u64::from(live), "written {written}, read {reader}");
        }
    }
}

#[test]
fn ledger_sums_the_slots_of_its_window() {
    let ledger = Ledger::default();
    for epoch in 0..25 {
        for _ in 0..=epoch {
            reserve(&ledger, epoch);
        }
        // Epochs epoch-9 ..= epoch each hold their own number plus one.
        let expected: u64 = (epoch.saturating_sub(9)..=epoch).map(|e| e + 1).sum();
        assert_eq!(ledger.total(epoch), expected, "epoch {epoch}");
    }
    // The remembered sum of the retired slots is the ring's.
    assert_eq!(ledger.retired(24), ledger.ring_total(24));
}

#[test]
fn a_lagging_reader_decides_and_reserves_in_the_heads_slot() {
    let ledger = Ledger::default();
    reserve(&ledger, 1);
    reserve(&ledger, 5);
    // A thread still in epoch 4 decides as of epoch 5, where the head is.
    let late = ledger.read(4);
    assert_eq!((late.epoch, late.total), (5, 2));
    assert_eq!(ledger.reserve(late), Reserved::Yes);
    assert_eq!(ledger.total(5), 3);
    // Both of epoch 5's reservations leave the window together.
    assert_eq!(ledger.total(11), 2);
    assert_eq!(ledger.total(15), 0);
}

#[test]
fn a_retirer_that_lost_the_race_never_lowers_a_slot() {
    let ledger = Ledger::default();
    reserve(&ledger, 2);
    // Read in epoch 3 (retiring epoch 2's one reservation), then lose
    // the race to a late reservation in epoch 2 and one in epoch 3.
    let stale = ledger.read(3);
    assert_eq!(ledger.reserve(ledger.read(2)), Reserved::Yes);
    reserve(&ledger, 3);
    assert_eq!(ledger.reserve(stale), Reserved::Raced);
    assert_eq!(ledger.total(3), 3);
    // Re-retiring the old count of epoch 2 changes nothing.
    ledger.ring[2].fetch_max(pack(lap_of(2), 1), ORDER);
    assert_eq!(ledger.total(4), 3);
}

#[test]
fn a_full_slot_refuses() {
    let ledger = Ledger::default();
    ledger.head.store(pack_head(7, HEAD_COUNT_MAX), ORDER);
    assert_eq!(ledger.reserve(ledger.read(7)), Reserved::Full);
    // The next slot starts from zero.
    assert_eq!(ledger.reserve(ledger.read(8)), Reserved::Yes);
    assert_eq!(ledger.total(8), HEAD_COUNT_MAX + 1);
}

#[test]
fn head_epochs_compare_across_the_36_bit_wrap() {
    let ledger = Ledger::default();
    let last = HEAD_EPOCH_MASK;
    // Epochs are compared within half the 36-bit range: get there in
    // steps shorter than that.
    reserve(&ledger, HEAD_EPOCH_MASK / 2);
    reserve(&ledger, last - 1);
    reserve(&ledger, last);
    // The sum remembered at the ledger's creation, for epoch 0, would
    // pass for epoch 2^36's: the 2^36-slot horizon of the type docs.
    ledger.retired.store(pack_head(1, 0), ORDER);
    // One slot later the head's epoch wraps to 0 in 36 bits.
    let next = ledger.read(last + 1);
    assert_eq!((next.epoch, next.total), (last + 1, 2));
    assert_eq!(ledger.reserve(next), Reserved::Yes);
    let lagging = ledger.read(last);
    assert_eq!((lagging.epoch, lagging.total), (last + 1, 3));
}

#[test]
fn counts_saturate_instead_of_wrapping() {
    let w = window();
    w.add(0, 0, u32::MAX);
    w.add(0, 0, 7);
    assert_eq!(w.totals(0), [u64::from(u32::MAX), 0]);
}

#[test]
fn lagging_writer_lands_in_the_newer_lap() {
    let w = window();
    w.add(11, 0, 1);
    // A thread still in epoch 1 writes the same physical slot.
    w.add(1, 0, 1);
    assert_eq!(w.totals(11), [2, 0]);
}

#[test]
fn clear_empties_every_slot() {
    let w = window();
    for e in 0..10 {
        w.add(e, 0, 1);
    }
    w.clear();
    assert_eq!(w.totals(9), [0, 0]);
}

//! The lab's live runs: storms and the advise loop through the real binary,
//! on loopback, in real time. One test binary rather than nine, so that the
//! test harness runs two of them at a time: each mostly waits on its storm's
//! fixed duration (about 200 s one after another, a core at most in use).
//! Each file's runs write to temporary directories of their own.

mod advise_loop;
mod storm;
mod storm_chaos;
mod storm_config;
mod storm_fleet;
mod storm_layers;
mod storm_lost_responses;
mod storm_rate_limited;
mod storm_slow_tail;
mod summary;

//! Pacing the calls to a dependency by what it answers.

pub mod adaptive;

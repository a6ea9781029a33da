//! Placeholder until the engine example lands.
fn main() {}

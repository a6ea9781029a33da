//! Nothing here: the conformance tests live in `tests/`, one per behaviour the
//! integrations share, each run against both.

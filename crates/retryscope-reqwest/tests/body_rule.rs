//! The body rule's limit, as a reqwest user meets it: what it refuses and
//! what it says. What the rule does to calls is specified once for both
//! integrations, in retryscope-conformance's `tests/body_rules.rs`.

use retryscope_reqwest::BodyLimit;

#[test]
fn a_limit_of_zero_or_above_one_mib_is_refused_with_a_message_that_says_why() {
    let error = BodyLimit::new(0).expect_err("zero");
    assert_eq!(
        error.to_string(),
        "the body limit of a body rule must be above zero and at most 1048576 bytes, got 0"
    );
    assert!(BodyLimit::new(BodyLimit::MAX + 1).is_err());
    assert_eq!(BodyLimit::new(BodyLimit::MAX).map(BodyLimit::bytes), Ok(1024 * 1024));
}

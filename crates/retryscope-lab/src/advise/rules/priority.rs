//! The `priority` rule (its row in the table of [`super`]).

use super::*;

/// The priority rule: what the caller is, from its deadline and the attempts
/// its operations took; nothing where that cannot tell.
pub(super) fn priority(o: &Observed, caller: &Caller, advice: &mut Advice) {
    let given = caller.deadline.or(caller.file_deadline);
    let most = o.operations.keys().filter_map(|k| k.parse::<u32>().ok()).max().unwrap_or(0);
    let (value, why) = if let Some(d) = given.filter(|d| *d >= BACKGROUND_DEADLINE) {
        (
            "sheddable",
            format!(
                "a deadline of {} (≥ {} s): a background or batch caller",
                ms(d),
                BACKGROUND_DEADLINE.as_secs()
            ),
        )
    } else if most > A6_MAX_ATTEMPTS {
        (
            "sheddable",
            format!(
                "operations took up to {most} attempts (> {A6_MAX_ATTEMPTS}): a background policy's retries"
            ),
        )
    } else if let Some(d) = given.filter(|d| *d <= DEFAULT_DEADLINE) {
        ("critical", format!("a deadline of {} (≤ 15 s): an interactive caller waits on it", ms(d)))
    } else {
        advice.notes.push(
            "priority not written: neither a deadline (--deadline, or the file in force) nor the attempts \
             operations took say whether a user waits on these calls or a batch does"
                .to_owned(),
        );
        return;
    };
    advice.keys.push(Key {
        key: "priority",
        value: Value::Name(value),
        reason: format!(
            "{why}: {value} (Google SRE book, ch. 21 \"Handling Overload\": batch traffic is SHEDDABLE and shed \
             first, user-facing CRITICAL; the seeds' Policy::background (10 min) and Policy::interactive (15 s) \
             deadlines tell the two apart)"
        ),
    });
}

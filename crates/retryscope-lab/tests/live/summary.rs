//! Reading a storm's JSON summary: one row per policy. Shared by the storms
//! whose summary is `{"summary": [{"policy": …, …}, …]}`.

use serde_json::Value;

/// The row of `policy` in `summary`.
pub(crate) fn row<'a>(summary: &'a Value, policy: &str) -> &'a Value {
    let rows = summary["summary"].as_array().expect("summary rows");
    rows.iter().find(|r| r["policy"] == policy).unwrap_or_else(|| panic!("no row for {policy} in {rows:?}"))
}

/// The number `field` of `policy`'s row.
pub(crate) fn number(summary: &Value, policy: &str, field: &str) -> f64 {
    row(summary, policy)[field].as_f64().unwrap_or_else(|| panic!("no {field} for {policy}: {summary}"))
}

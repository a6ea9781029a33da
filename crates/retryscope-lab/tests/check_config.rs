//! `retryscope check-config`: the guide's complete example loads, and the
//! effective table it prints is the one asserted here; a broken file is
//! refused with its line, and a nonzero exit.

use std::path::PathBuf;
use std::process::Command;

/// The guide's example file, written where the binary can read it.
fn guide_example(name: &str) -> PathBuf {
    let guide = include_str!("../../../docs/guide/configuration.md");
    let example = guide
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the guide has a ```toml example");
    let path =
        std::env::temp_dir().join(format!("retryscope-check-config-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, example).expect("temp file");
    path
}

fn check_config(args: &[&str]) -> (bool, String, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_retryscope")).arg("check-config").args(args).output().expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every name the guide's example selects, registered as the service would.
const EVERY_NAME: [&str; 6] =
    ["--body-rule", "quota_json", "--fallback", "queue_payment", "--fallback", "stale_inventory"];

/// `check-config` on `file` with every name registered.
fn check_with_every_name(file: &str) -> (bool, String, String) {
    let mut args = vec![file];
    args.extend(EVERY_NAME);
    check_config(&args)
}

/// Edits `path` (`from` → `to`), checks it with every name registered and
/// puts it back: what `check-config` wrote to stderr, the check having failed.
fn refused_with_edit(path: &std::path::Path, from: &str, to: &str) -> String {
    let before = std::fs::read_to_string(path).expect("read back");
    assert!(before.contains(from), "the example has {from:?}");
    std::fs::write(path, before.replace(from, to)).expect("rewrite");
    let (ok, _, stderr) = check_with_every_name(path.to_str().expect("utf-8 temp path"));
    std::fs::write(path, before).expect("restore");
    assert!(!ok, "{from:?} -> {to:?} was accepted");
    stderr
}

#[test]
fn the_guides_example_loads_and_prints_its_effective_table() {
    let path = guide_example("ok");
    let file = path.to_str().expect("utf-8 temp path");
    let (ok, stdout, stderr) = check_with_every_name(file);
    assert!(ok, "{stderr}");
    let mut lines = stdout.lines();
    let head = lines.next().expect("a header line");
    assert!(head.starts_with("config ") && head.ends_with(&format!("({file})")), "{head}");
    let table: Vec<&str> = lines.collect();
    let expected = [
        "dependency       match                         retries  attempts  backoff       jitter  attempt_timeout  deadline  retry_statuses   hedging  priority   fallback         budget                         breaker                                         pacer     body_rule   idempotency_keys",
        "(defaults)       *                             on       3         100ms..2s x2  full    1s               5s        429,502,503,504  -        critical   -                ratio=0.2,min=10/s,window=10s  code                                            code      code        code",
        "inventory        host=inventory.internal       on       4         100ms..2s x2  full    1s               5s        429,502,503,504  -        critical   stale_inventory  ratio=0.2,min=10/s,window=10s  code                                            code      quota_json  code",
        "orders-get       grpc=shop.Orders/Get          on       3         100ms..2s x2  full    1s               800ms     429,502,503,504  -        critical   -                ratio=0.2,min=10/s,window=10s  code                                            code      code        code",
        "payments         host=payments.internal:8443   on       2         100ms..2s x2  full    1s               5s        429,502,503,504  -        critical   queue_payment    ratio=0.2,min=10/s,window=10s  ratio=0.5,min_calls=20,window=10s,cool_down=5s  code      code        on",
        "receipts         subject=orders.*.receipt      on       6         1s..1m x2     full    30s              1h        -                -        -          -                code                           code                                            -         -           -",
        "recommendations  path_prefix=/recommendations  OFF      3         100ms..2s x2  full    1s               5s        429,502,503,504  -        sheddable  -                ratio=0.2,min=10/s,window=10s  off                                             code      code        code",
        "search           host=search.internal          on       3         100ms..2s x2  full    1s               5s        429,502,503,504  2@50ms   critical   -                ratio=0.2,min=10/s,window=10s  code                                            adaptive  code        code",
    ];
    assert_eq!(table, expected, "\n{stdout}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_name_not_registered_or_a_broken_value_is_refused_with_its_line() {
    let path = guide_example("names");
    let file = path.to_str().expect("utf-8 temp path");
    // Without --fallback stale_inventory the service would refuse the file.
    let (ok, stdout, stderr) =
        check_config(&[file, "--body-rule", "quota_json", "--fallback", "queue_payment"]);
    assert!(!ok && stdout.is_empty());
    assert!(
        stderr.contains(&format!("{file}:")) && stderr.contains("dependencies.inventory.fallback"),
        "{stderr}"
    );

    // A key a gRPC call would not apply is refused where it is written.
    let stderr =
        refused_with_edit(&path, "deadline = \"800ms\"", "deadline = \"800ms\"\nidempotency_keys = true");
    assert!(
        stderr.contains("dependencies.orders-get.idempotency_keys")
            && stderr.contains("not applied to gRPC calls"),
        "{stderr}"
    );

    // A key a job worker would not apply is refused on a `subject` rule.
    let stderr = refused_with_edit(&path, "deadline = \"1h\"", "deadline = \"1h\"\nretry_statuses = [503]");
    assert!(
        stderr.contains("dependencies.receipts.retry_statuses") && stderr.contains("not applied to jobs"),
        "{stderr}"
    );

    let stderr = refused_with_edit(&path, "attempts = 2", "attempts = 0");
    assert!(stderr.contains("dependencies.payments.attempts: must be 1..=100, got 0"), "{stderr}");
    let _ = std::fs::remove_file(&path);
}

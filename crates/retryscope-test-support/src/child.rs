//! One test of this test binary run as a separate OS process — a worker a
//! crash test SIGKILLs — and word of when it printed a given line.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

/// Runs the test `name` of the current test binary as a process of its own,
/// with `envs` set, and returns it with a receiver that hears once when it
/// prints a line containing `line` on stdout (its stderr is dropped).
pub fn start<'a>(
    name: &str,
    envs: impl IntoIterator<Item = (&'a str, &'a str)>,
    line: &'static str,
) -> (Child, tokio::sync::oneshot::Receiver<()>) {
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args(["--exact", name, "--nocapture"])
        .envs(envs)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the child process starts");
    let stdout = child.stdout.take().expect("its stdout");
    let (said, heard) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut said = Some(said);
        for printed in std::io::BufReader::new(stdout).lines() {
            if printed.is_ok_and(|l| l.contains(line))
                && let Some(said) = said.take()
            {
                let _ = said.send(());
            }
        }
    });
    (child, heard)
}

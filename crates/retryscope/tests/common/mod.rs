//! What the engine's test files share: a recording observer (tests assert on
//! the exact sequence of engine events), and the policy most of them start
//! from. Each test file uses a part of it.
#![allow(dead_code, unreachable_pub)]

use retryscope::observe::{
    AttemptEnd, AttemptStart, Finish, Observer, OperationInfo, OperationObserver, Wait,
};
use retryscope::{ErrorType, Jitter, Policy, Verdict};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 100 ms doubling to 1 s, no jitter, 5 attempts, no deadline: delays are exact.
pub fn plain() -> Policy {
    Policy::builder()
        .max_attempts(5)
        .base_delay(ms(100))
        .max_delay(ms(1_000))
        .jitter(Jitter::None)
        .no_deadline()
        .build()
        .expect("valid policy")
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Start { dependency: String, operation: Option<String>, max_attempts: u32 },
    AttemptStarted(AttemptStart),
    AttemptFinished(AttemptEnd),
    Waiting(Wait),
    Finished(Finish),
}

#[derive(Clone, Default)]
pub struct Recorder {
    events: Arc<Mutex<Vec<Event>>>,
}

impl Recorder {
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().expect("recorder lock").clone()
    }

    pub fn finish(&self) -> Finish {
        self.events()
            .into_iter()
            .find_map(|e| if let Event::Finished(f) = e { Some(f) } else { None })
            .expect("operation finished")
    }

    pub fn waits(&self) -> Vec<Wait> {
        self.events()
            .into_iter()
            .filter_map(|e| if let Event::Waiting(w) = e { Some(w) } else { None })
            .collect()
    }

    pub fn attempts(&self) -> Vec<AttemptEnd> {
        self.events()
            .into_iter()
            .filter_map(|e| if let Event::AttemptFinished(a) = e { Some(a) } else { None })
            .collect()
    }

    fn push(&self, event: Event) {
        self.events.lock().expect("recorder lock").push(event);
    }
}

impl Observer for Recorder {
    type Operation = Recorder;

    fn start(&self, op: &OperationInfo<'_>) -> Recorder {
        self.push(Event::Start {
            dependency: op.dependency.to_owned(),
            operation: op.operation.map(str::to_owned),
            max_attempts: op.max_attempts,
        });
        self.clone()
    }
}

impl OperationObserver for Recorder {
    type Attempt = ();

    fn attempt_started(&mut self, attempt: &AttemptStart) {
        self.push(Event::AttemptStarted(*attempt));
    }

    fn attempt_finished(&mut self, _: (), attempt: &AttemptEnd) {
        self.push(Event::AttemptFinished(*attempt));
    }

    fn waiting(&mut self, wait: &Wait) {
        self.push(Event::Waiting(*wait));
    }

    fn finished(self, finish: &Finish) {
        self.push(Event::Finished(*finish));
    }
}

/// An operation's answer as a script gives it: `Ok` for a 200, else the
/// status, each a retryable failure of its own `error.type`.
pub fn status_verdict(answer: &Result<(), u16>) -> Verdict {
    match answer {
        Ok(()) => Verdict::Success,
        Err(status) => Verdict::retryable(ErrorType::Status(*status)),
    }
}

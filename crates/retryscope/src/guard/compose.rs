//! Guards composed as values: `&G`, `Arc<G>`, `Option<G>`, a pair, and two
//! shared guards chained into one.

use super::{Admission, Attempt, End, Gauge, Guard, SharedGuard};
use std::sync::Arc;
use std::time::Duration;

impl<G: Guard + ?Sized> Guard for &G {
    type Permit = G::Permit;
    #[inline]
    fn call_started(&self) {
        (**self).call_started();
    }
    #[inline]
    fn admit(&self, attempt: Attempt) -> Admission<G::Permit> {
        (**self).admit(attempt)
    }
    #[inline]
    fn send(&self, attempt: Attempt, permit: &mut G::Permit) -> Admission {
        (**self).send(attempt, permit)
    }
    #[inline]
    fn settle(&self, attempt: Attempt, permit: G::Permit, end: End) {
        (**self).settle(attempt, permit, end);
    }
    #[inline]
    fn call_finished(&self) {
        (**self).call_finished();
    }
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        (**self).gauges(report);
    }
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        (**self).published(gauge);
    }
}

impl<G: Guard + ?Sized> Guard for Arc<G> {
    type Permit = G::Permit;
    fn call_started(&self) {
        (**self).call_started();
    }
    fn admit(&self, attempt: Attempt) -> Admission<G::Permit> {
        (**self).admit(attempt)
    }
    fn send(&self, attempt: Attempt, permit: &mut G::Permit) -> Admission {
        (**self).send(attempt, permit)
    }
    fn settle(&self, attempt: Attempt, permit: G::Permit, end: End) {
        (**self).settle(attempt, permit, end);
    }
    fn call_finished(&self) {
        (**self).call_finished();
    }
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        (**self).gauges(report);
    }
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        (**self).published(gauge);
    }
}

/// No guard: admits everything, keeps nothing. Inline, so that a call
/// without one of a dependency's guards pays one branch for it.
impl<G: Guard> Guard for Option<G> {
    type Permit = G::Permit;
    #[inline]
    fn call_started(&self) {
        if let Some(guard) = self {
            guard.call_started();
        }
    }
    #[inline]
    fn admit(&self, attempt: Attempt) -> Admission<G::Permit> {
        match self {
            Some(guard) => guard.admit(attempt),
            None => Admission::Go(G::Permit::default()),
        }
    }
    #[inline]
    fn send(&self, attempt: Attempt, permit: &mut G::Permit) -> Admission {
        match self {
            Some(guard) => guard.send(attempt, permit),
            None => Admission::Go(()),
        }
    }
    #[inline]
    fn settle(&self, attempt: Attempt, permit: G::Permit, end: End) {
        if let Some(guard) = self {
            guard.settle(attempt, permit, end);
        }
    }
    #[inline]
    fn call_finished(&self) {
        if let Some(guard) = self {
            guard.call_finished();
        }
    }
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        if let Some(guard) = self {
            guard.gauges(report);
        }
    }
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        if let Some(guard) = self {
            guard.published(gauge);
        }
    }
}

/// Both guards, the first asked first: a refusal by the second settles the
/// first's admission as not sent; a hold by the first at a retry's plan is
/// added to the wait the second is asked about; at the send, a hold by the
/// first asks the second nothing yet.
impl<A: Guard, B: Guard> Guard for (A, B) {
    type Permit = (A::Permit, B::Permit);
    #[inline]
    fn call_started(&self) {
        self.0.call_started();
        self.1.call_started();
    }
    #[inline]
    fn admit(&self, attempt: Attempt) -> Admission<Self::Permit> {
        let (first, held) = match self.0.admit(attempt) {
            Admission::Go(permit) => (permit, None),
            Admission::Hold { wait, source, permit } => (permit, Some((wait, source))),
            Admission::Refuse(reason) => return Admission::Refuse(reason),
        };
        // The second hears of the first's hold as part of the wait.
        let later = match held {
            Some((hold, _)) => attempt.lengthened(hold),
            None => attempt,
        };
        match (self.1.admit(later), held) {
            (Admission::Go(second), None) => Admission::Go((first, second)),
            (Admission::Go(second), Some((wait, source))) => {
                Admission::Hold { wait, source, permit: (first, second) }
            }
            (Admission::Hold { wait, source, permit }, held) => Admission::Hold {
                wait: wait + held.map_or(Duration::ZERO, |(hold, _)| hold),
                source: source.or(held.and_then(|(_, source)| source)),
                permit: (first, permit),
            },
            (Admission::Refuse(reason), _) => {
                // The first admitted an attempt that will not go: it must
                // hear so, or it would count it for ever.
                self.0.settle(attempt, first, End::NotSent);
                Admission::Refuse(reason)
            }
        }
    }
    #[inline]
    fn send(&self, attempt: Attempt, permit: &mut Self::Permit) -> Admission {
        match self.0.send(attempt, &mut permit.0) {
            Admission::Go(()) => self.1.send(attempt, &mut permit.1),
            not_yet => not_yet,
        }
    }
    #[inline]
    fn settle(&self, attempt: Attempt, permit: Self::Permit, end: End) {
        self.0.settle(attempt, permit.0, end);
        self.1.settle(attempt, permit.1, end);
    }
    #[inline]
    fn call_finished(&self) {
        self.0.call_finished();
        self.1.call_finished();
    }
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        self.0.gauges(report);
        self.1.gauges(report);
    }
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        self.0.published(gauge);
        self.1.published(gauge);
    }
}

/// Two guards that keep nothing per attempt, as one that keeps nothing: the
/// pair's rules ([`Guard for (A, B)`](Guard#impl-Guard-for-(A,+B))), for a
/// dependency given further guards one at a time.
pub(crate) struct Chained(pub(crate) SharedGuard, pub(crate) SharedGuard);

impl Chained {
    fn pair(&self) -> (&dyn Guard<Permit = ()>, &dyn Guard<Permit = ()>) {
        (&*self.0, &*self.1)
    }
}

impl Guard for Chained {
    type Permit = ();
    fn call_started(&self) {
        self.pair().call_started();
    }
    fn admit(&self, attempt: Attempt) -> Admission<()> {
        match self.pair().admit(attempt) {
            Admission::Go(_) => Admission::Go(()),
            Admission::Hold { wait, source, .. } => Admission::Hold { wait, source, permit: () },
            Admission::Refuse(reason) => Admission::Refuse(reason),
        }
    }
    fn send(&self, attempt: Attempt, (): &mut ()) -> Admission {
        self.pair().send(attempt, &mut ((), ()))
    }
    fn settle(&self, attempt: Attempt, (): (), end: End) {
        self.pair().settle(attempt, ((), ()), end);
    }
    fn call_finished(&self) {
        self.pair().call_finished();
    }
    fn gauges(&self, report: &mut dyn FnMut(&'static Gauge, f64)) {
        self.pair().gauges(report);
    }
    fn published(&self, gauge: &mut dyn FnMut(&'static Gauge)) {
        self.pair().published(gauge);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::StopReason;
    use std::sync::Mutex;

    /// Records what it heard; refuses retries when told to, holds them for
    /// `hold` at their plan.
    #[derive(Default)]
    struct Log {
        heard: Mutex<Vec<String>>,
        refuse: bool,
        hold: Option<Duration>,
    }

    impl Guard for Log {
        type Permit = ();
        fn admit(&self, attempt: Attempt) -> Admission<()> {
            let wait = attempt.wait().map_or(String::new(), |wait| format!(" after {wait:?}"));
            self.heard.lock().expect("not poisoned").push(format!("admit {}{wait}", attempt.number()));
            match (self.refuse && !attempt.is_first(), self.hold) {
                (true, _) => Admission::Refuse(StopReason::BudgetExhausted),
                (false, Some(wait)) => Admission::Hold { wait, source: None, permit: () },
                (false, None) => Admission::Go(()),
            }
        }
        fn settle(&self, attempt: Attempt, (): (), end: End) {
            self.heard.lock().expect("not poisoned").push(format!("settle {} {end:?}", attempt.number()));
        }
    }

    fn heard(log: &Log) -> Vec<String> {
        log.heard.lock().expect("not poisoned").clone()
    }

    #[test]
    fn a_pair_settles_the_first_admission_when_the_second_refuses() {
        let pair = (Log::default(), Log { refuse: true, ..Log::default() });
        assert_eq!(pair.admit(Attempt::first()), Admission::Go(((), ())));
        assert_eq!(pair.admit(Attempt::retry(2)), Admission::Refuse(StopReason::BudgetExhausted));
        assert_eq!(heard(&pair.0), ["admit 1", "admit 2", "settle 2 NotSent"]);
        assert_eq!(heard(&pair.1), ["admit 1", "admit 2"]);
    }

    #[test]
    fn a_pair_asks_the_second_about_the_wait_the_first_held_it_for() {
        let hold = Duration::from_millis(300);
        let pair = (Log { hold: Some(hold), ..Log::default() }, Log { hold: Some(hold), ..Log::default() });
        let retry = Attempt::retry(2).after(Duration::from_millis(100));
        let Admission::Hold { wait, .. } = pair.admit(retry) else { panic!("both hold") };
        assert_eq!(wait, Duration::from_millis(600), "the two holds add up");
        assert_eq!(heard(&pair.0), ["admit 2 after 100ms"]);
        assert_eq!(heard(&pair.1), ["admit 2 after 400ms"], "the second sees the first's hold");
    }

    #[test]
    fn no_guard_admits_everything() {
        let none: Option<Log> = None;
        assert_eq!(none.admit(Attempt::retry(2)), Admission::Go(()));
        assert_eq!(none.send(Attempt::retry(2), &mut ()), Admission::Go(()));
    }
}

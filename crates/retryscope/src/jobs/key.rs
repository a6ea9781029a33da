//! The job key of the handler running on this task (`JobKeyScope`,
//! `next_call`), explained in the `jobs` module's docs (its section *The job
//! key of the running handler*).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// One job execution's scope: its key and how many calls have taken an
/// ordinal. Boxed, so that moving it in and out of the thread-local on
/// every poll moves a pointer.
#[derive(Debug)]
struct Scope {
    key: Arc<str>,
    calls: u32,
}

thread_local! {
    /// The scope of the job whose future this thread is polling, if any.
    static CURRENT: Cell<Option<Box<Scope>>> = const { Cell::new(None) };
}

pin_project_lite::pin_project! {
    /// A future that runs inside a job's scope: while it is polled,
    /// [`next_call`] on this thread numbers calls of the job `key`. Each
    /// execution of a handler gets a scope of its own, so its ordinals
    /// start again from 1.
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct JobKeyScope<F> {
        #[pin]
        inner: F,
        // `None` only while `inner` is being polled: the scope is then in
        // the thread-local.
        scope: Option<Box<Scope>>,
    }
}

impl<F> JobKeyScope<F> {
    /// Runs `inner` as one execution of the job whose key is `key`.
    pub fn new(key: Arc<str>, inner: F) -> Self {
        Self { inner, scope: Some(Box::new(Scope { key, calls: 0 })) }
    }
}

impl<F: Future> Future for JobKeyScope<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // Moved in, not cloned: a poll costs two thread-local swaps. The
        // outer scope (a job run inside another's handler) is put back after.
        let outer = CURRENT.with(|current| current.replace(this.scope.take()));
        // Puts the scopes back even if `inner` panics.
        let _restore = Restore { slot: this.scope, outer };
        this.inner.poll(cx)
    }
}

/// Takes this future's scope back from the thread-local and reinstates the
/// one that was there before.
struct Restore<'a> {
    slot: &'a mut Option<Box<Scope>>,
    outer: Option<Box<Scope>>,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let outer = self.outer.take();
        // `try_with`: a future dropped during the thread's teardown keeps its
        // scope lost rather than panicking in a destructor.
        if let Ok(mine) = CURRENT.try_with(|current| current.replace(outer)) {
            *self.slot = mine;
        }
    }
}

/// One call's share of its job's scope: the job key and the call's ordinal
/// within this execution of the handler (1 for its first call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCall {
    key: Arc<str>,
    ordinal: u32,
}

impl JobCall {
    /// The job's key.
    pub fn job_key(&self) -> &str {
        &self.key
    }

    /// Which of the handler's keyed calls this is, from 1.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }
}

/// The job key of the [`JobKeyScope`] being polled on this thread, with the
/// next ordinal; `None` outside any job (one thread-local read). Each call
/// takes a new ordinal: ask only for a call that will use it.
pub fn next_call() -> Option<JobCall> {
    CURRENT
        .try_with(|current| {
            let mut scope = current.take()?;
            scope.calls = scope.calls.saturating_add(1);
            let call = JobCall { key: Arc::clone(&scope.key), ordinal: scope.calls };
            current.set(Some(scope));
            Some(call)
        })
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn ordinals_count_across_polls_and_start_again_in_a_new_execution() {
        let mut yielded = false;
        let run = || {
            JobKeyScope::new(
                "job-1".into(),
                std::future::poll_fn(move |cx| {
                    let Some(call) = next_call() else { return Poll::Ready(Vec::new()) };
                    if !yielded {
                        yielded = true;
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    let second = next_call().map(|c| c.ordinal());
                    Poll::Ready(vec![call.ordinal(), second.unwrap_or(0)])
                }),
            )
        };
        // Each execution (a new scope) takes 1 on its first poll, then 2 and 3.
        for _ in 0..2 {
            let mut execution = std::pin::pin!(run());
            assert!(poll_once(execution.as_mut()).is_pending());
            // Between polls the scope is not this thread's.
            assert_eq!(next_call(), None);
            assert_eq!(poll_once(execution.as_mut()), Poll::Ready(vec![2, 3]));
        }
    }

    #[test]
    fn a_nested_scope_is_its_own_and_the_outer_one_is_put_back() {
        let outer = JobKeyScope::new("outer".into(), async {
            let a = next_call().map(|c| (c.job_key().to_owned(), c.ordinal()));
            let inner = JobKeyScope::new("inner".into(), async {
                next_call().map(|c| (c.job_key().to_owned(), c.ordinal()))
            })
            .await;
            let b = next_call().map(|c| (c.job_key().to_owned(), c.ordinal()));
            (a, inner, b)
        });
        let mut outer = std::pin::pin!(outer);
        let Poll::Ready((a, inner, b)) = poll_once(outer.as_mut()) else { panic!("ready at once") };
        assert_eq!(a, Some(("outer".to_owned(), 1)));
        assert_eq!(inner, Some(("inner".to_owned(), 1)));
        assert_eq!(b, Some(("outer".to_owned(), 2)));
        assert_eq!(next_call(), None);
    }

    #[test]
    fn a_panicking_handler_leaves_no_scope_behind() {
        let caught = std::panic::catch_unwind(|| {
            let mut scope = std::pin::pin!(JobKeyScope::new("job".into(), async { panic!("handler") }));
            let _ = poll_once(scope.as_mut());
        });
        assert!(caught.is_err());
        assert_eq!(next_call(), None);
    }
}

//! The uninstrumented happy path allocates nothing. Allocation counts are
//! deterministic, so this is a test rather than a benchmark.

// A global allocator can only be written with `unsafe`; this one only counts and
// delegates to the system allocator.
#![allow(unsafe_code)]

use retryscope::dependency::Dependency;
use retryscope::{Policy, RetryBudget, Retryable};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

struct Counting;

thread_local! {
    // Per thread, so tests running in parallel do not count each other's
    // allocations. A const-initialised thread-local never allocates itself.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the
// `GlobalAlloc` contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Polls a future that must be ready at once, counting allocations meanwhile.
fn allocations_of<F: Future>(future: F) -> (usize, F::Output) {
    let mut cx = Context::from_waker(Waker::noop());
    let before = ALLOCATIONS.with(Cell::get);
    let mut future = pin!(future);
    let Poll::Ready(output) = future.as_mut().poll(&mut cx) else { panic!("the operation succeeds at once") };
    (ALLOCATIONS.with(Cell::get) - before, output)
}

#[test]
fn a_first_try_success_allocates_nothing() {
    let policy = Policy::interactive().to_builder().no_deadline().build().expect("valid");
    let (allocations, output) =
        allocations_of((|| async { Ok::<_, ()>(1) }).retry(policy).retry_any_error().into_future());
    assert_eq!(output, Ok(1));
    assert_eq!(allocations, 0);
}

#[test]
fn a_deadline_and_a_budget_allocate_nothing_either() {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a tokio runtime");
    let _context = runtime.enter();
    let db = Dependency::new("db").with_budget(RetryBudget::default());
    let (allocations, output) = allocations_of(
        (|| async { Ok::<_, ()>(2) })
            .retry(Policy::interactive())
            .retry_any_error()
            .dependency(&db)
            .into_future(),
    );
    assert_eq!(output, Ok(2));
    assert_eq!(allocations, 0);
}

/// A breaker makes every attempt go through the engine's full bookkeeping (a
/// permit before the call, its outcome after): that path allocates nothing
/// either.
#[test]
fn a_breaker_with_its_full_bookkeeping_allocates_nothing_either() {
    let db = Dependency::new("db").with_breaker(retryscope::CircuitBreaker::default());
    let policy = Policy::interactive().to_builder().no_deadline().build().expect("valid");
    let (allocations, output) = allocations_of(
        (|| async { Ok::<_, ()>(3) }).retry(policy).retry_any_error().dependency(&db).into_future(),
    );
    assert_eq!(output, Ok(3));
    assert_eq!(allocations, 0);
}

/// A hedged call its first copy answers before the delay allocates nothing:
/// that copy lives inline in the future, and the list of further copies is
/// allocated only when the first hedge goes. With a percentile delay too (the
/// tracker counts the latency in place).
#[test]
fn a_hedged_call_the_first_copy_answers_allocates_nothing() {
    use retryscope::hedge::{HedgeDelay, HedgePolicy};
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a tokio runtime");
    let _context = runtime.enter();
    let db = Dependency::new("db").with_budget(RetryBudget::default());
    for delay in [HedgeDelay::Fixed(std::time::Duration::from_millis(50)), HedgeDelay::percentile(0.95)] {
        let policy = HedgePolicy::builder().delay(delay).build().expect("valid");
        let (allocations, output) = allocations_of(
            (|| async { Ok::<_, ()>(4) })
                .hedge(policy.clone())
                .when(|_: &()| true)
                .dependency(&db)
                .into_future(),
        );
        assert_eq!(output, Ok(4));
        assert_eq!(allocations, 0, "{delay:?}");
    }
}

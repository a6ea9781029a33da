//! Handles the engine holds either borrowed or shared.
//!
//! A retry awaited on the caller's stack borrows its budget, breaker and names
//! for free. A retry that must outlive the caller's frame — a `'static` future
//! handed to a tower service or spawned on a runtime — holds them through an
//! [`Arc`] instead. [`Shared`] is either, so one builder serves both.

use crate::throttle::Throttle;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A value the engine either borrows for `'a` or shares through an [`Arc`].
///
/// Builder methods such as [`Retry::dependency`](crate::Retry::dependency),
/// [`Retry::budget`](crate::Retry::budget) and
/// [`Retry::breaker`](crate::Retry::breaker) take `impl Into<Shared<..>>`, so
/// they accept a reference or an `Arc` alike:
///
/// ```
/// use retryscope::{Policy, RetryBudget, Retryable};
/// use std::future::IntoFuture;
/// use std::sync::Arc;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let budget = Arc::new(RetryBudget::new());
/// let dependency: Arc<str> = Arc::from("inventory");
/// // Owns everything it holds: the future is `'static` and can be spawned.
/// let task = tokio::spawn(
///     (|| async { Ok::<_, std::io::Error>(7) })
///         .retry(Policy::interactive())
///         .budget(budget)
///         .dependency(dependency)
///         .into_future(),
/// );
/// assert_eq!(task.await.unwrap().unwrap(), 7);
/// # }
/// ```
pub enum Shared<'a, T: ?Sized> {
    /// Borrowed for `'a`: costs nothing.
    Borrowed(&'a T),
    /// Shared: cloning is a reference-count increment.
    Owned(Arc<T>),
}

impl<T: ?Sized> Deref for Shared<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            Shared::Borrowed(value) => value,
            Shared::Owned(value) => value,
        }
    }
}

impl<T: ?Sized> Clone for Shared<'_, T> {
    fn clone(&self) -> Self {
        match self {
            Shared::Borrowed(value) => Shared::Borrowed(value),
            Shared::Owned(value) => Shared::Owned(Arc::clone(value)),
        }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Shared<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl<'a, T: ?Sized> From<&'a T> for Shared<'a, T> {
    fn from(value: &'a T) -> Self {
        Shared::Borrowed(value)
    }
}

impl<T: ?Sized> From<Arc<T>> for Shared<'_, T> {
    fn from(value: Arc<T>) -> Self {
        Shared::Owned(value)
    }
}

impl From<String> for Shared<'_, str> {
    fn from(value: String) -> Self {
        Shared::Owned(Arc::from(value))
    }
}

/// A concrete budget or bucket, borrowed, as the engine's throttle.
impl<'a, T: Throttle + 'a> From<&'a T> for Shared<'a, dyn Throttle + 'a> {
    fn from(value: &'a T) -> Self {
        Shared::Borrowed(value)
    }
}

/// A concrete budget or bucket, shared, as the engine's throttle.
impl<'a, T: Throttle + 'a> From<Arc<T>> for Shared<'a, dyn Throttle + 'a> {
    fn from(value: Arc<T>) -> Self {
        Shared::Owned(value)
    }
}

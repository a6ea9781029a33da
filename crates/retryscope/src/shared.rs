//! Handles the engine holds either borrowed or shared.
//!
//! A retry awaited on the caller's stack borrows its budget, breaker and names
//! for free. A retry that must outlive the caller's frame — a `'static` future
//! handed to a tower service or spawned on a runtime — holds them through an
//! [`Arc`] instead. [`Shared`] is either, so one builder serves both.

use crate::budget::Budget;
use crate::guard::Guard;
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
impl<'a, T: Budget + 'a> From<&'a T> for Shared<'a, dyn Budget + 'a> {
    fn from(value: &'a T) -> Self {
        Shared::Borrowed(value)
    }
}

/// A concrete budget or bucket, shared, as the engine's throttle.
impl<'a, T: Budget + 'a> From<Arc<T>> for Shared<'a, dyn Budget + 'a> {
    fn from(value: Arc<T>) -> Self {
        Shared::Owned(value)
    }
}

/// A concrete guard, borrowed, as the engine's guard.
impl<'a, T: Guard + 'a> From<&'a T> for Shared<'a, dyn Guard + 'a> {
    fn from(value: &'a T) -> Self {
        Shared::Borrowed(value)
    }
}

/// A concrete guard, shared, as the engine's guard.
impl<'a, T: Guard + 'a> From<Arc<T>> for Shared<'a, dyn Guard + 'a> {
    fn from(value: Arc<T>) -> Self {
        Shared::Owned(value)
    }
}

/// An optional [`Shared`], flattened: for the engine's optional handles
/// (budget, breaker, pacer, operation name), which most calls leave unset.
/// As `Option<Shared<..>>` its drop and each look-up test two tags (set? then
/// owned?); flattened, one.
pub(crate) enum MaybeShared<'a, T: ?Sized> {
    /// Not set.
    None,
    /// Borrowed for `'a`.
    Borrowed(&'a T),
    /// Shared through an [`Arc`].
    Owned(Arc<T>),
}

impl<'a, T: ?Sized> MaybeShared<'a, T> {
    /// The value, if set.
    #[inline]
    pub(crate) fn as_deref(&self) -> Option<&T> {
        match self {
            MaybeShared::None => None,
            MaybeShared::Borrowed(value) => Some(value),
            MaybeShared::Owned(value) => Some(value),
        }
    }

    #[inline]
    pub(crate) fn is_none(&self) -> bool {
        matches!(self, MaybeShared::None)
    }

    #[inline]
    pub(crate) fn is_some(&self) -> bool {
        !self.is_none()
    }
}

impl<T: ?Sized> Clone for MaybeShared<'_, T> {
    fn clone(&self) -> Self {
        match self {
            MaybeShared::None => MaybeShared::None,
            MaybeShared::Borrowed(value) => MaybeShared::Borrowed(value),
            MaybeShared::Owned(value) => MaybeShared::Owned(Arc::clone(value)),
        }
    }
}

impl<'a, T: ?Sized> From<Shared<'a, T>> for MaybeShared<'a, T> {
    fn from(value: Shared<'a, T>) -> Self {
        match value {
            Shared::Borrowed(value) => MaybeShared::Borrowed(value),
            Shared::Owned(value) => MaybeShared::Owned(value),
        }
    }
}

//! Names the engine holds either borrowed or shared.
//!
//! A retry awaited on the caller's stack borrows its names for free. A retry
//! that must outlive the caller's frame — a `'static` future spawned on a
//! runtime — holds them through an [`Arc`] instead. [`Shared`] is either, so
//! one builder serves both. A dependency's guards are always borrowed (see
//! [`Retry::dependency`](crate::Retry::dependency)): a `'static` call with
//! guards owns its [`Dependency`](crate::dependency::Dependency) (an `Arc` of
//! it) and borrows it, as the integrations' futures do.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A value the engine either borrows for `'a` or shares through an [`Arc`].
///
/// [`Retry::dependency`](crate::Retry::dependency) (given a name) and
/// [`Retry::operation`](crate::Retry::operation) take a `&str` or an
/// `Arc<str>` alike:
///
/// ```
/// use retryscope::dependency::Dependency;
/// use retryscope::{Policy, RetryBudget, Retryable};
/// use std::future::IntoFuture;
/// use std::sync::Arc;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let dependency: Arc<str> = Arc::from("inventory");
/// // Owns everything it holds: the future is `'static` and can be spawned.
/// let task = tokio::spawn(
///     (|| async { Ok::<_, std::io::Error>(7) })
///         .retry(Policy::interactive())
///         .dependency(dependency)
///         .into_future(),
/// );
/// assert_eq!(task.await.unwrap().unwrap(), 7);
///
/// // With guards: the task owns the dependency, the call borrows it.
/// let inventory = Arc::new(Dependency::new("inventory").with_budget(RetryBudget::default()));
/// let task = tokio::spawn(async move {
///     (|| async { Ok::<_, std::io::Error>(8) })
///         .retry(Policy::interactive())
///         .dependency(&inventory)
///         .await
/// });
/// assert_eq!(task.await.unwrap().unwrap(), 8);
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

/// An optional [`Shared`], flattened: for the engine's optional handles
/// (the operation's name), which most calls leave unset.
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

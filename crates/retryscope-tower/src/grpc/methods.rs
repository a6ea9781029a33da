//! The methods a gRPC layer has called: each one's retry settings (A6) and its
//! operation name, worked out at its first call and kept for the next.

use super::{CallRetry, GrpcRetry};
use std::fmt;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

/// Methods remembered per layer; a call to one more works its settings out
/// each time, as every call did before (a bound for layers whose callers make
/// up paths).
const MAX_METHODS: usize = 64;

/// What a call to one method runs with.
#[derive(Debug)]
pub(crate) struct Method {
    /// Its method config's retry settings; `None` if no config names it.
    pub(crate) retry: Option<CallRetry>,
    path: Box<str>,
    /// `package.Service/Method`, interned as an operation name the first
    /// time a call needs it (a caller may name its calls itself).
    operation: OnceLock<Arc<str>>,
}

impl Method {
    /// The method as the operation a call to it is reported as.
    pub(crate) fn operation(&self) -> Arc<str> {
        let operation = self
            .operation
            .get_or_init(|| retryscope_otel::bounded_operation(crate::spans::rpc_method(&self.path)));
        Arc::clone(operation)
    }
}

/// The methods a layer has called, by path.
#[derive(Default)]
pub(crate) struct Methods {
    known: RwLock<Vec<Arc<Method>>>,
}

impl Methods {
    /// The settings of a call to `path` (`/package.Service/Method`) under `retry`.
    pub(crate) fn get(&self, retry: &GrpcRetry, path: &str) -> Arc<Method> {
        // A poisoned lock only means a thread panicked while adding a method;
        // the list itself is still consistent.
        let find = |known: &[Arc<Method>]| known.iter().find(|m| *m.path == *path).map(Arc::clone);
        if let Some(found) = find(&self.known.read().unwrap_or_else(PoisonError::into_inner)) {
            return found;
        }
        let method =
            Arc::new(Method { retry: retry.for_path(path), path: path.into(), operation: OnceLock::new() });
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        match find(&known) {
            Some(found) => found,
            None => {
                if known.len() < MAX_METHODS {
                    known.push(Arc::clone(&method));
                }
                method
            }
        }
    }
}

impl fmt::Debug for Methods {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known = self.known.read().map(|k| k.len()).unwrap_or_default();
        f.debug_struct("Methods").field("known", &known).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retryscope::Policy;

    #[test]
    fn a_method_is_worked_out_once_and_the_list_stays_bounded() {
        let retry = GrpcRetry::new(Policy::interactive());
        let methods = Methods::default();
        let first = methods.get(&retry, "/test.Echo/Unary");
        assert_eq!(&*first.operation(), "test.Echo/Unary");
        assert_eq!(first.retry.map(|r| r.policy.max_attempts()), Some(4));
        assert!(Arc::ptr_eq(&first, &methods.get(&retry, "/test.Echo/Unary")));
        assert!(methods.get(&retry, "/other.Service/Call").retry.is_some());
        for n in 0..2 * MAX_METHODS {
            let method = methods.get(&retry, &format!("/test.Echo/M{n}"));
            assert!(method.retry.is_some(), "a method beyond the bound still gets its settings");
        }
        assert_eq!(methods.known.read().map(|k| k.len()).unwrap_or_default(), MAX_METHODS);
    }
}

//! The methods a gRPC layer has called: each one's retry settings (A6) and its
//! operation name, worked out at its first call and kept for the next.

use super::{CallRetry, GrpcRetry};
use crate::settings::Kept;
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
    operation: OnceLock<&'static str>,
}

impl Method {
    /// The method as the operation a call to it is reported as.
    pub(crate) fn operation(&self) -> &'static str {
        self.operation
            .get_or_init(|| retryscope_otel::bounded_operation(crate::spans::rpc_method(&self.path)))
    }
}

/// The methods a layer has called, by path.
#[derive(Default)]
pub(crate) struct Methods {
    known: RwLock<Known>,
}

/// The methods, each with what a configured layer's call to it resolved to
/// under configuration `generation` (`ConfigHandle::generation`).
#[derive(Default)]
struct Known {
    generation: u64,
    methods: Vec<(Arc<Method>, Option<Arc<Kept>>)>,
}

impl Known {
    fn find(&self, path: &str) -> Option<&(Arc<Method>, Option<Arc<Kept>>)> {
        self.methods.iter().find(|(m, _)| *m.path == *path)
    }
}

impl Methods {
    /// The settings of a call to `path` (`/package.Service/Method`) under `retry`.
    pub(crate) fn get(&self, retry: &GrpcRetry, path: &str) -> Arc<Method> {
        if let Some((found, _)) = self.read().find(path) {
            return Arc::clone(found);
        }
        self.add(retry, path, None)
    }

    /// As [`get`](Self::get), with what the call resolves to from its file
    /// under configuration `generation`: remembered per method until the
    /// generation changes, so that a tonic channel's calls look their
    /// dependency up once per method and reload, not per call (which cost a
    /// configured call ~450 instructions more than one built in code, issue
    /// 35's whole-call gate), and share it by one reference count. `resolve`
    /// must read the configuration after `generation` was read.
    pub(crate) fn get_with_file(
        &self,
        retry: &GrpcRetry,
        path: &str,
        generation: u64,
        resolve: impl FnOnce() -> Kept,
    ) -> (Arc<Method>, Arc<Kept>) {
        {
            let known = self.read();
            if let Some((method, Some(kept))) = known.find(path)
                && known.generation == generation
            {
                return (Arc::clone(method), Arc::clone(kept));
            }
        }
        let kept = Arc::new(resolve());
        (self.add(retry, path, Some((generation, &kept))), kept)
    }

    /// `path`'s method, added if it is new and the bound allows; with
    /// `file`, what it resolved to, kept unless a newer configuration's
    /// calls were remembered meanwhile.
    fn add(&self, retry: &GrpcRetry, path: &str, file: Option<(u64, &Arc<Kept>)>) -> Arc<Method> {
        let method =
            Arc::new(Method { retry: retry.for_path(path), path: path.into(), operation: OnceLock::new() });
        // A poisoned lock only means a thread panicked while adding a method;
        // the list itself is still consistent.
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
        if let Some((generation, _)) = file
            && generation > known.generation
        {
            // A new configuration: what the old one resolved to is forgotten.
            known.generation = generation;
            known.methods.iter_mut().for_each(|(_, file)| *file = None);
        }
        let keep = file.filter(|(generation, _)| *generation == known.generation).map(|(_, f)| Arc::clone(f));
        if let Some(entry) = known.methods.iter_mut().find(|(m, _)| *m.path == *path) {
            if keep.is_some() {
                entry.1 = keep;
            }
            return Arc::clone(&entry.0);
        }
        if known.methods.len() < MAX_METHODS {
            known.methods.push((Arc::clone(&method), keep));
        }
        method
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Methods {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known = self.read().methods.len();
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
        assert_eq!(first.operation(), "test.Echo/Unary");
        assert_eq!(first.retry.map(|r| r.policy.max_attempts()), Some(4));
        assert!(Arc::ptr_eq(&first, &methods.get(&retry, "/test.Echo/Unary")));
        assert!(methods.get(&retry, "/other.Service/Call").retry.is_some());
        for n in 0..2 * MAX_METHODS {
            let method = methods.get(&retry, &format!("/test.Echo/M{n}"));
            assert!(method.retry.is_some(), "a method beyond the bound still gets its settings");
        }
        assert_eq!(methods.read().methods.len(), MAX_METHODS);
    }

    #[test]
    fn a_methods_file_settings_are_kept_for_one_configuration() {
        use retryscope::dependency::Dependencies;
        let retry = GrpcRetry::new(Policy::interactive());
        let methods = Methods::default();
        let guards = Dependencies::builder().build().for_server("svc", None, None);
        let resolved = std::cell::Cell::new(0);
        let resolve = || {
            resolved.set(resolved.get() + 1);
            Kept { file: (None, Arc::clone(&guards)), policy: None }
        };
        for generation in [0, 0, 1, 1, 1] {
            methods.get_with_file(&retry, "/a.B/C", generation, resolve);
        }
        assert_eq!(resolved.get(), 2, "once per configuration");
        // A call that read the older generation resolves for itself, and what
        // it found does not replace the newer configuration's.
        methods.get_with_file(&retry, "/a.B/C", 0, resolve);
        methods.get_with_file(&retry, "/a.B/C", 1, resolve);
        assert_eq!(resolved.get(), 3);
        // Another method has its own.
        methods.get_with_file(&retry, "/a.B/D", 1, resolve);
        methods.get_with_file(&retry, "/a.B/D", 1, resolve);
        assert_eq!(resolved.get(), 4);
        assert!(Arc::ptr_eq(
            &methods.get(&retry, "/a.B/C"),
            &methods.get_with_file(&retry, "/a.B/C", 1, resolve).0
        ));
    }
}

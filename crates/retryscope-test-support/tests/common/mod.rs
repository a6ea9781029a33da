use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

/// How many of its spans this thread's subscriber, set by `install`, sees
/// when another thread, one without a subscriber, reached the span's callsite
/// first.
pub(crate) fn spans_seen_after_a_thread_without_a_subscriber(
    install: impl FnOnce(SpanCounter) -> tracing::subscriber::DefaultGuard,
) -> usize {
    let count = SpanCount::default();
    let _guard = install(count.subscriber());
    std::thread::spawn(reach_a_cold_span).join().expect("sibling thread");
    reach_a_cold_span();
    count.get()
}

/// The counting subscriber `install` is given.
pub(crate) type SpanCounter = tracing_subscriber::layer::Layered<SpanCount, tracing_subscriber::Registry>;

/// Opens and closes a span whose callsite no other code reaches.
fn reach_a_cold_span() {
    let _span = tracing::info_span!("cold").entered();
}

/// A subscriber that counts the spans it is asked to open.
#[derive(Clone, Default)]
pub(crate) struct SpanCount(Arc<AtomicUsize>);

impl SpanCount {
    fn subscriber(&self) -> SpanCounter {
        tracing_subscriber::registry().with(self.clone())
    }

    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl<S: tracing::Subscriber> Layer<S> for SpanCount {
    fn on_new_span(
        &self,
        _: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

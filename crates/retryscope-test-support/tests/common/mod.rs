use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;

/// Opens and closes a span whose callsite no other code reaches.
pub(crate) fn reach_a_cold_span() {
    let _span = tracing::info_span!("cold").entered();
}

/// A subscriber that counts the spans it is asked to open.
#[derive(Clone, Default)]
pub(crate) struct SpanCount(Arc<AtomicUsize>);

impl SpanCount {
    pub(crate) fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        tracing_subscriber::registry().with(self.clone())
    }

    pub(crate) fn get(&self) -> usize {
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

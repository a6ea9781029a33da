//! What [`Telemetry::layer`](super::Telemetry::layer) exports: spans at the
//! span filter, events only when they are retryscope's own or the program
//! opted them in.
//!
//! Spans and events need different rules. A span is a unit of work the program
//! chose to trace; an event is a log line, and whichever span is current when a
//! dependency crate logs becomes its carrier: a WARN of sqlx about a slow
//! statement, holding the statement's text, would be exported as an event of
//! retryscope's attempt span. So events pass only by name.

use super::error::SetupError;
use super::telemetry::EXPORTER_CRATES;
use crate::names;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata, span};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter};

/// The level from which retryscope's own events are exported: the retry log
/// (INFO per retry, WARN per give-up) and the export-health lines.
const OWN_EVENTS: Level = Level::INFO;

/// The target of sqlx's statement log, whose events carry the statement's text
/// (`summary`, `db.statement`): never exported, whatever the directives say.
const QUERY_TEXT_TARGET: &str = "sqlx::query";

/// The per-layer filter of [`SpanLayer`](super::SpanLayer).
///
/// - **Spans** pass at the span filter ([`OtlpConfig::span_filter`]): retryscope's
///   at INFO always, the exporter's own crates never, the rest at the
///   directives (`info` by default).
/// - **Events** pass when their target is retryscope's (`retryscope` and its
///   submodules, `retryscope::…`) at INFO and above, or when they match the
///   event filter ([`OtlpConfig::event_filter`]; none by default). Events of
///   target `sqlx::query` (and its submodules) are never exported, even when
///   opted in: sqlx puts the statement's text in them, and retryscope records
///   no query text.
///
/// [`OtlpConfig::span_filter`]: super::OtlpConfig::span_filter
/// [`OtlpConfig::event_filter`]: super::OtlpConfig::event_filter
#[derive(Debug)]
pub struct ExportFilter {
    spans: EnvFilter,
    /// The program's own opt-in, if any.
    events: Option<EnvFilter>,
}

impl ExportFilter {
    /// A filter exporting spans at `span_filter` and, besides retryscope's own,
    /// the events `event_filter` names (both `tracing` filter directives).
    ///
    /// ```
    /// use retryscope_otel::ExportFilter;
    ///
    /// # fn main() -> Result<(), retryscope_otel::SetupError> {
    /// let _defaults = ExportFilter::new("info", None)?;
    /// let _with_checkout_events = ExportFilter::new("info", Some("checkout=info"))?;
    /// assert!(ExportFilter::new("info", Some("checkout=loud")).is_err());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`SetupError::Filter`] when either does not parse.
    pub fn new(span_filter: &str, event_filter: Option<&str>) -> Result<Self, SetupError> {
        let spans = EnvFilter::try_new(span_directives(span_filter)).map_err(SetupError::Filter)?;
        let events = event_filter
            .map(|directives| EnvFilter::try_new(event_directives(directives)))
            .transpose()
            .map_err(SetupError::Filter)?;
        Ok(Self { spans, events })
    }

    /// The same from directives already checked by [`new`](Self::new) when the
    /// telemetry was built: nothing is lost by parsing leniently.
    pub(crate) fn checked(span_filter: &str, event_filter: Option<&str>) -> Self {
        let parse = |directives: String| EnvFilter::builder().parse_lossy(directives);
        Self {
            spans: parse(span_directives(span_filter)),
            events: event_filter.map(|directives| parse(event_directives(directives))),
        }
    }

    fn opted_in(&self, meta: &Metadata<'_>) -> bool {
        !is_query_text(meta.target())
    }
}

/// Whether `target` is retryscope's own: `retryscope` or one of its
/// submodules, not merely a name starting with the same letters.
fn is_own(target: &str) -> bool {
    target.strip_prefix(names::TARGET).is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

fn is_query_text(target: &str) -> bool {
    target.strip_prefix(QUERY_TEXT_TARGET).is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

fn is_own_event(meta: &Metadata<'_>) -> bool {
    is_own(meta.target()) && *meta.level() <= OWN_EVENTS
}

/// The span filter's directives: retryscope's spans first, so that a span
/// filter that names `retryscope` itself replaces that directive; the
/// exporter's crates off; tower-http's request spans when the span filter
/// would export an INFO span of theirs (see [`REQUEST_SPANS`]).
pub(crate) fn span_directives(span_filter: &str) -> String {
    let request_spans = if admits_request_spans(span_filter) { REQUEST_SPANS } else { "" };
    format!("{}=info,{EXPORTER_CRATES}{request_spans},{span_filter}", names::TARGET)
}

/// tower-http's `TraceLayer` makes each request's span at DEBUG by default,
/// and the exporter's `tower=off` matches `tower_http` too (directives match
/// targets by prefix): without this directive a route whose only span is
/// `TraceLayer`'s exports each attempt as the root of a trace of its own.
const REQUEST_SPANS: &str = ",tower_http=debug";

/// Whether `span_filter` leaves tower-http's spans to [`REQUEST_SPANS`]: it
/// names no target that `tower_http` starts with (a filter that does decides
/// for itself), and its default level admits INFO spans — `off` and `warn`
/// export no request span, as they export no span of the program's.
fn admits_request_spans(span_filter: &str) -> bool {
    let mut default = None;
    for directive in span_filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        // `target[span{field}]=level`, `target=level`, `target` or `level`.
        let target = match directive.split_once('=') {
            Some((target, _)) => target,
            None => match directive.parse::<LevelFilter>() {
                Ok(level) => {
                    default = Some(level);
                    continue;
                }
                Err(_) => directive,
            },
        };
        let target = target.split('[').next().unwrap_or_default();
        if target.is_empty() {
            // `[span]=level`: a span-scoped default, not the filter's default.
            continue;
        }
        if "tower_http".starts_with(target) || target.starts_with("tower_http") {
            return false;
        }
    }
    default.is_some_and(|level| level >= LevelFilter::INFO)
}

/// The opt-in's directives: the exporter's crates off (their events would be
/// about the export itself), then the program's.
fn event_directives(event_filter: &str) -> String {
    format!("{EXPORTER_CRATES},{event_filter}")
}

impl<S> Filter<S> for ExportFilter
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        if meta.is_span() {
            return Filter::<S>::enabled(&self.spans, meta, cx);
        }
        is_own_event(meta)
            || (self.opted_in(meta)
                && self.events.as_ref().is_some_and(|events| Filter::<S>::enabled(events, meta, cx)))
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if meta.is_span() {
            return Filter::<S>::callsite_enabled(&self.spans, meta);
        }
        if is_own_event(meta) {
            return Interest::always();
        }
        match &self.events {
            Some(events) if self.opted_in(meta) => Filter::<S>::callsite_enabled(events, meta),
            _ => Interest::never(),
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        // `None` means "anything": the loosest of the parts wins.
        let own = Some(LevelFilter::from_level(OWN_EVENTS));
        let events = self.events.as_ref().map_or(own, |events| Filter::<S>::max_level_hint(events));
        [Filter::<S>::max_level_hint(&self.spans), events, own]
            .into_iter()
            .try_fold(LevelFilter::OFF, |max, hint| hint.map(|hint| max.max(hint)))
    }

    // An EnvFilter with span-field directives (`checkout[user=alice]=debug`)
    // tracks the spans it has seen and entered: both parts must see them.
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        if let Some(events) = &self.events {
            Filter::<S>::on_new_span(events, attrs, id, ctx.clone());
        }
        Filter::<S>::on_new_span(&self.spans, attrs, id, ctx);
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        if let Some(events) = &self.events {
            Filter::<S>::on_record(events, id, values, ctx.clone());
        }
        Filter::<S>::on_record(&self.spans, id, values, ctx);
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        if let Some(events) = &self.events {
            Filter::<S>::on_enter(events, id, ctx.clone());
        }
        Filter::<S>::on_enter(&self.spans, id, ctx);
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        if let Some(events) = &self.events {
            Filter::<S>::on_exit(events, id, ctx.clone());
        }
        Filter::<S>::on_exit(&self.spans, id, ctx);
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        if let Some(events) = &self.events {
            Filter::<S>::on_close(events, id.clone(), ctx.clone());
        }
        Filter::<S>::on_close(&self.spans, id, ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_targets_are_retryscope_and_its_submodules_only() {
        assert!(is_own("retryscope"));
        assert!(is_own("retryscope::export"));
        assert!(!is_own("retryscope_sqlx"));
        assert!(!is_own("retryscopex"));
        assert!(!is_own("sqlx::query"));
    }

    #[test]
    fn request_spans_follow_the_span_filters_default_unless_it_names_tower_http() {
        assert!(admits_request_spans("info"));
        assert!(admits_request_spans("debug,checkout=trace"));
        assert!(admits_request_spans("checkout=off, info"));
        assert!(!admits_request_spans("off"));
        assert!(!admits_request_spans("warn,checkout=info"));
        assert!(!admits_request_spans("checkout=info"), "no default: nothing else passes either");
        assert!(!admits_request_spans("info,tower_http=off"), "the program's own word");
        assert!(!admits_request_spans("info,tower=info"), "tower's directive covers tower_http");
        assert!(!admits_request_spans("info,tower_http::trace=info"));
        assert!(!admits_request_spans("info,tower_http[request]=info"));
    }

    #[test]
    fn the_query_text_target_and_its_submodules_are_recognised() {
        assert!(is_query_text("sqlx::query"));
        assert!(is_query_text("sqlx::query::slow"));
        assert!(!is_query_text("sqlx::postgres::notice"));
        assert!(!is_query_text("sqlx::queryx"));
    }
}

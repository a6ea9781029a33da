//! The W3C propagators the setup installs: `traceparent` written here,
//! everything else the SDK's.

use opentelemetry::Context;
use opentelemetry::propagation::text_map_propagator::FieldIter;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt as _, TraceFlags};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};

/// `traceparent`'s name, as the SDK's propagator sets it.
const TRACEPARENT: &str = "traceparent";
/// `tracestate`'s name, as the SDK's propagator sets it.
const TRACESTATE: &str = "tracestate";
/// `version-traceid-parentid-flags`: 2 + 1 + 32 + 1 + 16 + 1 + 2 bytes.
const TRACEPARENT_LEN: usize = 55;
/// Each byte's two lowercase hex digits, built at compile time: one lookup
/// a byte rather than one a digit.
static HEX_PAIRS: [[u8; 2]; 256] = hex_pairs();

const fn hex_pairs() -> [[u8; 2]; 256] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut table = [[0u8; 2]; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = [HEX[byte >> 4], HEX[byte & 0x0f]];
        byte += 1;
    }
    table
}

/// W3C Trace Context and W3C Baggage, as one propagator: what
/// [`Telemetry::install_globals`](super::Telemetry::install_globals) installs.
///
/// It sends exactly what the SDK's `TraceContextPropagator` and
/// `BaggagePropagator`, composed, send — `traceparent` (version `00`, only the
/// sampled flag, nothing for an invalid context), `tracestate` and `baggage` —
/// but writes `traceparent` itself, into one buffer of its final size, where
/// the SDK formats it with `format!` on every attempt. Extraction, `tracestate`
/// and `baggage` are the SDK's own. A propagator you install yourself instead
/// ([`OtlpConfig::keep_propagator`](super::OtlpConfig::keep_propagator)) is used
/// the same way by [`inject_context`](crate::inject_context).
///
/// ```
/// use opentelemetry::propagation::TextMapPropagator;
/// use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
/// use opentelemetry::Context;
/// use retryscope_otel::W3cPropagator;
/// use std::collections::HashMap;
///
/// let span = SpanContext::new(
///     TraceId::from(0x4bf92f3577b34da6a3ce929d0e0e4736),
///     SpanId::from(0x00f067aa0ba902b7),
///     TraceFlags::SAMPLED,
///     false,
///     TraceState::default(),
/// );
/// let mut headers = HashMap::new();
/// W3cPropagator::new().inject_context(&Context::new().with_remote_span_context(span), &mut headers);
/// assert_eq!(headers["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// ```
#[derive(Debug)]
pub struct W3cPropagator {
    trace_context: TraceContextPropagator,
    baggage: BaggagePropagator,
    /// The fields of both: `traceparent`, `tracestate`, `baggage`.
    fields: Vec<String>,
}

impl W3cPropagator {
    /// The propagator.
    pub fn new() -> Self {
        let trace_context = TraceContextPropagator::new();
        let baggage = BaggagePropagator::new();
        let fields = trace_context.fields().chain(baggage.fields()).map(str::to_owned).collect();
        Self { trace_context, baggage, fields }
    }
}

impl Default for W3cPropagator {
    fn default() -> Self {
        Self::new()
    }
}

impl TextMapPropagator for W3cPropagator {
    fn inject_context(&self, cx: &Context, injector: &mut dyn Injector) {
        let span = cx.span();
        let span_context = span.span_context();
        if span_context.is_valid() {
            injector.set(TRACEPARENT, traceparent(span_context));
            // Empty when there is none: the SDK sets it all the same, and so
            // do we (the HTTP injector leaves an empty one out).
            injector.set(TRACESTATE, span_context.trace_state().header());
        }
        self.baggage.inject_context(cx, injector);
    }

    fn extract_with_context(&self, cx: &Context, extractor: &dyn Extractor) -> Context {
        let cx = self.trace_context.extract_with_context(cx, extractor);
        self.baggage.extract_with_context(&cx, extractor)
    }

    fn fields(&self) -> FieldIter<'_> {
        FieldIter::new(&self.fields)
    }
}

/// `00-{trace id}-{span id}-{flags}`, in lowercase hex, with only the
/// sampled flag: what the SDK's propagator formats, written into a buffer on
/// the stack and copied once.
fn traceparent(span_context: &SpanContext) -> String {
    let mut out = [b'-'; TRACEPARENT_LEN];
    let flags = (span_context.trace_flags() & TraceFlags::SAMPLED).to_u8();
    hex_into(&mut out[0..2], &[0]);
    hex_into(&mut out[3..35], &span_context.trace_id().to_bytes());
    hex_into(&mut out[36..52], &span_context.span_id().to_bytes());
    hex_into(&mut out[53..55], &[flags]);
    // Hex digits and dashes: ASCII, so the check never fails (the empty
    // string is unreachable). `from_utf8` checks ASCII a word at a time;
    // `from_utf8_lossy` walked it in chunks, some 400 instructions an attempt.
    String::from_utf8(out.to_vec()).unwrap_or_default()
}

/// Writes `bytes` as lowercase hex into `out`, two digits a byte (a table
/// lookup a byte: some 250 instructions fewer an attempt than a digit at a
/// time).
fn hex_into(out: &mut [u8], bytes: &[u8]) {
    let (pairs, _) = out.as_chunks_mut::<2>();
    for (pair, byte) in pairs.iter_mut().zip(bytes) {
        *pair = HEX_PAIRS[usize::from(*byte)];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::KeyValue;
    use opentelemetry::baggage::BaggageExt as _;
    use opentelemetry::propagation::TextMapCompositePropagator;
    use opentelemetry::trace::{SpanId, TraceId, TraceState};
    use std::collections::HashMap;

    /// The SDK's own propagators, composed as the setup composed them before.
    fn sdk() -> TextMapCompositePropagator {
        TextMapCompositePropagator::new(vec![
            Box::new(TraceContextPropagator::new()),
            Box::new(BaggagePropagator::new()),
        ])
    }

    fn injected(propagator: &dyn TextMapPropagator, cx: &Context) -> HashMap<String, String> {
        let mut headers = HashMap::new();
        propagator.inject_context(cx, &mut headers);
        headers
    }

    fn context(trace: u128, span: u64, flags: u8, state: &str) -> Context {
        let state = TraceState::from_key_value(
            state.split(',').filter(|s| !s.is_empty()).filter_map(|kv| kv.split_once('=')),
        )
        .expect("a valid trace state");
        let span_context =
            SpanContext::new(TraceId::from(trace), SpanId::from(span), TraceFlags::new(flags), true, state);
        Context::new().with_remote_span_context(span_context)
    }

    #[test]
    fn it_writes_byte_for_byte_what_the_sdk_propagators_write() {
        let mut contexts = vec![
            Context::new(),
            context(0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, 1, ""),
            context(0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, 0, ""),
            // Flags other than sampled are not sent.
            context(1, 1, 0xff, ""),
            context(1, 1, 0xfe, ""),
            context(u128::MAX, u64::MAX, 1, "vendor=1,other=two"),
            context(0x0a, 0x0b, 1, "rojo=00f067aa0ba902b7"),
            // Invalid: a zero trace id or a zero span id sends nothing.
            context(0, 1, 1, ""),
            context(1, 0, 1, "vendor=1"),
        ];
        let with_baggage = context(7, 9, 1, "").with_baggage([KeyValue::new("user id", "a b;c")]);
        contexts.push(with_baggage);
        contexts.push(Context::new().with_baggage([KeyValue::new("tenant", "x")]));
        let ours = W3cPropagator::new();
        for (i, cx) in contexts.iter().enumerate() {
            assert_eq!(injected(&ours, cx), injected(&sdk(), cx), "context {i}");
        }
        assert_eq!(
            injected(&ours, &contexts[1])["traceparent"],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert!(injected(&ours, &contexts[7]).is_empty());
    }

    #[test]
    fn it_extracts_and_lists_its_fields_as_the_sdk_propagators_do() {
        let headers: HashMap<String, String> = [
            ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            ("tracestate", "vendor=1"),
            ("baggage", "tenant=x,user=y"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let ours = W3cPropagator::new().extract(&headers);
        let theirs = sdk().extract(&headers);
        assert_eq!(ours.span().span_context(), theirs.span().span_context());
        assert!(ours.span().span_context().is_valid());
        let entries = |cx: &Context| {
            let mut entries: Vec<(String, String)> =
                cx.baggage().iter().map(|(k, (v, _))| (k.to_string(), v.to_string())).collect();
            entries.sort();
            entries
        };
        assert_eq!(entries(&ours), entries(&theirs));
        assert_eq!(entries(&ours).len(), 2);
        // The SDK's composite lists its fields in a hash set's order.
        let ours = W3cPropagator::new();
        let mut fields: Vec<&str> = ours.fields().collect();
        fields.sort_unstable();
        let composite = sdk();
        let mut expected: Vec<&str> = composite.fields().collect();
        expected.sort_unstable();
        assert_eq!(fields, expected);
        assert_eq!(fields, ["baggage", "traceparent", "tracestate"]);
    }
}

//! A task's trace across Rota's hops (SPEC §12), as W3C Trace Context: the span that
//! creates a task gives it a `traceparent`, carried on its row, in the trigger an executor
//! gets, in the report that comes back, on a webhook's request and in a pulled item, so
//! that each process continues the same trace with spans of its own (whatever node or
//! executor handles the task, however often it is retried).
//!
//! Only a process that exports traces (the binary's `telemetry`) records spans; in any
//! other [`traceparent`] is `None` and [`continue_from`] changes nothing, so nothing is
//! stored or sent.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header, the field and the environment variable's lower-case name.
pub const TRACEPARENT: &str = "traceparent";

/// The `traceparent` naming `span` as the parent of what comes next, or `None` when the
/// span is not recorded (no traces exported, a disabled span).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes `span` a child of the span `traceparent` names (another process's, or the one
/// that created the task). Nothing for `None` or a value that is not W3C Trace Context:
/// the span then starts a trace of its own.
pub fn continue_from(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(value) = traceparent else {
        return;
    };
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), value.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_recording_subscriber_nothing_is_carried() {
        let span = tracing::info_span!("dispatch");
        continue_from(
            &span,
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        );
        assert_eq!(traceparent(&span), None);
        assert_eq!(traceparent(&tracing::Span::none()), None);
    }
}

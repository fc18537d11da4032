-- OpenTelemetry (SPEC §12): the W3C `traceparent` of the span that created a task, so
-- its fires, runs, reports and retries continue the caller's trace whichever node or
-- executor handles them. NULL when the creating node exported no traces (the common case:
-- nothing is written then) and for a schedule's fires, whose trace starts at dispatch.
ALTER TABLE tasks ADD COLUMN traceparent VARCHAR(55) NULL;

-- Kept in step with the MySQL schema (0019_trace_context.sql there): the W3C traceparent
-- of the span that created a task.
ALTER TABLE tasks ADD COLUMN traceparent TEXT;

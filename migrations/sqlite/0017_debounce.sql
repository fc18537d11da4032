-- Kept in step with the MySQL schema (0017_debounce.sql there): a job's debounce.
ALTER TABLE jobs ADD COLUMN debounce_ms INTEGER NULL;

-- XXL-JOB executors (SPEC §13): an executor built on `xxl-job-core` registers through the
-- node's XXL admin API and is called as xxl-job-admin calls it; Rota's own executors speak
-- Rota's protocol. Which one an executor speaks decides how a trigger is sent to it.
ALTER TABLE executors ADD COLUMN protocol VARCHAR(10) NOT NULL DEFAULT 'rota';

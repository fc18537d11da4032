-- Kept in step with the MySQL schema (0018_xxl.sql there): the protocol an executor speaks.
ALTER TABLE executors ADD COLUMN protocol TEXT NOT NULL DEFAULT 'rota';

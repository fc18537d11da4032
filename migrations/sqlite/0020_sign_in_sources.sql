-- Kept in step with the MySQL schema (0020_sign_in_sources.sql there): where a user signs
-- in (`local` or a directory such as `ldap`), its identity there, and when the directory
-- last said what its groups give.
ALTER TABLE users ADD COLUMN source TEXT NOT NULL DEFAULT 'local';
ALTER TABLE users ADD COLUMN subject TEXT;
ALTER TABLE users ADD COLUMN checked_at INTEGER;

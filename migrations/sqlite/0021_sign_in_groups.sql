-- Kept in step with the MySQL schema (0021_sign_in_groups.sql there): the groups an
-- identity provider last named for a user, as a JSON array of names.
ALTER TABLE users ADD COLUMN sso_groups TEXT;

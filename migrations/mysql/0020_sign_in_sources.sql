-- Where a user signs in (SPEC §14): `local` (a password kept here) or a directory
-- (`ldap`), the user's identity there (the entry's DN), and when the directory last said
-- what the user's groups give (at a sign-in, or when one of its API tokens is used).
ALTER TABLE users
    ADD COLUMN source     VARCHAR(16)   NOT NULL DEFAULT 'local',
    ADD COLUMN subject    VARCHAR(1000) NULL,
    ADD COLUMN checked_at BIGINT        NULL;

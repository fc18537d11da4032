-- Where a user signs in (SPEC §14): `local` (a password kept here) or a directory
-- (`ldap`), and the user's identity there (the entry's DN). A directory user's role and
-- apps are those its groups give at its latest sign-in.
ALTER TABLE users
    ADD COLUMN source  VARCHAR(16)   NOT NULL DEFAULT 'local',
    ADD COLUMN subject VARCHAR(1000) NULL;

-- The groups an identity provider last named for a user (SPEC §14), as a JSON array of
-- names: an OpenID provider cannot be asked between sign-ins, so a user's API tokens are
-- re-checked against the node's --sso-map with the groups of its last sign-in.
ALTER TABLE users ADD COLUMN sso_groups TEXT NULL;

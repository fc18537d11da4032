-- On a Galera cluster a row lock is local to the member that takes it: the shared lock a
-- node's claim holds on its fence row does not stop a take-over committed through another
-- member, so a stalled node could claim new rows under an epoch already taken from it.
-- There a node's lease-holding transactions write their fence row instead (`writes + 1`
-- where the epoch is still theirs), and certification turns the race into a conflict that
-- one side retries (`store::hold_lease!`). Unused on a single server.
ALTER TABLE node_fences ADD COLUMN writes BIGINT NOT NULL DEFAULT 0;

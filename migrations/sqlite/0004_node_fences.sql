-- The lock a node holds while it writes under its lease moves off its `nodes` row: every
-- claim and dispatch record holds it (shared), and on the `nodes` row it made the node's
-- own heartbeat (an update of that row) wait behind them. Under load a busy node's
-- heartbeat lagged past dead-after and the node was taken over. `node_fences` carries the
-- epoch those writes check; `nodes.epoch` stays what the heartbeat checks; a take-over
-- bumps both in one transaction.
CREATE TABLE node_fences (
    node_id INTEGER NOT NULL PRIMARY KEY,
    epoch   INTEGER NOT NULL
);

INSERT INTO node_fences (node_id, epoch) SELECT id, epoch FROM nodes;

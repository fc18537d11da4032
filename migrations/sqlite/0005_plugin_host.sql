-- Plugin host capabilities (the `rota` import module): where a job's plugin may send HTTP
-- requests, secrets per app (sealed with the node's secrets key), and key-value state per
-- job.

-- JSON array of origins or URL prefixes; NULL or empty: no network.
ALTER TABLE jobs ADD COLUMN http_allow TEXT NULL;

-- A secret's value never leaves the scheduler unsealed except to a run of its app.
-- `sealed` = 12-byte nonce || ChaCha20-Poly1305 ciphertext and tag, bound to app and name.
CREATE TABLE secrets (
    app_id     INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    sealed     BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (app_id, name)
);

-- Counters, cursors and dedupe marks of a job's plugin; values up to 64 KiB.
CREATE TABLE kv (
    job_id     INTEGER NOT NULL,
    k          TEXT    NOT NULL,
    v          BLOB    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, k)
);

-- Plugin host capabilities (the `rota` import module): where a job's plugin may send HTTP
-- requests, secrets per app (sealed with the node's secrets key), and key-value state per
-- job.

-- JSON array of origins or URL prefixes; NULL or empty: no network.
ALTER TABLE jobs ADD COLUMN http_allow TEXT NULL;

-- A secret's value never leaves the scheduler unsealed except to a run of its app.
-- `sealed` = 12-byte nonce || ChaCha20-Poly1305 ciphertext and tag, bound to app and name.
CREATE TABLE secrets (
    app_id     BIGINT       NOT NULL,
    name       VARCHAR(128) NOT NULL,
    sealed     BLOB         NOT NULL,
    created_at BIGINT       NOT NULL,
    updated_at BIGINT       NOT NULL,
    PRIMARY KEY (app_id, name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Counters, cursors and dedupe marks of a job's plugin; values up to 64 KiB.
CREATE TABLE kv (
    job_id     BIGINT       NOT NULL,
    k          VARCHAR(256) NOT NULL,
    v          MEDIUMBLOB   NOT NULL,
    updated_at BIGINT       NOT NULL,
    PRIMARY KEY (job_id, k)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

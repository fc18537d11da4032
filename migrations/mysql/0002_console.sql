-- The web console: login sessions and the audit log.

-- A session is known by the SHA-256 of its cookie, never by the cookie itself.
CREATE TABLE sessions (
    token_hash CHAR(64)    NOT NULL PRIMARY KEY,
    user_id    BIGINT      NOT NULL,
    created_at BIGINT      NOT NULL,
    expires_at BIGINT      NOT NULL,
    KEY idx_sessions_expires (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Who changed what from the console.
CREATE TABLE audit_log (
    id        BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    user_name VARCHAR(200)  NOT NULL,
    action    VARCHAR(64)   NOT NULL,
    target    VARCHAR(400)  NOT NULL,
    at        BIGINT        NOT NULL,
    KEY idx_audit_at (at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

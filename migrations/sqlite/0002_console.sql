-- The web console: login sessions and the audit log.

-- A session is known by the SHA-256 of its cookie, never by the cookie itself.
CREATE TABLE sessions (
    token_hash TEXT NOT NULL PRIMARY KEY,
    user_id INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX idx_sessions_expires ON sessions (expires_at);

-- Who changed what from the console.
CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_name TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    at INTEGER NOT NULL
);
CREATE INDEX idx_audit_at ON audit_log (at);

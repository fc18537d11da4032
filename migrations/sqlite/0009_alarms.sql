-- Alarms (SPEC §9). A rule watches one kind of event (`on`) of an app or one of its jobs
-- and names the channels its alarms go to. Events are written where they happen (a failed
-- run, in the transaction that ends its attempt), then folded per rule by the throttle
-- into alarms; each alarm has one delivery per channel, sent and retried by whichever node
-- claims it first (a claim ends at `claimed_until`, so a dead node's sends are taken up).

-- Where alarms go. The URL of a bot may hold its token, so it is sealed like an app secret
-- and shown only as `url_hint` (scheme, host and path start). `secret` names an app secret
-- (of `app`) that signs the messages.
CREATE TABLE alarm_channels (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT NOT NULL,
    app           TEXT NULL,
    kind          TEXT NOT NULL,
    url_sealed    BLOB NULL,
    url_hint      TEXT NULL,
    recipients    TEXT NULL,
    secret        TEXT NULL,
    created_at    INTEGER NOT NULL
);

-- What to watch. `open_since`: an alarm went out and its condition has not cleared;
-- `last_sent_at`: when the throttle last let one out.
CREATE TABLE alarm_rules (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT NOT NULL,
    app           TEXT NOT NULL,
    job_id        INTEGER NULL,
    on_event      TEXT NOT NULL,
    threshold     INTEGER NULL,
    channels      TEXT NOT NULL,
    throttle_ms   INTEGER NOT NULL,
    enabled       BOOLEAN NOT NULL DEFAULT 1,
    open_since    INTEGER NULL,
    last_sent_at  INTEGER NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);

-- Events not folded into an alarm yet. One row may stand for `count` events of one rule
-- seen in one batch (a burst of failures is a few rows). A fold marks the rows it takes
-- (`folding`), sums them and deletes them in one transaction: a row committed meanwhile
-- is left for the next fold, never deleted unread.
CREATE TABLE alarm_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    rule_id       INTEGER NOT NULL,
    resolved      BOOLEAN NOT NULL DEFAULT 0,
    count         INTEGER NOT NULL DEFAULT 1,
    folding       BOOLEAN NOT NULL DEFAULT 0,
    job_id        INTEGER NULL,
    task_id       INTEGER NULL,
    run_id        INTEGER NULL,
    attempt       INTEGER NULL,
    message       TEXT NOT NULL,
    at            INTEGER NOT NULL
);

-- The history: one row per message, `count` events folded into it.
CREATE TABLE alarms (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    rule_id       INTEGER NOT NULL,
    rule          TEXT NOT NULL,
    on_event      TEXT NOT NULL,
    app           TEXT NOT NULL,
    job_id        INTEGER NULL,
    task_id       INTEGER NULL,
    run_id        INTEGER NULL,
    attempt       INTEGER NULL,
    message       TEXT NOT NULL,
    count         INTEGER NOT NULL,
    resolved      BOOLEAN NOT NULL,
    first_at      INTEGER NOT NULL,
    last_at       INTEGER NOT NULL,
    created_at    INTEGER NOT NULL
);

-- One send of an alarm to one channel: `pending` until `sent`, or `failed` once it gave up.
CREATE TABLE alarm_deliveries (
    alarm_id      INTEGER NOT NULL,
    channel       TEXT NOT NULL,
    status        TEXT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_at       INTEGER NOT NULL,
    claimed_until INTEGER NULL,
    last_error    TEXT NULL,
    sent_at       INTEGER NULL,
    PRIMARY       KEY (alarm_id, channel)
);

CREATE UNIQUE INDEX uk_alarm_channels_name ON alarm_channels (name);
CREATE UNIQUE INDEX uk_alarm_rules_name ON alarm_rules (name);
CREATE INDEX ix_alarm_events_rule ON alarm_events (rule_id, id);
CREATE INDEX ix_alarm_events_fold ON alarm_events (rule_id, folding, resolved, id);
CREATE INDEX ix_alarms_rule ON alarms (rule_id, id);
CREATE INDEX ix_alarms_created ON alarms (created_at);
CREATE INDEX ix_alarm_deliveries_due ON alarm_deliveries (status, next_at);

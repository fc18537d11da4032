-- Alarms (SPEC §9). A rule watches one kind of event (`on`) of an app or one of its jobs
-- and names the channels its alarms go to. Events are written where they happen (a failed
-- run, in the transaction that ends its attempt), then folded per rule by the throttle
-- into alarms; each alarm has one delivery per channel, sent and retried by whichever node
-- claims it first (a claim ends at `claimed_until`, so a dead node's sends are taken up).

-- Where alarms go. The URL of a bot may hold its token, so it is sealed like an app secret
-- and shown only as `url_hint` (scheme, host and path start). `secret` names an app secret
-- (of `app`) that signs the messages.
CREATE TABLE alarm_channels (
    id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name        VARCHAR(100) NOT NULL,
    app         VARCHAR(100) NULL,
    kind        VARCHAR(16)  NOT NULL,
    url_sealed  BLOB         NULL,
    url_hint    VARCHAR(300) NULL,
    recipients  TEXT         NULL,
    secret      VARCHAR(128) NULL,
    created_at  BIGINT       NOT NULL,
    UNIQUE KEY uk_alarm_channels_name (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- What to watch. `open_since`: an alarm went out and its condition has not cleared;
-- `last_sent_at`: when the throttle last let one out.
CREATE TABLE alarm_rules (
    id           BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name         VARCHAR(100) NOT NULL,
    app          VARCHAR(100) NOT NULL,
    job_id       BIGINT       NULL,
    on_event     VARCHAR(32)  NOT NULL,
    threshold    BIGINT       NULL,
    channels     TEXT         NOT NULL,
    throttle_ms  BIGINT       NOT NULL,
    enabled      BOOLEAN      NOT NULL DEFAULT 1,
    open_since   BIGINT       NULL,
    last_sent_at BIGINT       NULL,
    created_at   BIGINT       NOT NULL,
    updated_at   BIGINT       NOT NULL,
    UNIQUE KEY uk_alarm_rules_name (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Events not folded into an alarm yet. One row may stand for `count` events of one rule
-- seen in one batch (a burst of failures is a few rows). A fold marks the rows it takes
-- (`folding`), sums them and deletes them in one transaction: a row committed meanwhile
-- is left for the next fold, never deleted unread.
CREATE TABLE alarm_events (
    id       BIGINT  NOT NULL AUTO_INCREMENT PRIMARY KEY,
    rule_id  BIGINT  NOT NULL,
    resolved BOOLEAN NOT NULL DEFAULT 0,
    count    INT     NOT NULL DEFAULT 1,
    folding  BOOLEAN NOT NULL DEFAULT 0,
    job_id   BIGINT  NULL,
    task_id  BIGINT  NULL,
    run_id   BIGINT  NULL,
    attempt  INT     NULL,
    message  TEXT    NOT NULL,
    at       BIGINT  NOT NULL,
    KEY ix_alarm_events_rule (rule_id, id),
    KEY ix_alarm_events_fold (rule_id, folding, resolved, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The history: one row per message, `count` events folded into it.
CREATE TABLE alarms (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    rule_id    BIGINT       NOT NULL,
    rule       VARCHAR(100) NOT NULL,
    on_event   VARCHAR(32)  NOT NULL,
    app        VARCHAR(100) NOT NULL,
    job_id     BIGINT       NULL,
    task_id    BIGINT       NULL,
    run_id     BIGINT       NULL,
    attempt    INT          NULL,
    message    TEXT         NOT NULL,
    count      INT          NOT NULL,
    resolved   BOOLEAN      NOT NULL,
    first_at   BIGINT       NOT NULL,
    last_at    BIGINT       NOT NULL,
    created_at BIGINT       NOT NULL,
    KEY ix_alarms_rule (rule_id, id),
    KEY ix_alarms_created (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One send of an alarm to one channel: `pending` until `sent`, or `failed` once it gave up.
CREATE TABLE alarm_deliveries (
    alarm_id      BIGINT       NOT NULL,
    channel       VARCHAR(100) NOT NULL,
    status        VARCHAR(16)  NOT NULL,
    attempts      INT          NOT NULL DEFAULT 0,
    next_at       BIGINT       NOT NULL,
    claimed_until BIGINT       NULL,
    last_error    TEXT         NULL,
    sent_at       BIGINT       NULL,
    PRIMARY KEY (alarm_id, channel),
    KEY ix_alarm_deliveries_due (status, next_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Components (SPEC §5, "Components"). A plugin is a preview 1 module (`kind` = module) or
-- a component (`kind` = component) written for a `world` (`wasi:cli/command` or
-- `rota:plugin/handler`), whose imports are listed one per line in `imports`: what the
-- console shows.
ALTER TABLE plugins ADD COLUMN kind TEXT NOT NULL DEFAULT 'module';
ALTER TABLE plugins ADD COLUMN world TEXT NULL;
ALTER TABLE plugins ADD COLUMN imports TEXT NULL;

-- A plugin's bytes in parts of at most 4 MiB, once per SHA-256 (MySQL's default
-- `max_allowed_packet` is 16 MiB; the same layout on both stores). Plugins stored before
-- this migration keep their bytes in `plugins.module`; new ones leave it empty.
CREATE TABLE plugin_parts (
    sha256 TEXT    NOT NULL,
    part   INTEGER NOT NULL,
    bytes  BLOB    NOT NULL,
    PRIMARY KEY (sha256, part)
);

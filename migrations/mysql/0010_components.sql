-- Components (SPEC §5, "Components"). A plugin is a preview 1 module (`kind` = module) or
-- a component (`kind` = component) written for a `world` (`wasi:cli/command` or
-- `rota:plugin/handler`), whose imports are listed one per line in `imports`: what the
-- console shows.
ALTER TABLE plugins ADD COLUMN kind VARCHAR(16) NOT NULL DEFAULT 'module';
ALTER TABLE plugins ADD COLUMN world VARCHAR(64) NULL;
ALTER TABLE plugins ADD COLUMN imports TEXT NULL;

-- A plugin's bytes in parts of at most 4 MiB, once per SHA-256: a component with an
-- interpreter inside (Python, JavaScript) is 10–40 MB, over MySQL's default
-- `max_allowed_packet` (16 MiB) in one row. Plugins stored before this migration keep
-- their bytes in `plugins.module`; new ones leave it empty.
CREATE TABLE plugin_parts (
    sha256 CHAR(64)   NOT NULL,
    part   INT        NOT NULL,
    bytes  LONGBLOB   NOT NULL,
    PRIMARY KEY (sha256, part)
) ENGINE = InnoDB;

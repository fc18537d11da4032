//! Uploaded plugins, by name and version, and which app may fetch which module. A
//! plugin's bytes are kept once per SHA-256 in parts of at most [`PART_BYTES`]
//! (`plugin_parts`): a component with an interpreter inside is bigger than MySQL's default
//! `max_allowed_packet`. Plugins stored before parts existed keep theirs in
//! `plugins.module`.

use sqlx::AssertSqlSafe;

use super::rows::PLUGIN_COLUMNS;
use super::*;

/// The largest part of a plugin's bytes in one row.
pub const PART_BYTES: usize = 4 << 20;

/// A validated plugin to store.
#[derive(Debug, Clone, Copy)]
pub struct NewPlugin<'a> {
    pub name: &'a str,
    pub sha256: &'a str,
    pub bytes: &'a [u8],
    /// `module` or `component`.
    pub kind: &'a str,
    pub world: Option<&'a str>,
    pub imports: &'a [String],
}

impl<'a> NewPlugin<'a> {
    /// A WASI preview 1 module.
    pub fn module(name: &'a str, sha256: &'a str, bytes: &'a [u8]) -> Self {
        NewPlugin {
            name,
            sha256,
            bytes,
            kind: "module",
            world: None,
            imports: &[],
        }
    }
}

impl Store {
    /// Stores a validated plugin under its name. The same bytes under the same name return
    /// the existing version (`false`); new bytes make the next version (`true`).
    pub async fn insert_plugin(&self, new: NewPlugin<'_>, now: Millis) -> Result<(Plugin, bool)> {
        retrying!("insert_plugin", {
            let NewPlugin { name, sha256, .. } = new;
            let size = i64::try_from(new.bytes.len()).unwrap_or(i64::MAX);
            let imports = new.imports.join("\n");
            for _ in 0..3 {
                let attempt: Result<(Plugin, bool)> = on_pool!(self, |pool, Db| {
                    let mut tx = pool.begin_write().await?;
                    let existing: Option<PluginRow> = sqlx::query_as(AssertSqlSafe(format!(
                        "SELECT {PLUGIN_COLUMNS} FROM plugins \
                         WHERE name = ? AND sha256 = ? ORDER BY version DESC LIMIT 1"
                    )))
                    .bind(name)
                    .bind(sha256)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some(row) = existing {
                        return Ok((row.into(), false));
                    }
                    let latest: Option<i32> = sqlx::query_scalar(
                        "SELECT version FROM plugins WHERE name = ? ORDER BY version DESC LIMIT 1",
                    )
                    .bind(name)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let version = latest.unwrap_or(0) + 1;
                    let stored: Option<i64> = sqlx::query_scalar(
                        "SELECT part FROM plugin_parts WHERE sha256 = ? LIMIT 1",
                    )
                    .bind(sha256)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if stored.is_none() {
                        for (part, bytes) in new.bytes.chunks(PART_BYTES).enumerate() {
                            sqlx::query(
                                "INSERT INTO plugin_parts (sha256, part, bytes) VALUES (?, ?, ?)",
                            )
                            .bind(sha256)
                            .bind(part as i64)
                            .bind(bytes)
                            .execute(&mut *tx)
                            .await?;
                        }
                    }
                    let r = sqlx::query(
                        "INSERT INTO plugins (name, version, sha256, size, module, created_at, kind, world, imports) \
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    )
                    .bind(name)
                    .bind(version)
                    .bind(sha256)
                    .bind(size)
                    .bind(&[][..])
                    .bind(now)
                    .bind(new.kind)
                    .bind(new.world)
                    .bind((!imports.is_empty()).then_some(imports.as_str()))
                    .execute(&mut *tx)
                    .await;
                    let id = match r {
                        Ok(r) => r.insert_id(),
                        Err(e) => return Err(e.into()),
                    };
                    tx.commit().await?;
                    Ok((
                        Plugin {
                            id,
                            name: name.to_owned(),
                            version,
                            sha256: sha256.to_owned(),
                            size,
                            created_at: now,
                            kind: new.kind.to_owned(),
                            world: new.world.map(str::to_owned),
                            imports: new.imports.to_vec(),
                        },
                        true,
                    ))
                });
                match attempt {
                    // A concurrent upload took this version number: try the next.
                    Err(Error::Conflict(_)) => continue,
                    other => return other,
                }
            }
            Err(Error::Conflict(format!(
                "plugin `{name}` is being uploaded concurrently; try again"
            )))
        })
    }

    pub async fn list_plugins(&self) -> Result<Vec<Plugin>> {
        on_pool!(self, |pool, Db| {
            let rows: Vec<PluginRow> = sqlx::query_as(AssertSqlSafe(format!(
                "SELECT {PLUGIN_COLUMNS} FROM plugins ORDER BY name, version DESC"
            )))
            .fetch_all(pool)
            .await?;
            Ok(rows.into_iter().map(Plugin::from).collect())
        })
    }

    pub async fn get_plugin(&self, id: i64) -> Result<Plugin> {
        on_pool!(self, |pool, Db| {
            let row: Option<PluginRow> = sqlx::query_as(AssertSqlSafe(format!(
                "SELECT {PLUGIN_COLUMNS} FROM plugins WHERE id = ?"
            )))
            .bind(id)
            .fetch_optional(pool)
            .await?;
            row.map(Plugin::from)
                .ok_or_else(|| Error::NotFound(format!("plugin {id}")))
        })
    }

    /// Which jobs use which plugin: (plugin name, job id, job name), by plugin and job name.
    pub async fn plugin_users(&self) -> Result<Vec<PluginUser>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT plugin, id AS job_id, name AS job_name FROM jobs ORDER BY plugin, name",
            )
            .fetch_all(pool)
            .await?)
        })
    }

    /// Deletes every version of plugin `name`, which no job may use (a conflict naming
    /// them otherwise). Returns the versions deleted.
    pub async fn delete_plugin(&self, name: &str) -> Result<u64> {
        retrying!("delete_plugin", {
            on_pool!(self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                let users: Vec<String> = sqlx::query_scalar(
                    "SELECT name FROM jobs WHERE plugin = ? ORDER BY name LIMIT 6",
                )
                .bind(name)
                .fetch_all(&mut *tx)
                .await?;
                if !users.is_empty() {
                    let more = if users.len() > 5 { ", …" } else { "" };
                    let listed: Vec<String> =
                        users.iter().take(5).map(|j| format!("`{j}`")).collect();
                    return Err(Error::Conflict(format!(
                        "plugin `{name}` is used by job {}{more}; change or delete those jobs first",
                        listed.join(", ")
                    )));
                }
                let deleted = sqlx::query("DELETE FROM plugins WHERE name = ?")
                    .bind(name)
                    .execute(&mut *tx)
                    .await?
                    .affected();
                if deleted == 0 {
                    return Err(Error::NotFound(format!("plugin `{name}`")));
                }
                // Bytes no plugin row refers to any more.
                sqlx::query(
                    "DELETE FROM plugin_parts WHERE NOT EXISTS \
                     (SELECT 1 FROM plugins p WHERE p.sha256 = plugin_parts.sha256)",
                )
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(deleted)
            })
        })
    }

    /// The newest version of plugin `name`.
    pub async fn latest_plugin(&self, name: &str) -> Result<Plugin> {
        on_pool!(self, |pool, Db| {
            let row: Option<PluginRow> = sqlx::query_as(AssertSqlSafe(format!(
                "SELECT {PLUGIN_COLUMNS} FROM plugins WHERE name = ? ORDER BY version DESC LIMIT 1"
            )))
            .bind(name)
            .fetch_optional(pool)
            .await?;
            row.map(Plugin::from)
                .ok_or_else(|| Error::NotFound(format!("plugin `{name}`")))
        })
    }

    /// The plugin bytes with this SHA-256.
    pub async fn plugin_module(&self, sha256: &str) -> Result<Vec<u8>> {
        on_pool!(self, |pool, Db| {
            let parts: Vec<Vec<u8>> =
                sqlx::query_scalar("SELECT bytes FROM plugin_parts WHERE sha256 = ? ORDER BY part")
                    .bind(sha256)
                    .fetch_all(pool)
                    .await?;
            if !parts.is_empty() {
                return Ok(parts.concat());
            }
            let bytes: Option<Vec<u8>> =
                sqlx::query_scalar("SELECT module FROM plugins WHERE sha256 = ? LIMIT 1")
                    .bind(sha256)
                    .fetch_optional(pool)
                    .await?;
            bytes.ok_or_else(|| Error::NotFound(format!("plugin module {sha256}")))
        })
    }

    /// The SHA-256 of the plugin each enabled job of `app` binds now (the newest version of
    /// its name), at most `limit`: what that app's executors compile ahead of a first run.
    pub async fn plugins_bound_by(&self, app: &str, limit: u32) -> Result<Vec<String>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar(
                "SELECT p.sha256 FROM plugins p JOIN (\
                     SELECT v.name, MAX(v.version) AS version FROM plugins v \
                     JOIN jobs j ON j.plugin = v.name JOIN apps a ON a.id = j.app_id \
                     WHERE a.name = ? AND j.enabled = 1 GROUP BY v.name\
                 ) newest ON newest.name = p.name AND newest.version = p.version \
                 ORDER BY p.name LIMIT ?",
            )
            .bind(app)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?)
        })
    }

    /// The apps with an enabled job bound to plugin `name`.
    pub async fn apps_binding(&self, name: &str) -> Result<Vec<String>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar(
                "SELECT DISTINCT a.name FROM jobs j JOIN apps a ON a.id = j.app_id \
                 WHERE j.plugin = ? AND j.enabled = 1 ORDER BY a.name",
            )
            .bind(name)
            .fetch_all(pool)
            .await?)
        })
    }

    /// Whether a job of `app` binds a plugin with this hash (any version of its name): what
    /// an executor of `app` may download.
    pub async fn app_uses_plugin(&self, app: &str, sha256: &str) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            let found: Option<i64> = sqlx::query_scalar(
                "SELECT p.id FROM plugins p JOIN jobs j ON j.plugin = p.name \
                 JOIN apps a ON a.id = j.app_id WHERE p.sha256 = ? AND a.name = ? LIMIT 1",
            )
            .bind(sha256)
            .bind(app)
            .fetch_optional(pool)
            .await?;
            Ok(found.is_some())
        })
    }
}

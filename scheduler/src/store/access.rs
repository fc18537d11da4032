//! The console's users and sessions, API tokens, the audit log and the dashboard's counts.

use super::*;

/// An audit note's target as its column holds it: at most 400 characters.
fn audit_target(target: &str) -> String {
    target.chars().take(400).collect()
}

/// The insert of one audit note, on either backend.
fn audit_insert<'q, D>(
    user_name: &'q str,
    action: &'q str,
    target: &'q str,
    at: Millis,
) -> sqlx::query::Query<'q, D, D::Arguments>
where
    D: sqlx::Database,
    &'q str: sqlx::Encode<'q, D> + sqlx::Type<D>,
    Millis: sqlx::Encode<'q, D> + sqlx::Type<D>,
{
    sqlx::query("INSERT INTO audit_log (user_name, action, target, at) VALUES (?, ?, ?, ?)")
        .bind(user_name)
        .bind(action)
        .bind(target)
        .bind(at)
}

impl Store {
    pub async fn count_users(&self) -> Result<i64> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_scalar("SELECT COUNT(*) FROM users")
                .fetch_one(pool)
                .await?)
        })
    }

    /// A new user; a taken name is a [`Error::Conflict`].
    pub async fn insert_user(
        &self,
        name: &str,
        password_hash: &str,
        role: &str,
        apps: &str,
        now: Millis,
    ) -> Result<i64> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query(
                "INSERT INTO users (name, password_hash, role, apps, created_at) \
                 VALUES (?, ?, ?, ?, ?)",
            )
            .bind(name)
            .bind(password_hash)
            .bind(role)
            .bind(apps)
            .bind(now)
            .execute(pool)
            .await?
            .insert_id())
        })
    }

    /// The user of directory `source` whose identity there is `subject`, as it signs in
    /// now in `groups` (a JSON array of their names) with the role and apps they give: found by that identity (whatever case
    /// of its name was typed), else created as `name` at its first sign-in. A local user
    /// named `name` is not taken over (a [`Error::Conflict`]); a user of the same directory
    /// named so with another identity (an account deleted, its name given to someone new)
    /// becomes this one, and what was issued to the old one — API tokens, sessions — ends;
    /// unless `names_move` is false (a provider whose names people choose): then that is a
    /// [`Error::Conflict`] too. Decided in the transaction that writes the row.
    #[allow(clippy::too_many_arguments)]
    pub async fn upsert_directory_user(
        &self,
        name: &str,
        source: &str,
        subject: &str,
        names_move: bool,
        groups: &str,
        role: &str,
        apps: &str,
        now: Millis,
    ) -> Result<User> {
        // Two first sign-ins at once: on MySQL both lock the missing row's gap and one
        // insert deadlocks, is retried and finds the other's row.
        let lock = if self.is_mysql() { " FOR UPDATE" } else { "" };
        retrying!("upsert_directory_user", {
            on_pool!(self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                let by_subject: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT id FROM users WHERE source = ? AND subject = ?{lock}"
                )))
                .bind(source)
                .bind(subject)
                .fetch_optional(&mut *tx)
                .await?;
                let id = match by_subject {
                    Some(id) => id,
                    None => {
                        let by_name: Option<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(
                            format!("SELECT id, source FROM users WHERE name = ?{lock}"),
                        ))
                        .bind(name)
                        .fetch_optional(&mut *tx)
                        .await?;
                        match by_name {
                            Some((_, other)) if other != source => {
                                return Err(Error::Conflict(format!(
                                    "user `{name}` is a {other} user here, not one of the {source} directory"
                                )));
                            }
                            Some(_) if !names_move => {
                                return Err(Error::Conflict(format!(
                                    "user `{name}` is another {source} user here"
                                )));
                            }
                            Some((id, _)) => {
                                sqlx::query(
                                    "UPDATE api_tokens SET revoked_at = ? \
                                     WHERE user_id = ? AND revoked_at IS NULL",
                                )
                                .bind(now)
                                .bind(id)
                                .execute(&mut *tx)
                                .await?;
                                sqlx::query("DELETE FROM sessions WHERE user_id = ?")
                                    .bind(id)
                                    .execute(&mut *tx)
                                    .await?;
                                id
                            }
                            None => {
                                // No password of its own: the directory checks it.
                                sqlx::query(
                                    "INSERT INTO users (name, password_hash, role, apps, created_at, source) \
                                     VALUES (?, '', ?, ?, ?, ?)",
                                )
                                .bind(name)
                                .bind(role)
                                .bind(apps)
                                .bind(now)
                                .bind(source)
                                .execute(&mut *tx)
                                .await?
                                .insert_id()
                            }
                        }
                    }
                };
                sqlx::query(
                    "UPDATE users SET role = ?, apps = ?, subject = ?, checked_at = ?, sso_groups = ? \
                     WHERE id = ?",
                )
                .bind(role)
                .bind(apps)
                .bind(subject)
                .bind(now)
                .bind(groups)
                .bind(id)
                .execute(&mut *tx)
                .await?;
                let user: User = sqlx::query_as(
                    "SELECT id, name, password_hash, role, apps, created_at, source, subject, \
                     checked_at, sso_groups FROM users WHERE id = ?",
                )
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(user)
            })
        })
    }

    /// A directory user's access as the directory gave it `at`.
    pub async fn set_directory_access(
        &self,
        id: i64,
        role: &str,
        apps: &str,
        at: Millis,
    ) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query("UPDATE users SET role = ?, apps = ?, checked_at = ? WHERE id = ?")
                .bind(role)
                .bind(apps)
                .bind(at)
                .bind(id)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// Ends every console session of user `user_id`.
    pub async fn end_sessions(&self, user_id: i64) -> Result<u64> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query("DELETE FROM sessions WHERE user_id = ?")
                .bind(user_id)
                .execute(pool)
                .await?
                .affected())
        })
    }

    /// The user of directory `source` whose identity there is `subject`.
    pub async fn directory_user(&self, source: &str, subject: &str) -> Result<Option<User>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT id, name, password_hash, role, apps, created_at, source, subject, \
                 checked_at, sso_groups FROM users WHERE source = ? AND subject = ?",
            )
            .bind(source)
            .bind(subject)
            .fetch_optional(pool)
            .await?)
        })
    }

    pub async fn user_by_name(&self, name: &str) -> Result<Option<User>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT id, name, password_hash, role, apps, created_at, source, subject, checked_at, sso_groups FROM users WHERE name = ?",
            )
            .bind(name)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Stores a new session (by its token's hash) and drops the expired ones.
    pub async fn insert_session(
        &self,
        token_hash: &str,
        user_id: i64,
        now: Millis,
        expires_at: Millis,
    ) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query("DELETE FROM sessions WHERE expires_at <= ?")
                .bind(now)
                .execute(pool)
                .await?;
            sqlx::query(
                "INSERT INTO sessions (token_hash, user_id, created_at, expires_at) \
                 VALUES (?, ?, ?, ?)",
            )
            .bind(token_hash)
            .bind(user_id)
            .bind(now)
            .bind(expires_at)
            .execute(pool)
            .await?;
            Ok(())
        })
    }

    /// The user of an unexpired session.
    pub async fn session_user(&self, token_hash: &str, now: Millis) -> Result<Option<User>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT u.id, u.name, u.password_hash, u.role, u.apps, u.created_at, u.source, u.subject, u.checked_at, u.sso_groups FROM sessions s \
                 JOIN users u ON u.id = s.user_id WHERE s.token_hash = ? AND s.expires_at > ?",
            )
            .bind(token_hash)
            .bind(now)
            .fetch_optional(pool)
            .await?)
        })
    }

    pub async fn delete_session(&self, token_hash: &str) -> Result<()> {
        on_pool!(self, |pool, Db| {
            sqlx::query("DELETE FROM sessions WHERE token_hash = ?")
                .bind(token_hash)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// Notes in the audit log that `user_name` did `action` to `target` (cut to the
    /// column's 400 characters): inside `tx` when given, so that the note commits with the
    /// change it tells of or neither does; else in a statement of its own.
    pub(crate) async fn record_audit(
        &self,
        tx: Option<&mut Tx>,
        user_name: &str,
        action: &str,
        target: &str,
        now: Millis,
    ) -> Result<()> {
        let target = audit_target(target);
        match tx {
            Some(tx) => on_tx!(tx, |tx, Db| {
                audit_insert::<Db>(user_name, action, &target, now)
                    .execute(&mut **tx)
                    .await?;
            }),
            None => on_pool!(self, |pool, Db| {
                audit_insert::<Db>(user_name, action, &target, now)
                    .execute(pool)
                    .await?;
            }),
        }
        Ok(())
    }

    /// Changes a user's password and ends their other sessions (all but `keep_session`).
    pub async fn set_password(
        &self,
        user_id: i64,
        password_hash: &str,
        keep_session: &str,
    ) -> Result<()> {
        retrying!("set_password", {
            on_pool!(self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                sqlx::query("UPDATE users SET password_hash = ? WHERE id = ?")
                    .bind(password_hash)
                    .bind(user_id)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM sessions WHERE user_id = ? AND token_hash <> ?")
                    .bind(user_id)
                    .bind(keep_session)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            })
        })
    }

    /// Every user, by name.
    pub async fn list_users(&self) -> Result<Vec<User>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT id, name, password_hash, role, apps, created_at, source, subject, checked_at, sso_groups FROM users ORDER BY name",
            )
            .fetch_all(pool)
            .await?)
        })
    }

    pub async fn get_user(&self, id: i64) -> Result<User> {
        on_pool!(self, |pool, Db| {
            sqlx::query_as(
                "SELECT id, name, password_hash, role, apps, created_at, source, subject, checked_at, sso_groups FROM users WHERE id = ?",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?
            .ok_or_else(|| Error::NotFound(format!("user {id}")))
        })
    }

    /// Changes a user's role and apps; their sessions and tokens carry the change at once.
    pub async fn set_user_access(&self, id: i64, role: &str, apps: &str) -> Result<()> {
        on_pool!(self, |pool, Db| {
            let done = sqlx::query("UPDATE users SET role = ?, apps = ? WHERE id = ?")
                .bind(role)
                .bind(apps)
                .bind(id)
                .execute(pool)
                .await?;
            if done.rows_affected() == 0 {
                return Err(Error::NotFound(format!("user {id}")));
            }
            Ok(())
        })
    }

    /// Deletes a user with their sessions and tokens.
    pub async fn delete_user(&self, id: i64) -> Result<()> {
        retrying!("delete_user", {
            on_pool!(self, |pool, Db| {
                let mut tx = pool.begin_write().await?;
                for sql in [
                    "DELETE FROM sessions WHERE user_id = ?",
                    "DELETE FROM api_tokens WHERE user_id = ?",
                    "DELETE FROM users WHERE id = ?",
                ] {
                    sqlx::query(sql).bind(id).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(())
            })
        })
    }

    /// Stores a new API token of `user_id` by its hash.
    pub async fn insert_token(
        &self,
        user_id: i64,
        name: &str,
        token_hash: &str,
        now: Millis,
    ) -> Result<i64> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query(
                "INSERT INTO api_tokens (user_id, name, token_hash, created_at) VALUES (?, ?, ?, ?)",
            )
            .bind(user_id)
            .bind(name)
            .bind(token_hash)
            .bind(now)
            .execute(pool)
            .await?
            .insert_id())
        })
    }

    /// API tokens, newest first: one user's, or everyone's (`None`).
    pub async fn list_tokens(&self, user_id: Option<i64>) -> Result<Vec<ApiToken>> {
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new(
                "SELECT t.id, t.user_id, u.name AS user_name, t.name, t.created_at, t.revoked_at \
                 FROM api_tokens t JOIN users u ON u.id = t.user_id",
            );
            if let Some(user_id) = user_id {
                qb.push(" WHERE t.user_id = ").push_bind(user_id);
            }
            qb.push(" ORDER BY t.id DESC");
            Ok(qb.build_query_as().fetch_all(pool).await?)
        })
    }

    /// Revokes a token (of `user_id` only, when given); whether one was live.
    pub async fn revoke_token(&self, id: i64, user_id: Option<i64>, now: Millis) -> Result<bool> {
        on_pool!(self, |pool, Db| {
            let mut qb = QueryBuilder::<Db>::new("UPDATE api_tokens SET revoked_at = ");
            qb.push_bind(now)
                .push(" WHERE revoked_at IS NULL AND id = ")
                .push_bind(id);
            if let Some(user_id) = user_id {
                qb.push(" AND user_id = ").push_bind(user_id);
            }
            Ok(qb.build().execute(pool).await?.rows_affected() > 0)
        })
    }

    /// The user behind a live API token.
    pub async fn token_user(&self, token_hash: &str) -> Result<Option<User>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT u.id, u.name, u.password_hash, u.role, u.apps, u.created_at, u.source, \
                 u.subject, u.checked_at, u.sso_groups FROM api_tokens t JOIN users u ON u.id = t.user_id \
                 WHERE t.token_hash = ? AND t.revoked_at IS NULL",
            )
            .bind(token_hash)
            .fetch_optional(pool)
            .await?)
        })
    }

    /// Audit entries, newest first, older than `before_id`; `limit + 1` rows so the caller
    /// knows whether there is a next page.
    pub async fn list_audit(&self, before_id: Option<i64>, limit: u32) -> Result<Vec<AuditEntry>> {
        on_pool!(self, |pool, Db| {
            Ok(sqlx::query_as(
                "SELECT id, user_name, action, target, at FROM audit_log \
                 WHERE id < ? ORDER BY id DESC LIMIT ?",
            )
            .bind(before_id.unwrap_or(i64::MAX))
            .bind(i64::from(limit) + 1)
            .fetch_all(pool)
            .await?)
        })
    }
}

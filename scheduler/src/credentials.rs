//! Credentials: passwords hashed with argon2id, random tokens and what the database keeps
//! of them, and the first `admin`. The console's sign-in, its users page and the node's
//! start use them; nothing here knows HTTP.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::model::Millis;
use crate::store::{self, Store};

/// Makes `admin` when there are no users yet: with `password`, or with a generated one that
/// is logged once (it is nowhere else).
pub async fn seed_admin(store: &Store, password: Option<&str>, now: Millis) -> anyhow::Result<()> {
    if store.count_users().await? > 0 {
        return Ok(());
    }
    let (password, generated) = match password {
        Some(p) => (p.to_owned(), false),
        None => (random_token(12), true),
    };
    let hash = hash_password(password.clone()).await?;
    match store.insert_user("admin", &hash, "admin", "*", now).await {
        // Another node seeded it first.
        Ok(_) | Err(store::Error::Conflict(_)) => {}
        Err(e) => return Err(e.into()),
    }
    if generated {
        tracing::warn!(
            user = "admin",
            password = %password,
            "console: created user `admin` with a generated password; it is shown only this once (set ROTA_ADMIN_PASSWORD to choose it)"
        );
    }
    Ok(())
}

/// An argon2id PHC string, computed off the async threads (it is slow on purpose).
pub async fn hash_password(password: String) -> anyhow::Result<String> {
    tokio::task::spawn_blocking(move || {
        let mut salt = [0u8; 16];
        rand::rng().fill_bytes(&mut salt);
        let salt = SaltString::encode_b64(&salt).map_err(|e| anyhow::anyhow!("salt: {e}"))?;
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| anyhow::anyhow!("hashing a password: {e}"))
    })
    .await?
}

/// Whether `password` matches the stored PHC string (false for a malformed one).
pub async fn verify_password(password: String, hash: String) -> anyhow::Result<bool> {
    Ok(tokio::task::spawn_blocking(move || {
        PasswordHash::new(&hash)
            .map(|parsed| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &parsed)
                    .is_ok()
            })
            .unwrap_or(false)
    })
    .await?)
}

/// Checks a password for a user name that does not exist, as slowly as for one that does,
/// so the answer's timing does not tell which names exist.
pub async fn verify_nobody(password: String) -> anyhow::Result<()> {
    static DUMMY: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    let hash = DUMMY
        .get_or_try_init(|| hash_password(random_token(16)))
        .await?
        .clone();
    verify_password(password, hash).await?;
    Ok(())
}

/// `n` random bytes as hex.
pub fn random_token(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// What the database keeps of a session cookie.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

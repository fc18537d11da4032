//! Secrets at rest. A secret's value is sealed with ChaCha20-Poly1305 under the node's
//! secrets key before it is written, bound to its app and name (the associated data), so a
//! database dump or backup holds no readable secret and a sealed value copied to another
//! app's row does not open there. It is opened only to answer a run of its own app
//! (`api/executor.rs`, the `rota` import `secret_get`); the API and the console list
//! names and times, never values.
//!
//! The key is `ROTA_SECRETS_KEY` (64 hex digits) when set. Without it, it is derived from
//! the executor secret (HMAC-SHA256 of a fixed label), which every node of a cluster
//! already shares; setting a key of its own keeps the secrets sealed from whoever learns
//! the executor secret. Changing either makes stored secrets unreadable (they must be set
//! again), as the README says.

use std::fmt;

use chacha20poly1305::aead::{Aead, KeyInit as _, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};
use hmac::{Hmac, KeyInit, Mac};
use rota_proto::Secret;
use sha2::Sha256;

/// Longest secret name (bytes).
pub const NAME_MAX: usize = 128;
/// Largest secret value (bytes).
pub const VALUE_MAX: usize = 64 * 1024;
const NONCE_LEN: usize = 12;
const DERIVE_LABEL: &[u8] = b"rota secrets key v1";

#[derive(Clone)]
pub struct SecretBox {
    cipher: ChaCha20Poly1305,
}

impl fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretBox(<key>)")
    }
}

/// A sealed value that does not open: the key changed, or the row was tampered with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "secret `{name}` of app `{app}` cannot be opened with this node's secrets key (was the key or the executor secret changed?); set it again"
)]
pub struct OpenError {
    pub app: String,
    pub name: String,
}

impl SecretBox {
    /// The node's box: the configured key (`ROTA_SECRETS_KEY`), else one derived from the
    /// master secret.
    pub fn of(config: &crate::config::Config) -> SecretBox {
        match config.secrets_key {
            Some(key) => SecretBox::new(key),
            None => SecretBox::derived_from(&config.executor_secret),
        }
    }

    pub fn new(key: [u8; 32]) -> Self {
        SecretBox {
            cipher: ChaCha20Poly1305::new(&key.into()),
        }
    }

    /// The key derived from the executor secret, for nodes without a key of their own.
    pub fn derived_from(secret: &Secret) -> Self {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
            .expect("HMAC takes a key of any length");
        mac.update(DERIVE_LABEL);
        Self::new(mac.finalize().into_bytes().into())
    }

    /// Parses `ROTA_SECRETS_KEY`: 64 hex digits.
    pub fn parse_key(hex_key: &str) -> Result<[u8; 32], String> {
        let bytes = hex::decode(hex_key.trim())
            .map_err(|e| format!("the secrets key must be 64 hex digits: {e}"))?;
        <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
            format!(
                "the secrets key must be 64 hex digits (32 bytes), not {} bytes",
                bytes.len()
            )
        })
    }

    /// `nonce || ciphertext+tag` of `value`, bound to `app` and `name`.
    pub fn seal(&self, app: &str, name: &str, value: &[u8]) -> Vec<u8> {
        let nonce: [u8; NONCE_LEN] = rand::random();
        let aad = associated(app, name);
        let sealed = self
            .cipher
            .encrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: value,
                    aad: &aad,
                },
            )
            .expect("sealing a value of bounded size cannot fail");
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    pub fn open(&self, app: &str, name: &str, sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
        let fail = || OpenError {
            app: app.to_owned(),
            name: name.to_owned(),
        };
        if sealed.len() < NONCE_LEN {
            return Err(fail());
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| fail())?;
        let aad = associated(app, name);
        self.cipher
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: body,
                    aad: &aad,
                },
            )
            .map_err(|_| fail())
    }
}

fn associated(app: &str, name: &str) -> Vec<u8> {
    let mut aad = b"rota-secret\0".to_vec();
    aad.extend_from_slice(app.as_bytes());
    aad.push(0);
    aad.extend_from_slice(name.as_bytes());
    aad
}

/// A secret name: 1 to 128 of `A-Z a-z 0-9 _ - .`, so it is safe in URLs, logs and SQL.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(format!("must be 1 to {NAME_MAX} characters long"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Err(format!(
            "may hold only letters, digits, `_`, `-` and `.`, not {c:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_for_their_app_and_name_and_key() {
        let b = SecretBox::new([7; 32]);
        let sealed = b.seal("shop", "ORDER_TOKEN", b"s3cret");
        assert!(!sealed.windows(6).any(|w| w == b"s3cret"), "not in clear");
        assert_eq!(b.open("shop", "ORDER_TOKEN", &sealed).unwrap(), b"s3cret");
        assert!(b.open("other", "ORDER_TOKEN", &sealed).is_err());
        assert!(b.open("shop", "OTHER", &sealed).is_err());
        assert!(
            SecretBox::new([8; 32])
                .open("shop", "ORDER_TOKEN", &sealed)
                .is_err()
        );
        let mut tampered = sealed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert!(b.open("shop", "ORDER_TOKEN", &tampered).is_err());
        assert_ne!(
            sealed,
            b.seal("shop", "ORDER_TOKEN", b"s3cret"),
            "fresh nonce"
        );
    }

    #[test]
    fn keys_parse_or_say_why_not() {
        assert_eq!(SecretBox::parse_key(&"ab".repeat(32)).unwrap(), [0xab; 32]);
        assert!(
            SecretBox::parse_key("abcd")
                .unwrap_err()
                .contains("64 hex digits")
        );
        assert!(
            SecretBox::parse_key("zz")
                .unwrap_err()
                .contains("64 hex digits")
        );
        let derived = SecretBox::derived_from(&Secret::new("executor-secret-123"));
        let sealed = derived.seal("a", "n", b"v");
        let again = SecretBox::derived_from(&Secret::new("executor-secret-123"));
        assert_eq!(again.open("a", "n", &sealed).unwrap(), b"v");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("ORDER_SERVICE.token-1").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").unwrap_err().contains("' '"));
        assert!(check_name(&"x".repeat(129)).is_err());
    }
}

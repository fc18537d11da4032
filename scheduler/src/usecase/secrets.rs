//! An app's secrets: listed by name, set (sealed before it is stored) and deleted by
//! operators of the app; values are never read back through here (only a run of the app
//! opens them).

use super::{Error, Result};
use crate::access::Principal;
use crate::ports::Ports;
use crate::secrets;
use crate::store::SecretMeta;

/// An app's and a secret's names, checked (the same 422 through every door).
fn check_names(app: &str, name: &str) -> Result<()> {
    super::validate::app("app", app)?;
    secrets::check_name(name).map_err(|e| Error::Unprocessable(format!("secret name `{name}` {e}")))
}

/// Sets `app`'s secret `name` to `value` (creating or replacing it).
pub async fn set(
    ports: &Ports,
    who: &Principal,
    app: &str,
    name: &str,
    value: &[u8],
) -> Result<()> {
    check_names(app, name)?;
    who.check_app(app)?;
    if value.len() > secrets::VALUE_MAX {
        return Err(Error::PayloadTooLarge(format!(
            "a secret may be at most {} bytes, not {}",
            secrets::VALUE_MAX,
            value.len()
        )));
    }
    let sealed = ports.secrets().seal(app, name, value);
    ports
        .store()
        .set_secret(app, name, &sealed, ports.clock().now_ms())
        .await?;
    ports
        .audit(&who.name, "set secret", &format!("{app}/{name}"))
        .await;
    tracing::info!(app = %app, secret = %name, by = %who.name, "secret set");
    Ok(())
}

/// Deletes `app`'s secret `name`.
pub async fn delete(ports: &Ports, who: &Principal, app: &str, name: &str) -> Result<()> {
    check_names(app, name)?;
    who.check_app(app)?;
    if !ports.store().delete_secret(app, name).await? {
        return Err(Error::NotFound(format!(
            "secret `{name}` of app `{app}` not found"
        )));
    }
    ports
        .audit(&who.name, "delete secret", &format!("{app}/{name}"))
        .await;
    Ok(())
}

/// One app's secrets (names and times, never values) as `who` sees them.
pub struct AppSecrets {
    pub app: String,
    /// `who` may set and delete this app's secrets.
    pub may_change: bool,
    pub secrets: Vec<SecretMeta>,
}

/// The secrets of every app `who` sees, by app.
pub async fn list(ports: &Ports, who: &Principal) -> Result<Vec<AppSecrets>> {
    let store = ports.store();
    let mut all = Vec::new();
    for app in store.list_apps().await? {
        if !who.sees(&app.name) {
            continue;
        }
        all.push(AppSecrets {
            may_change: who.may_change(&app.name),
            secrets: store.list_secrets(&app.name).await?,
            app: app.name,
        });
    }
    Ok(all)
}

/// `app`'s secrets (names and times, never values), if `who` sees the app.
pub async fn of_app(ports: &Ports, who: &Principal, app: &str) -> Result<Vec<SecretMeta>> {
    super::validate::app("app", app)?;
    who.check(app, crate::access::Need::Read, &format!("app `{app}`"))?;
    Ok(ports.store().list_secrets(app).await?)
}

//! Plugins: uploading a module or component (validated by the same wasmtime engine that
//! runs it), listing them with the jobs that bind them, and deleting one by its name or
//! the id of any of its versions.

use bytes::Bytes;
use rota_executor::PluginKind;

use super::{Error, Result, validate};
use crate::access::Principal;
use crate::model::Plugin;
use crate::ports::Ports;
use crate::store::{self, NewPlugin, PluginUser};

/// Validates and stores `wasm` (binary or text) as plugin `name`; new bytes under a known
/// name make a new version. Returns the plugin and whether it is new (the same bytes
/// uploaded again under the same name are not). Operators and admins only.
pub async fn upload(
    ports: &Ports,
    who: &Principal,
    name: Option<String>,
    wasm: Bytes,
) -> Result<(Plugin, bool)> {
    who.check_operator("uploading a plugin")?;
    let name = name.ok_or_else(|| {
        Error::BadRequest("query parameter `name` is required: POST /api/v1/plugins?name=…".into())
    })?;
    validate::plugin("name", &name)?;
    let engine_node = ports.clone();
    // Compiling the module is CPU-heavy: keep it off the async workers.
    let valid = tokio::task::spawn_blocking(move || {
        rota_executor::validate_plugin(engine_node.engine(), &wasm)
    })
    .await
    .map_err(|e| Error::Internal(anyhow::anyhow!("plugin validation panicked: {e}")))?
    .map_err(|e| Error::Unprocessable(e.to_string()))?;
    let (kind, world, imports) = match &valid.kind {
        PluginKind::Module => ("module", None, &[][..]),
        PluginKind::Component { world, imports } => {
            ("component", Some(world.as_str()), imports.as_slice())
        }
    };
    let new = NewPlugin {
        name: &name,
        sha256: &valid.sha256,
        bytes: &valid.wasm,
        kind,
        world,
        imports,
    };
    let (plugin, created) = ports
        .store()
        .insert_plugin(new, ports.clock().now_ms())
        .await?;
    if created {
        tracing::info!(plugin = %name, version = plugin.version, sha256 = %plugin.sha256, "plugin uploaded");
        let target = format!("{name} v{}", plugin.version);
        ports.audit(&who.name, "upload plugin", &target).await;
        ports.plugin_changed(&name);
    }
    Ok((plugin, created))
}

/// The name of the plugin `id_or_name` refers to: the id of any of its versions, or its
/// name. A number that is no version's id is tried as a name.
pub async fn find_plugin(ports: &Ports, id_or_name: &str) -> Result<String> {
    if let Ok(id) = id_or_name.parse::<i64>() {
        match ports.store().get_plugin(id).await {
            Err(store::Error::NotFound(_)) => {}
            other => return Ok(other?.name),
        }
    }
    Ok(id_or_name.to_owned())
}

/// Deletes every version of the plugin `id_or_name` (its name, or the id of any version);
/// refused while a job uses it. Admins only. Returns its name and the versions deleted.
pub async fn delete(ports: &Ports, who: &Principal, id_or_name: &str) -> Result<(String, u64)> {
    who.check_admin("deleting a plugin")?;
    let name = find_plugin(ports, id_or_name).await?;
    let versions = ports.store().delete_plugin(&name).await?;
    ports.plugin_changed(&name);
    tracing::info!(plugin = %name, versions, by = %who.name, "plugin deleted");
    ports.audit(&who.name, "delete plugin", &name).await;
    Ok((name, versions))
}

/// Every plugin's latest version, by name.
pub async fn list(ports: &Ports) -> Result<Vec<Plugin>> {
    Ok(ports.store().list_plugins().await?)
}

/// Which jobs bind which plugin.
pub async fn bound_by(ports: &Ports) -> Result<Vec<PluginUser>> {
    Ok(ports.store().plugin_users().await?)
}

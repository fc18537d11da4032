//! Plugins: uploading a module or component (validated by the same wasmtime engine that
//! runs it).

use bytes::Bytes;
use rota_executor::PluginKind;

use super::{Error, Result, validate};
use crate::access::Principal;
use crate::model::{Plugin, now_ms};
use crate::node::Node;
use crate::store::NewPlugin;

/// Validates and stores `wasm` (binary or text) as plugin `name`; new bytes under a known
/// name make a new version. Returns the plugin and whether it is new (the same bytes
/// uploaded again under the same name are not). Operators and admins only.
pub async fn upload(
    node: &Node,
    who: &Principal,
    name: Option<String>,
    wasm: Bytes,
) -> Result<(Plugin, bool)> {
    who.check_operator("uploading a plugin")?;
    let name = name.ok_or_else(|| {
        Error::BadRequest("query parameter `name` is required: POST /api/v1/plugins?name=…".into())
    })?;
    validate::plugin("name", &name)?;
    let engine_node = node.clone();
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
    let (plugin, created) = node.store().insert_plugin(new, now_ms()).await?;
    if created {
        tracing::info!(plugin = %name, version = plugin.version, sha256 = %plugin.sha256, "plugin uploaded");
        let target = format!("{name} v{}", plugin.version);
        node.audit(&who.name, "upload plugin", &target).await;
        node.plugin_changed(&name);
    }
    Ok((plugin, created))
}

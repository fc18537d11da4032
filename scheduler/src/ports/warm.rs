//! Plugins compiled before their first run (issue 18). When a job is bound to a plugin, or
//! a new version of a bound plugin is uploaded, the live executors of the apps concerned are
//! told which plugins their jobs bind now (`POST /plugins/warm`) and compile the ones they
//! lack in the background; a Python or JavaScript component takes seconds to compile, and
//! its first trigger would otherwise wait for it. Every heartbeat answer repeats the list
//! (`RegistrationAck::plugins`), so an executor that missed the call, or started later,
//! catches up within a heartbeat interval. Best effort: a failed call only means the
//! compile happens at the first trigger, as before.

use std::time::Duration;

use super::Ports;
use crate::model::JobSpec;

/// How long one executor may take to accept the list (it answers before compiling).
const WARM_TIMEOUT: Duration = Duration::from_secs(2);
/// At most this many plugins per call (as in a heartbeat answer).
const PLUGINS_PER_CALL: u32 = 64;

impl Ports {
    /// A job was created or changed: its app's executors prepare the plugin it binds.
    pub(super) fn warm_app(&self, spec: &JobSpec) {
        if spec.plugin.is_empty() || !spec.enabled {
            return;
        }
        let node = self.clone();
        let app = spec.app.clone();
        tokio::spawn(async move { node.warm_apps(&[app]).await });
    }

    /// Plugin `name` has a new version: the executors of every app that binds it prepare it.
    pub(super) fn warm_binders(&self, name: &str) {
        let node = self.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            match node.cluster.store.apps_binding(&name).await {
                Ok(apps) => node.warm_apps(&apps).await,
                Err(e) => {
                    tracing::warn!(plugin = %name, error = %e, "cannot list the apps binding a new plugin version; their executors compile it at its first trigger")
                }
            }
        });
    }

    async fn warm_apps(&self, apps: &[String]) {
        for app in apps {
            let plugins = match self
                .cluster
                .store
                .plugins_bound_by(app, PLUGINS_PER_CALL)
                .await
            {
                Ok(plugins) if !plugins.is_empty() => plugins,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(app = %app, error = %e, "cannot list an app's plugins to compile ahead");
                    continue;
                }
            };
            let calls = self.executors.of_app(app).into_iter().map(|executor| {
                let plugins = &plugins;
                async move {
                    let call = self.client.warm(app, &executor.address, plugins);
                    match tokio::time::timeout(WARM_TIMEOUT, call).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => {
                            tracing::debug!(executor = %executor.address, error = %e, "an executor was not asked to compile ahead; its next heartbeat tells it")
                        }
                        Err(_) => {
                            tracing::debug!(executor = %executor.address, "an executor did not take the plugins to compile in time; its next heartbeat tells it")
                        }
                    }
                }
            });
            futures_util::future::join_all(calls).await;
        }
    }
}

//! The plugins' and executors' pages: versions with the jobs using them, upload and
//! delete; the live executors.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use super::auth::Session;
use super::pages::*;
use super::{Console, PREFIX, PageResult, When, render};
use crate::usecase::{self};

pub struct PluginRow {
    id: i64,
    name: String,
    /// The name, percent-encoded for a path.
    name_url: String,
    version: i32,
    sha256: String,
    size: i64,
    created: When,
    /// `module`, or `component`.
    kind: String,
    /// A component's world.
    world: Option<String>,
    /// A component's imports.
    imports: Vec<String>,
    /// The newest version's row (the one runs use) carries the name's jobs.
    newest: bool,
    jobs: Vec<(i64, String)>,
}

#[derive(Template)]
#[template(path = "plugins.html")]
struct PluginsPage {
    chrome: Chrome,
    plugins: Vec<PluginRow>,
    max_mib: usize,
}

pub async fn plugins(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
) -> PageResult {
    let plugins = crate::usecase::plugins::list(&console.ports).await?;
    let mut users: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for user in crate::usecase::plugins::bound_by(&console.ports).await? {
        users
            .entry(user.plugin)
            .or_default()
            .push((user.job_id, user.job_name));
    }
    let mut seen = std::collections::HashSet::new();
    render(&PluginsPage {
        chrome: Chrome::of(&s, "plugins"),
        max_mib: console.ports.config().max_plugin_bytes / (1024 * 1024),
        plugins: plugins
            .into_iter()
            .map(|p| {
                // Listed newest version first within a name.
                let newest = seen.insert(p.name.clone());
                PluginRow {
                    id: p.id,
                    name_url: encode(&p.name),
                    jobs: if newest {
                        users.get(&p.name).cloned().unwrap_or_default()
                    } else {
                        Vec::new()
                    },
                    name: p.name,
                    version: p.version,
                    sha256: p.sha256,
                    size: p.size,
                    created: When::of(p.created_at),
                    kind: p.kind,
                    world: p.world,
                    imports: p.imports,
                    newest,
                }
            })
            .collect(),
    })
}

/// Deletes every version of a plugin no job uses (admins only).
pub async fn delete_plugin(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
) -> PageResult {
    crate::usecase::plugins::delete(&console.ports, &s.who, &name).await?;
    Ok(Redirect::to(&format!("{PREFIX}/plugins")).into_response())
}

/// `POST /console/plugins?name=N` with the module as the body (sent by the page's script
/// with the CSRF header): the upload use case, as in the API; errors are answered as the
/// API's JSON (`{"error": …}`), which the script shows.
pub async fn upload_plugin(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
    Query(q): Query<UploadName>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let uploaded = match body {
        Ok(wasm) => usecase::plugins::upload(&console.ports, &s.who, q.name, wasm).await,
        Err(e) => Err(e.into()),
    };
    match uploaded {
        Ok((plugin, created)) => {
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            let body = json!({"name": plugin.name, "version": plugin.version});
            (status, Json(body)).into_response()
        }
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
pub struct UploadName {
    name: Option<String>,
}

pub struct ExecutorRow {
    app: String,
    address: String,
    capacity: i32,
    running: i32,
    registered: When,
    heartbeat: When,
}

/// A scheduler node on the executors page: live or gone, and its clock.
pub struct NodeRow {
    name: String,
    address: String,
    started: When,
    heartbeat: Option<When>,
    live: bool,
    clock_offset_ms: i64,
    clock_off: bool,
}

#[derive(Template)]
#[template(path = "executors.html")]
struct ExecutorsPage {
    chrome: Chrome,
    executors: Vec<ExecutorRow>,
    nodes: Vec<NodeRow>,
}

pub async fn executors(
    State(console): State<Console>,
    Extension(s): Extension<Session>,
) -> PageResult {
    let executors = crate::usecase::cluster::executors(&console.ports, &s.who, None).await?;
    let nodes = crate::usecase::cluster::nodes(&console.ports).await?;
    render(&ExecutorsPage {
        chrome: Chrome::of(&s, "executors"),
        nodes: nodes
            .into_iter()
            .map(|n| NodeRow {
                name: n.name,
                address: n.address,
                started: When::of(n.started_at),
                heartbeat: When::opt(n.heartbeat_at),
                live: n.live,
                clock_offset_ms: n.clock_offset_ms,
                clock_off: n.clock_off,
            })
            .collect(),
        executors: executors
            .into_iter()
            .filter(|e| s.who.sees(&e.app))
            .map(|e| ExecutorRow {
                app: e.app,
                address: e.address,
                capacity: e.capacity,
                running: e.running,
                registered: When::of(e.registered_at),
                heartbeat: When::of(e.last_heartbeat_at),
            })
            .collect(),
    })
}

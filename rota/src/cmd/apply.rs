//! `rota export` and `rota apply`: jobs as code (SPEC §12) over `GET /api/v1/export` and
//! `POST /api/v1/apply`. Apply checks the whole document on the node first (a dry run),
//! uploads the plugins it binds from their `path`s when the node lacks them, then applies;
//! with `--dry-run` it stops after printing the plan.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use reqwest::Method;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::client::{ApiClient, ServerFlags};

#[derive(Args)]
pub struct ExportArgs {
    #[command(flatten)]
    server: ServerFlags,
    /// Only this app (every app the token sees by default).
    #[arg(long)]
    app: Option<String>,
    /// Write the document here rather than to stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

impl ExportArgs {
    pub async fn run(self) -> anyhow::Result<()> {
        super::finish(self.run_inner().await)
    }

    async fn run_inner(self) -> anyhow::Result<()> {
        let api = ApiClient::new(&self.server)?;
        let mut url = api.url(&["export"]);
        url.query_pairs_mut()
            .append_pair("format", if self.server.json { "json" } else { "yaml" });
        if let Some(app) = &self.app {
            url.query_pairs_mut().append_pair("app", app);
        }
        let (_, text) = api.send_raw(Method::GET, url, None).await?;
        match &self.output {
            Some(path) => std::fs::write(path, &text)
                .with_context(|| format!("writing {}", path.display()))?,
            None => print!("{text}"),
        }
        Ok(())
    }
}

#[derive(Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    server: ServerFlags,
    /// The document (YAML or JSON), as `rota export` writes it; its plugins' `path`s are
    /// read relative to it.
    #[arg(long, short = 'f', value_name = "FILE")]
    file: PathBuf,
    /// Print what would change, and change nothing (not even upload a plugin).
    #[arg(long)]
    dry_run: bool,
    /// Also delete the jobs, workflows and alarm rules of the document's apps that it does
    /// not list.
    #[arg(long)]
    prune: bool,
}

impl ApplyArgs {
    pub async fn run(self) -> anyhow::Result<()> {
        super::finish(self.run_inner().await)
    }

    async fn run_inner(self) -> anyhow::Result<()> {
        let api = ApiClient::new(&self.server)?;
        let text = std::fs::read_to_string(&self.file)
            .with_context(|| format!("reading {}", self.file.display()))?;
        let doc: Value = yaml_serde::from_str(&text)
            .with_context(|| format!("{} is not YAML or JSON", self.file.display()))?;
        let base = self.file.parent().unwrap_or(Path::new("."));
        let modules = plugin_modules(&doc, base)?;
        let plan = self.post(&api, &doc, true).await?;
        if self.dry_run {
            return self.print(&plan);
        }
        for change in plan["changes"].as_array().into_iter().flatten() {
            if change["action"] != "upload" {
                continue;
            }
            let name = change["name"].as_str().unwrap_or_default();
            let Some(path) = modules.iter().find(|(n, _)| n == name).map(|(_, p)| p) else {
                anyhow::bail!(
                    "plugin `{name}` is not on the node as the document binds it, and its \
                     entry has no `path` to upload it from"
                );
            };
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let mut url = api.url(&["plugins"]);
            url.query_pairs_mut().append_pair("name", name);
            api.send_raw(Method::POST, url, Some(("application/wasm", bytes)))
                .await
                .with_context(|| format!("uploading plugin `{name}` from {}", path.display()))?;
        }
        let done = self.post(&api, &doc, false).await?;
        self.print(&done)
    }

    async fn post(&self, api: &ApiClient, doc: &Value, dry_run: bool) -> anyhow::Result<Value> {
        let mut url = api.url(&["apply"]);
        url.query_pairs_mut()
            .append_pair("dry_run", &dry_run.to_string())
            .append_pair("prune", &self.prune.to_string());
        Ok(api.send(Method::POST, url, Some(doc)).await?.value)
    }

    fn print(&self, outcome: &Value) -> anyhow::Result<()> {
        if self.server.json {
            println!("{outcome}");
            return Ok(());
        }
        let changes = outcome["changes"].as_array().cloned().unwrap_or_default();
        for c in &changes {
            let sign = match c["action"].as_str() {
                Some("create") => "+",
                Some("delete") => "-",
                Some("upload") => "^",
                _ => "~",
            };
            let fields: Vec<&str> = c["fields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let detail = if fields.is_empty() {
                String::new()
            } else {
                format!(" ({})", fields.join(", "))
            };
            println!(
                "{sign} {} {} {}{detail}",
                c["action"].as_str().unwrap_or_default(),
                c["kind"].as_str().unwrap_or_default(),
                c["name"].as_str().unwrap_or_default()
            );
        }
        let verb = if outcome["dry_run"] == true {
            "would change"
        } else {
            "changed"
        };
        println!(
            "{verb} {}, {} unchanged",
            changes.len(),
            outcome["unchanged"].as_u64().unwrap_or(0)
        );
        Ok(())
    }
}

/// The plugins whose entries name a `path`, with the path resolved against the document's
/// directory; each module must be the one its entry's sha256 names.
fn plugin_modules(doc: &Value, base: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut modules = Vec::new();
    for (i, p) in doc["plugins"].as_array().into_iter().flatten().enumerate() {
        let (Some(name), Some(path)) = (p["name"].as_str(), p["path"].as_str()) else {
            continue;
        };
        let path = base.join(path);
        let bytes = std::fs::read(&path)
            .with_context(|| format!("plugins[{i}] `{name}`: reading {}", path.display()))?;
        let sha = hex::encode(Sha256::digest(&bytes));
        if p["sha256"].as_str() != Some(sha.as_str()) {
            anyhow::bail!(
                "plugins[{i}] `{name}`: {} has sha256 {sha}, the document binds {}; put the \
                 module's sha256 in the document (`sha256sum {}`)",
                path.display(),
                p["sha256"],
                path.display()
            );
        }
        modules.push((name.to_owned(), path));
    }
    Ok(modules)
}

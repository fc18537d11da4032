//! The deployment files of `packaging/` (SPEC §12, issue 38), checked where there is no
//! cluster and no init system: every Kubernetes document parsed and held to what the image
//! and the binary really are (user, ports, probes on routes that are open, settings and
//! environment variables that exist, secrets only by reference), the config files' keys
//! against the binary's own flags, and the systemd units by `systemd-analyze`. The image
//! itself is built and run by `packaging/check-image.sh`.
//!
//! Needs `systemd-analyze` (Debian `systemd`) for the units; under `CI=true` a missing one
//! fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use rota_scheduler::api::{Guard, route_table};
use serde::Deserialize;
use yaml_serde::Value;

/// The image's user (Containerfile `USER`).
const UID: i64 = 65532;
/// Settings that carry a secret (the database URL holds its password): never in a file.
const SECRETS: [&str; 5] = [
    "database-url",
    "executor-secret",
    "api-token",
    "admin-password",
    "secrets-key",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What `rota <command> --help` offers: its long flags and its environment variables.
struct Help {
    flags: BTreeSet<String>,
    env: BTreeSet<String>,
}

fn help(command: &str) -> Help {
    let out = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args([command, "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "rota {command} --help: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let words = |prefix: &str, allowed: fn(char) -> bool| -> BTreeSet<String> {
        text.split(prefix)
            .skip(1)
            .map(|rest| rest.chars().take_while(|&c| allowed(c)).collect::<String>())
            .filter(|w| !w.is_empty())
            .collect()
    };
    let mut flags = words("--", |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
    });
    flags.remove("help");
    let env = words("[env: ", |c| c.is_ascii_uppercase() || c == '_');
    Help { flags, env }
}

/// Every YAML document of packaging/kubernetes/, with the file it came from.
fn manifests() -> Vec<(String, Value)> {
    let mut files: Vec<_> = std::fs::read_dir(repo().join("packaging/kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in yaml_serde::Deserializer::from_str(&text) {
            let value = Value::deserialize(doc).unwrap_or_else(|e| panic!("{name}: {e}"));
            for key in ["apiVersion", "kind", "metadata"] {
                assert!(value.get(key).is_some(), "{name}: a document without {key}");
            }
            docs.push((name.clone(), value));
        }
    }
    docs
}

fn find<'a>(docs: &'a [(String, Value)], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .map(|(_, d)| d)
        .find(|d| d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name} in packaging/kubernetes/"))
}

fn str_of<'a>(value: &'a Value, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {value:?}"))
}

fn items(value: &Value) -> &[Value] {
    value.as_sequence().map_or(&[], |s| s.as_slice())
}

/// The port `http://host:PORT…` names.
fn url_port(url: &str) -> i64 {
    let authority = url.split("://").nth(1).unwrap().split('/').next().unwrap();
    authority.rsplit(':').next().unwrap().parse().unwrap()
}

/// Checks a rota.toml: TOML, every table a command, every key a flag of the commands it
/// applies to, no secret. The parsed file.
fn check_config(what: &str, text: &str) -> toml::Table {
    let table: toml::Table = text.parse().unwrap_or_else(|e| panic!("{what}: {e}"));
    let commands = ["server", "executor", "standalone"];
    let helps: Vec<(&str, Help)> = commands.iter().map(|&c| (c, help(c))).collect();
    for (key, value) in &table {
        if let Some(section) = value.as_table() {
            let (_, help) = helps
                .iter()
                .find(|(c, _)| c == key)
                .unwrap_or_else(|| panic!("{what}: [{key}] is not a command"));
            for k in section.keys() {
                assert!(
                    help.flags.contains(k),
                    "{what}: [{key}] {k}: `rota {key}` has no --{k}"
                );
                assert!(
                    !SECRETS.contains(&k.as_str()),
                    "{what}: a secret in a file: {k}"
                );
            }
        } else {
            assert!(
                helps.iter().any(|(_, h)| h.flags.contains(key)),
                "{what}: {key}: no command has --{key}"
            );
            assert!(
                !SECRETS.contains(&key.as_str()),
                "{what}: a secret in a file: {key}"
            );
        }
    }
    table
}

/// `rota config check FILE`: the binary's own reading of the file, each value through its
/// flag's parser, with the secrets the environment would give.
fn config_check(what: &str, text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rota.toml");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args(["config", "check"])
        .arg(&file)
        .env("ROTA_DATABASE_URL", "mysql://rota:pw@db1:3306/rota")
        .env("ROTA_EXECUTOR_SECRET", "a-secret-of-sixteen-or-more")
        .output()
        .unwrap();
    assert!(out.status.success(), "rota config check {what}: {out:?}");
}

#[test]
fn kubernetes_manifests_match_the_image_and_the_binary() {
    let docs = manifests();
    let config_map = find(&docs, "ConfigMap", "rota-config");
    let rota_toml = str_of(&config_map["data"]["rota.toml"], "rota-config's rota.toml");
    let config = check_config("the ConfigMap's rota.toml", rota_toml);
    config_check("the ConfigMap's rota.toml", rota_toml);

    let scheduler = find(&docs, "Deployment", "rota-scheduler");
    let executor = find(&docs, "Deployment", "rota-executor-default");
    let service = find(&docs, "Service", "rota-scheduler");
    assert_eq!(scheduler["spec"]["replicas"].as_i64(), Some(3));

    // The probes' routes are open on the scheduler (its route table) and the executor
    // (its own test: `healthz_answers_without_a_signature…` in executor/tests).
    let open: BTreeSet<String> = route_table()
        .into_iter()
        .filter(|(m, _, g)| m.as_str() == "GET" && *g == Guard::Open)
        .map(|(_, p, _)| p)
        .collect();
    assert!(
        open.contains("/healthz") && open.contains("/readyz"),
        "{open:?}"
    );

    for (deployment, command, readiness) in [
        (scheduler, "server", "/readyz"),
        (executor, "executor", "/healthz"),
    ] {
        let name = str_of(&deployment["metadata"]["name"], "name");
        let pod = &deployment["spec"]["template"];
        let selector = &deployment["spec"]["selector"]["matchLabels"];
        assert_selects(selector, &pod["metadata"]["labels"], name);
        let spec = &pod["spec"];
        assert_eq!(
            spec["securityContext"]["runAsNonRoot"].as_bool(),
            Some(true),
            "{name}"
        );
        assert_eq!(
            spec["securityContext"]["runAsUser"].as_i64(),
            Some(UID),
            "{name}"
        );
        let containers = items(&spec["containers"]);
        assert!(!containers.is_empty(), "{name}: no container");
        for container in containers {
            let what = format!("{name}/{}", str_of(&container["name"], "container name"));
            check_container(&what, container, spec, command);
            check_env(&what, container, command);
            check_ports(&what, container, &config[command], readiness);
        }
    }

    // The Service: selects the scheduler pods, on their port, and is where executors go.
    let pod = &scheduler["spec"]["template"];
    assert_selects(
        &service["spec"]["selector"],
        &pod["metadata"]["labels"],
        "the Service",
    );
    let container_port = &items(&items(&pod["spec"]["containers"])[0]["ports"])[0];
    let service_port = &items(&service["spec"]["ports"])[0];
    let target = &service_port["targetPort"];
    assert!(
        target == &container_port["name"] || target == &container_port["containerPort"],
        "the Service's targetPort {target:?} is no port of the scheduler"
    );
    let service_name = str_of(&service["metadata"]["name"], "Service name");
    let port = service_port["port"].as_i64().unwrap();
    assert_eq!(
        config["executor"]["scheduler"].as_str(),
        Some(format!("http://{service_name}:{port}").as_str()),
        "the executors' scheduler is the Service"
    );
}

/// Every label of `selector` is on `labels`, with the same value.
fn assert_selects(selector: &Value, labels: &Value, what: &str) {
    for (key, value) in selector.as_mapping().unwrap() {
        assert_eq!(&labels[key], value, "{what}: selector {key:?}");
    }
}

/// The image of this version, run as `rota <command> --config …` by the image's user,
/// read-only, unprivileged, with resources, the config mounted and /tmp writable.
fn check_container(what: &str, container: &Value, spec: &Value, command: &str) {
    let version = env!("CARGO_PKG_VERSION");
    let image = str_of(&container["image"], what);
    assert!(
        image.ends_with(&format!("/rota:{version}")),
        "{what}: image {image} is not rota:{version} (the crate's version)"
    );
    let args: Vec<&str> = items(&container["args"])
        .iter()
        .map(|a| str_of(a, what))
        .collect();
    assert_eq!(args, [command, "--config", "/etc/rota/rota.toml"], "{what}");

    let security = &container["securityContext"];
    assert_eq!(
        security["readOnlyRootFilesystem"].as_bool(),
        Some(true),
        "{what}"
    );
    assert_eq!(
        security["allowPrivilegeEscalation"].as_bool(),
        Some(false),
        "{what}"
    );
    assert_eq!(security["runAsNonRoot"].as_bool(), Some(true), "{what}");
    assert_eq!(security["runAsUser"].as_i64(), Some(UID), "{what}");
    assert_eq!(
        items(&security["capabilities"]["drop"]),
        [Value::from("ALL")],
        "{what}"
    );
    let resources = &container["resources"];
    for [kind, resource] in [
        ["requests", "cpu"],
        ["requests", "memory"],
        ["limits", "memory"],
    ] {
        assert!(
            resources[kind][resource].is_string(),
            "{what}: no {kind}.{resource}"
        );
    }

    let mounts = items(&container["volumeMounts"]);
    let volume_at = |dir: &str| -> &Value {
        let mount = mounts
            .iter()
            .find(|m| m["mountPath"].as_str() == Some(dir))
            .unwrap_or_else(|| panic!("{what}: nothing mounted at {dir}"));
        items(&spec["volumes"])
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap_or_else(|| panic!("{what}: no volume for {dir}"))
    };
    let config = volume_at("/etc/rota");
    assert_eq!(
        config["configMap"]["name"].as_str(),
        Some("rota-config"),
        "{what}"
    );
    assert!(volume_at("/tmp")["emptyDir"].is_mapping(), "{what}: /tmp");
}

/// Every variable is one `rota <command>` reads (or defined for another's `$(…)`), and
/// every secret comes from a Secret.
fn check_env(what: &str, container: &Value, command: &str) {
    let help = help(command);
    let mut defined = BTreeSet::new();
    for var in items(&container["env"]) {
        let key = str_of(&var["name"], what);
        if let Some(value) = var["value"].as_str() {
            for reference in value.split("$(").skip(1) {
                let used = reference.split(')').next().unwrap();
                assert!(
                    defined.contains(used),
                    "{what}: {key} uses $({used}) before it is set"
                );
            }
        }
        defined.insert(key.to_owned());
        if key == "POD_IP" {
            continue;
        }
        assert!(
            help.env.contains(key),
            "{what}: `rota {command}` reads no {key}"
        );
        let flag = key
            .trim_start_matches("ROTA_")
            .to_lowercase()
            .replace('_', "-");
        if SECRETS.contains(&flag.as_str()) {
            assert!(
                var["valueFrom"]["secretKeyRef"]["name"].is_string(),
                "{what}: {key} is a secret: it must come from a Secret"
            );
        }
    }
}

/// One port, the one the command's `listen` and advertise URL name and the probes ask.
fn check_ports(what: &str, container: &Value, table: &toml::Value, readiness: &str) {
    let ports = items(&container["ports"]);
    assert_eq!(ports.len(), 1, "{what}: one port");
    let port = ports[0]["containerPort"].as_i64().unwrap();
    let name = ports[0]["name"].as_str().unwrap();
    assert_eq!(
        table["listen"].as_str(),
        Some(format!("0.0.0.0:{port}").as_str()),
        "{what}"
    );
    let advertise = items(&container["env"])
        .iter()
        .find(|v| v["name"] == "ROTA_ADVERTISE_URL")
        .unwrap_or_else(|| panic!("{what}: no ROTA_ADVERTISE_URL"));
    assert_eq!(
        url_port(str_of(&advertise["value"], what)),
        port,
        "{what}: advertise URL"
    );
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", readiness)] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path), "{what}: {probe}");
        assert!(
            get["port"].as_str() == Some(name) || get["port"].as_i64() == Some(port),
            "{what}: {probe} is not on the container's port"
        );
    }
}

#[test]
fn the_example_config_names_real_flags_and_matches_the_units() {
    let text = read("packaging/rota.toml");
    let config = check_config("packaging/rota.toml", &text);
    config_check("packaging/rota.toml", &text);
    // Each unit hands its TLS key over as a credential where rota.toml looks for it, and
    // the executor keeps its data in the unit's state directory.
    for (unit, command) in [("rota-server", "server"), ("rota-executor", "executor")] {
        let text = read(&format!("packaging/systemd/{unit}.service"));
        let line = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("{unit}: no {key}="))
        };
        assert_eq!(
            line("ExecStart"),
            format!("/usr/local/bin/rota {command} --config /etc/rota/rota.toml")
        );
        let credential = line("LoadCredential").split(':').next().unwrap();
        assert_eq!(
            config[command]["tls-key"].as_str(),
            Some(format!("/run/credentials/{unit}.service/{credential}").as_str()),
            "{unit}: tls-key"
        );
        if command == "executor" {
            assert_eq!(
                config[command]["data-dir"].as_str(),
                Some(format!("/var/lib/{}", line("StateDirectory")).as_str())
            );
        }
    }
}

/// `systemd-analyze verify` on each unit (a copy naming the binary just built, since
/// verify checks that ExecStart's file exists), then its hardening score.
#[test]
fn systemd_units_verify_and_are_hardened() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        rota_testkit::missing("systemd-analyze (Debian package systemd)");
        return;
    };
    assert!(version.status.success());
    let dir = tempfile::tempdir().unwrap();
    for unit in ["rota-server.service", "rota-executor.service"] {
        let text = read(&format!("packaging/systemd/{unit}"));
        assert!(text.contains("/usr/local/bin/rota "), "{unit}");
        let copy = dir.path().join(unit);
        std::fs::write(
            &copy,
            text.replace(
                "/usr/local/bin/rota ",
                &format!("{} ", env!("CARGO_BIN_EXE_rota")),
            ),
        )
        .unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&copy)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // verify exits 0 on an unknown key, but says so naming the file.
        assert!(
            out.status.success() && !stderr.contains(unit),
            "{unit}: {stderr}"
        );
        // Exposure at most 2.0 of 10 (`--threshold` is in tenths); it is 1.4 as written.
        let out = Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--threshold=20", "--no-pager"])
            .arg(&copy)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{unit}: less hardened than it was: {}",
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap_or_default()
        );
    }
}

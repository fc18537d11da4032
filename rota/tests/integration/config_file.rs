//! The config file (SPEC §12) through the built binary: a file's settings reach a running
//! node, a flag beats its environment variable which beats the file which beats the
//! default, every mistake is named with file, line and key before anything starts, and
//! docs/rota.example.toml is what the binary prints and is accepted whole.

use crate::support;

use std::process::Command;
use std::time::Duration;

use support::*;

/// What one `rota` process did.
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn rota(env: &[(&str, &str)], args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args(args)
        .env_remove("ROTA_CONFIG")
        .env_remove("ROTA_APP")
        .env_remove("ROTA_LISTEN")
        .env_remove("ROTA_CAPACITY")
        .envs(env.iter().copied())
        .output()
        .expect("running rota");
    let out = Out {
        code: out.status.code().expect("rota exited, not killed"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    assert!(
        !out.stderr.contains("panicked"),
        "rota panicked: {}",
        out.stderr
    );
    out
}

/// The line `rota config show` prints for `key`.
fn shown<'a>(out: &'a Out, key: &str) -> &'a str {
    out.stdout
        .lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no `{key}` in:\n{}", out.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_configures_a_node_and_flags_beat_the_environment_beat_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rota.toml");
    std::fs::write(
        &file,
        "capacity = 3\n[standalone]\napp = \"from-the-file\"\nlog-retention-days = 9\n\
         egress-deny = [\"10.0.0.0/8\", \"192.168.0.0/16\"]\n[server]\nfast-pool = 7\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();

    // The node started with only the file's name in its environment runs as the file says:
    // its embedded executor registers under the file's app.
    let node = Standalone::start_with_env(&dir.path().join("data"), &[("ROTA_CONFIG", path)]);
    let app = eventually(
        Duration::from_secs(30),
        "the executor to register",
        || async {
            let (status, v) = node.api.call("GET", "/api/v1/executors", None).await;
            let app = v["items"][0]["app"].as_str().map(str::to_owned);
            (status == 200).then_some(app).flatten()
        },
    )
    .await;
    assert_eq!(app, "from-the-file");
    drop(node);

    // Each source against the next: flag > environment > file > default.
    let show = |env: &[(&str, &str)], flags: &[&str]| {
        let mut args = vec!["config", "show", "standalone", "--config", path];
        args.extend_from_slice(flags);
        let out = rota(env, &args);
        assert_eq!(out.code, 0, "{}", out.stderr);
        out
    };
    let out = show(&[], &[]);
    assert_eq!(shown(&out, "app"), "app = \"from-the-file\"  # file");
    assert_eq!(shown(&out, "capacity"), "capacity = 3  # file");
    assert_eq!(
        shown(&out, "log-retention-days"),
        "log-retention-days = 9  # file"
    );
    assert_eq!(
        shown(&out, "egress-deny"),
        "egress-deny = [\"10.0.0.0/8\", \"192.168.0.0/16\"]  # file"
    );
    assert_eq!(
        shown(&out, "listen"),
        "listen = \"127.0.0.1:8080\"  # default"
    );
    let out = show(&[("ROTA_APP", "from-env"), ("ROTA_CAPACITY", "5")], &[]);
    assert_eq!(shown(&out, "app"), "app = \"from-env\"  # env ROTA_APP");
    assert_eq!(shown(&out, "capacity"), "capacity = 5  # env ROTA_CAPACITY");
    let out = show(
        &[("ROTA_APP", "from-env")],
        &["--app", "from-flag", "--capacity=6"],
    );
    assert_eq!(shown(&out, "app"), "app = \"from-flag\"  # flag");
    assert_eq!(shown(&out, "capacity"), "capacity = 6  # flag");
    // A secret is never shown, wherever it came from.
    let out = show(&[("ROTA_API_TOKEN", "a-token-nobody-sees")], &[]);
    assert_eq!(
        shown(&out, "api-token"),
        "api-token = \"<redacted>\"  # env ROTA_API_TOKEN"
    );
    assert!(!out.stdout.contains("a-token-nobody-sees"));
    // The server's table is the server's alone.
    let out = rota(
        &[("ROTA_EXECUTOR_SECRET", "0123456789abcdef0")],
        &[
            "config",
            "show",
            "server",
            "--config",
            path,
            "--database-url",
            "sqlite:x.db",
        ],
    );
    assert_eq!(shown(&out, "fast-pool"), "fast-pool = 7  # file");
    assert!(!out.stdout.contains("capacity"), "{}", out.stdout);
}

#[test]
fn every_mistake_is_named_with_its_line_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "# a node\nlisten = \"127.0.0.1:0\"\n[standalone]\ncapasity = 4\nlog-max-mib = 1\n\
         [schedular]\nx = 1\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let data = dir.path().join("data");
    let run = rota(
        &[],
        &[
            "standalone",
            "--config",
            path,
            "--data-dir",
            data.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "error: {path}:4: `capasity`: is not a setting of `rota standalone`"
        )),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with(&format!("{path}:5: `log-max-mib`: invalid value '1'")),
        "{lines:?}"
    );
    assert!(
        lines[2].starts_with(&format!("{path}:6: `schedular`: is not a command's table")),
        "{lines:?}"
    );
    assert!(!data.exists(), "nothing may start from a wrong file");

    let check = rota(&[], &["config", "check", path]);
    assert_eq!(check.code, 1);
    assert!(
        check.stderr.contains(&format!("{path}:4: `capasity`")),
        "{}",
        check.stderr
    );
    // A file that reads but leaves a required setting unset says which.
    std::fs::write(&file, "[server]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let check = rota(&[], &["config", "check", path]);
    assert_eq!(check.code, 1);
    assert!(
        check.stderr.contains("rota server:") && check.stderr.contains("--database-url"),
        "{}",
        check.stderr
    );
    let check = rota(
        &[
            ("ROTA_DATABASE_URL", "sqlite:x.db"),
            ("ROTA_EXECUTOR_SECRET", "0123456789abcdef0"),
        ],
        &["config", "check", path],
    );
    assert_eq!(check.code, 0, "{}", check.stderr);
}

#[test]
fn the_documented_example_is_what_the_binary_prints_and_is_accepted() {
    let printed = rota(&[], &["config", "example"]);
    assert_eq!(printed.code, 0);
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/rota.example.toml");
    let documented = std::fs::read_to_string(example).unwrap();
    assert!(
        documented == printed.stdout,
        "docs/rota.example.toml is not what `rota config example` prints: regenerate it with \
         `rota config example > docs/rota.example.toml`"
    );
    // Every key, the commented samples too, is accepted as each command reads it (the
    // sample provider is not asked: --offline).
    let dir = tempfile::tempdir().unwrap();
    let all = dir.path().join("all.toml");
    let uncommented: Vec<&str> = documented
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest)
                if rest.split_once(" = ").is_some_and(|(k, _)| {
                    k.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                }) =>
            {
                rest
            }
            _ => l,
        })
        .collect();
    std::fs::write(&all, uncommented.join("\n")).unwrap();
    let check = rota(
        &[],
        &["config", "check", "--offline", all.to_str().unwrap()],
    );
    assert_eq!(check.code, 0, "{}", check.stderr);
    assert!(
        check
            .stdout
            .contains("rota server, rota executor, rota standalone"),
        "{}",
        check.stdout
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite:{}", dir.path().join("rota.db").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_rota"))
        .args(["server", "--database-url", &db, "--listen", "127.0.0.1:0"])
        .args(["--log-format", "json"])
        .env("ROTA_EXECUTOR_SECRET", "0123456789abcdef0")
        .env("ROTA_LOG", "info")
        .env_remove("ROTA_CONFIG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let _node = KillOnDrop::new(child);
    let lines = std::io::BufReader::new(stderr)
        .lines()
        .map_while(Result::ok);
    let mut seen = Vec::new();
    for line in lines {
        let object: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON object ({e}): {line}"));
        assert!(
            object["timestamp"].is_string() && object["level"].is_string(),
            "{line}"
        );
        let message = object["message"].as_str().unwrap_or_default().to_owned();
        seen.push(message.clone());
        if message.contains("listening") {
            return;
        }
    }
    panic!("the node never said it listens; it logged {seen:?}");
}

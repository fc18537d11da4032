//! The config file (SPEC §2, §12): `--config FILE` or `ROTA_CONFIG` for the long-running
//! commands (`server`, `executor`, `standalone`).
//!
//! A file is TOML whose keys are the command's flags by their long names (`listen`,
//! `database-url`, `egress-allow`), at the top level (for every command that has the flag)
//! or in a table named after one command (`[server]`, for it alone; a table's key beats the
//! top level's). There is no second list of settings to keep in step with the flags: the
//! file is read against the command line's own definition, and each value is checked by
//! the flag's own parser, so a file says nothing the command line could not.
//!
//! Precedence is flag > environment > file > default. [`merge`] gives it by adding the
//! file's settings to the command line as flags, right after the subcommand, only for the
//! flags the command line and the environment leave unset: clap then applies defaults to
//! what is still missing, exactly as without a file.
//!
//! Every mistake is named with the file, the line and the key (an unknown key, a table that
//! is no command, a list for a one-value flag, a value the flag's parser refuses), all of
//! them at once, before anything starts.

use std::ffi::OsString;
use std::fmt;
use std::path::Path;

use clap::{Arg, ArgAction, Command, CommandFactory};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::cli::Cli;

/// The commands a config file configures, each a table name.
pub const PROCESSES: [&str; 3] = ["server", "executor", "standalone"];

/// Flags a file may not set: `config` (a file naming another) and clap's own.
const NOT_IN_A_FILE: [&str; 3] = ["config", "help", "version"];

/// One setting a file makes for a command: a flag and the values it stands for.
#[derive(Debug, Clone)]
pub struct Setting {
    /// The flag's long name, the file's key.
    pub key: String,
    /// The values, as the command line spells them; none for a `true` switch.
    pub values: Vec<String>,
    /// A switch set to `false`: the same as leaving it out.
    pub off: bool,
}

/// A mistake in a file: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub file: String,
    /// 1-based; 0 for the file as a whole (it could not be read).
    pub line: usize,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, &self.key) {
            (0, _) => write!(f, "{}: {}", self.file, self.message),
            (line, Some(key)) => write!(f, "{}:{line}: `{key}`: {}", self.file, self.message),
            (line, None) => write!(f, "{}:{line}: {}", self.file, self.message),
        }
    }
}

/// Errors joined one per line, for a message that names them all.
pub fn report(errors: &[FileError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The definition of `rota <name>`, with its flags.
pub fn command(name: &str) -> Command {
    let mut cli = Cli::command();
    cli.build();
    cli.find_subcommand(name)
        .cloned()
        .unwrap_or_else(|| panic!("`rota {name}` is a command"))
}

/// The flags of a command a file can set, by long name.
pub fn flags(cmd: &Command) -> impl Iterator<Item = (&str, &Arg)> {
    cmd.get_arguments().filter_map(|arg| {
        let long = arg.get_long()?;
        let settable =
            arg.get_action().takes_values() || matches!(arg.get_action(), ArgAction::SetTrue);
        (settable && !NOT_IN_A_FILE.contains(&long)).then_some((long, arg))
    })
}

/// Reads `path` and returns its settings for `rota <process>`; every mistake in the whole
/// file (for any command) is an error, so a file that one command accepts is right for all.
pub fn load(path: &Path, process: &str) -> Result<Vec<Setting>, Vec<FileError>> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![FileError {
            file: file.clone(),
            line: 0,
            key: None,
            message: format!("cannot be read: {e}"),
        }]
    })?;
    parse(&file, &text, process)
}

/// [`load`] of text already read; `file` names it in errors.
pub fn parse(file: &str, text: &str, process: &str) -> Result<Vec<Setting>, Vec<FileError>> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let error = |offset: usize, key: Option<&str>, message: String| FileError {
        file: file.to_owned(),
        line: line_of(offset),
        key: key.map(str::to_owned),
        message,
    };
    let table = DeTable::parse(text).map_err(|e| {
        vec![error(
            e.span().map_or(0, |s| s.start),
            None,
            format!("not TOML: {}", e.message().trim()),
        )]
    })?;
    let commands: Vec<Command> = PROCESSES.iter().map(|p| command(p)).collect();
    let mut errors = Vec::new();
    let mut top = Vec::new();
    let mut own = Vec::new();
    for (key, value) in table.get_ref() {
        let (name, at) = (key.get_ref().as_ref(), key.span().start);
        if let DeValue::Table(inner) = value.get_ref() {
            let Some(i) = PROCESSES.iter().position(|p| *p == name) else {
                errors.push(error(
                    at,
                    Some(name),
                    format!(
                        "is not a command's table (expected one of: {})",
                        PROCESSES.join(", ")
                    ),
                ));
                continue;
            };
            for (key, value) in inner {
                let (name, at) = (key.get_ref().as_ref(), key.span().start);
                match setting(&commands[i], name, value) {
                    Ok(s) if PROCESSES[i] == process => own.push(s),
                    Ok(_) => {}
                    Err(message) => errors.push(error(at, Some(name), message)),
                }
            }
            continue;
        }
        // A top-level key: a flag of some command, set for those that have it.
        let mut known = false;
        for (cmd, p) in commands.iter().zip(PROCESSES) {
            if flags(cmd).all(|(long, _)| long != name) {
                continue;
            }
            known = true;
            match setting(cmd, name, value) {
                Ok(s) if p == process => top.push(s),
                Ok(_) => {}
                Err(message) => {
                    errors.push(error(at, Some(name), message));
                    break;
                }
            }
        }
        if !known {
            errors.push(error(at, Some(name), unknown(name, None)));
        }
    }
    if !errors.is_empty() {
        errors.sort_by_key(|e| e.line);
        errors.dedup();
        return Err(errors);
    }
    // A table's setting beats the top level's.
    top.retain(|t| own.iter().all(|o| o.key != t.key));
    top.extend(own);
    Ok(top)
}

/// What is wrong with an unknown key, with the flag it was likely meant to be.
fn unknown(name: &str, cmd: Option<&Command>) -> String {
    let hint = if name.contains('_') {
        format!(
            " (keys are flag names, with `-`: `{}`)",
            name.replace('_', "-")
        )
    } else {
        String::new()
    };
    match cmd {
        Some(cmd) => format!(
            "is not a setting of `rota {}`{hint}; `rota {} --help` lists them",
            cmd.get_name(),
            cmd.get_name()
        ),
        None => format!(
            "is not a setting of any of `rota {}`{hint}",
            PROCESSES.join("`, `rota ")
        ),
    }
}

/// The setting `key = value` makes for `cmd`, checked by the flag's own parser.
fn setting(cmd: &Command, key: &str, value: &Spanned<DeValue>) -> Result<Setting, String> {
    let Some((long, arg)) = flags(cmd).find(|(long, _)| *long == key) else {
        return Err(unknown(key, Some(cmd)));
    };
    let switch = matches!(arg.get_action(), ArgAction::SetTrue);
    let many = matches!(arg.get_action(), ArgAction::Append);
    let scalar = |v: &DeValue| -> Result<String, String> {
        match v {
            DeValue::String(s) => Ok(s.to_string()),
            DeValue::Integer(i) if i.radix() == 10 => Ok(i.as_str().replace('_', "")),
            DeValue::Float(f) => Ok(f.as_str().replace('_', "")),
            DeValue::Boolean(b) => Ok(b.to_string()),
            other => Err(format!(
                "expected a string or a number, not {}",
                other.type_str()
            )),
        }
    };
    let (values, off) = match value.get_ref() {
        DeValue::Boolean(on) if switch => (Vec::new(), !on),
        _ if switch => return Err("expected true or false".into()),
        DeValue::Array(items) if many => (
            items
                .into_iter()
                .map(|i| scalar(i.get_ref()))
                .collect::<Result<_, _>>()?,
            false,
        ),
        DeValue::Array(_) => return Err("takes one value, not a list".into()),
        v => (vec![scalar(v)?], false),
    };
    // The flag's own parser, on a command of that flag alone (clap keeps parsers' `parse`
    // to itself; the real command would also ask for its required flags).
    let alone = Command::new("rota").arg(
        Arg::new("value")
            .long("value")
            .action(ArgAction::Append)
            .value_parser(arg.get_value_parser().clone()),
    );
    for v in &values {
        let flag = OsString::from(format!("--value={v}"));
        if let Err(e) = alone
            .clone()
            .try_get_matches_from([OsString::from("rota"), flag])
        {
            return Err(clap_message(&e).replace(" for '--value <value>'", ""));
        }
    }
    Ok(Setting {
        key: long.to_owned(),
        values,
        off,
    })
}

/// A clap error's first paragraph on one line, without its `error: ` prefix (a missing
/// flag's names are on the lines after the first).
pub fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let paragraph: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    let line = paragraph.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_owned()
}

/// The command line with the file's settings added: `argv` unchanged unless its subcommand
/// is one of [`PROCESSES`] and `--config` or `ROTA_CONFIG` names a file. The keys the file
/// set are returned with it (`rota config show` says where each value came from).
pub fn merge(argv: Vec<OsString>) -> Result<(Vec<OsString>, Vec<String>), String> {
    let Some(process) = argv
        .get(1)
        .and_then(|a| a.to_str())
        .filter(|a| PROCESSES.contains(a))
        .map(str::to_owned)
    else {
        return Ok((argv, Vec::new()));
    };
    // Flags end at `--`; what follows is not ours to read.
    let flags_given: Vec<&str> = argv[2..]
        .iter()
        .map_while(|a| a.to_str().filter(|a| *a != "--"))
        .collect();
    let from_flag = flags_given.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix("--config=").map(str::to_owned).or_else(|| {
            (*a == "--config").then(|| flags_given.get(i + 1).map(|v| v.to_string()))?
        })
    });
    let Some(path) =
        from_flag.or_else(|| std::env::var("ROTA_CONFIG").ok().filter(|p| !p.is_empty()))
    else {
        return Ok((argv, Vec::new()));
    };
    let settings = load(Path::new(&path), &process).map_err(|e| report(&e))?;
    let cmd = command(&process);
    let mut added = Vec::new();
    let mut set_keys = Vec::new();
    for s in settings {
        let given = flags_given
            .iter()
            .any(|a| *a == format!("--{}", s.key) || a.starts_with(&format!("--{}=", s.key)));
        let arg = flags(&cmd).find(|(long, _)| *long == s.key).map(|(_, a)| a);
        let in_env = arg
            .and_then(Arg::get_env)
            .and_then(std::env::var_os)
            .is_some_and(|v| !v.is_empty());
        if given || in_env || s.off {
            continue;
        }
        let switch = arg.is_some_and(|a| matches!(a.get_action(), ArgAction::SetTrue));
        if switch {
            added.push(OsString::from(format!("--{}", s.key)));
        }
        for v in &s.values {
            added.push(OsString::from(format!("--{}={v}", s.key)));
        }
        // An empty list sets nothing: the flag's default (or none) stays.
        if switch || !s.values.is_empty() {
            set_keys.push(s.key);
        }
    }
    let mut merged = argv;
    merged.splice(2..2, added);
    Ok((merged, set_keys))
}

/// The example file: every key of every command, each with its meaning, its environment
/// variable and its default (`docs/rota.example.toml` is this, and a test keeps it so).
/// A key with a default is set to it; one without is commented out, with a sample value.
pub fn example() -> String {
    let mut out = String::from(
        "# Rota's config file: every key of `rota server`, `rota executor` and `rota standalone`,\n\
         # with its meaning, its environment variable and its default. Generated by\n\
         # `rota config example`; pass a file with --config FILE or ROTA_CONFIG=FILE.\n\
         #\n\
         # Keys are the flags' long names. A key at the top level applies to every command that\n\
         # has it; one in a command's table to that command alone. A flag given beats its\n\
         # environment variable, which beats this file, which beats the default.\n\
         # Keep secrets (passwords, tokens, the executor secret) in the environment, not here.\n",
    );
    for process in PROCESSES {
        let cmd = command(process);
        out.push_str(&format!("\n[{process}]\n"));
        for (long, arg) in flags(&cmd) {
            out.push('\n');
            let help = arg
                .get_long_help()
                .or_else(|| arg.get_help())
                .map(ToString::to_string)
                .unwrap_or_default();
            for line in help.lines().flat_map(|l| wrap(l, 88)) {
                out.push_str(format!("# {line}").trim_end());
                out.push('\n');
            }
            if let Some(env) = arg.get_env() {
                out.push_str(&format!("# env: {}\n", env.to_string_lossy()));
            }
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|d| d.to_string_lossy().into_owned())
                .collect();
            let many = matches!(arg.get_action(), ArgAction::Append);
            match (defaults.as_slice(), many) {
                // A switch: off unless set (clap's default for it is the text "false").
                _ if matches!(arg.get_action(), ArgAction::SetTrue) => {
                    out.push_str(&format!("{long} = false\n"))
                }
                ([], true) if ["scheduler", "sso-map"].contains(&long) => {
                    out.push_str(&format!("# {long} = {}\n", sample(long)))
                }
                ([], true) => out.push_str(&format!("{long} = []\n")),
                ([], false) => out.push_str(&format!("# {long} = {}\n", sample(long))),
                (values, true) => out.push_str(&format!(
                    "{long} = [{}]\n",
                    values
                        .iter()
                        .map(|v| toml_value(v))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                ([value, ..], false) => out.push_str(&format!("{long} = {}\n", toml_value(value))),
            }
        }
    }
    out
}

/// A line of words folded at `width` characters.
fn wrap(line: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in line.split(' ') {
        let current = lines.last_mut().expect("one line at least");
        if !current.is_empty() && current.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_owned());
        } else {
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(word);
        }
    }
    lines
}

/// A value written as TOML: a number as one, anything else as a string.
pub fn toml_value(v: &str) -> String {
    // Only as written canonically: `0600` or 64 hex zeros are strings to TOML.
    let number = v.parse::<i64>().is_ok_and(|n| n.to_string() == v)
        || v.parse::<f64>()
            .is_ok_and(|n| n.to_string() == v && v.contains('.'));
    if number {
        v.to_owned()
    } else {
        serde_json::to_string(v).expect("a string serializes")
    }
}

/// A sample value for a key without a default, as TOML: what a production file would hold.
fn sample(long: &str) -> String {
    let v = match long {
        "database-url" => "mysql://rota:PASSWORD@db1:3306,db2:3306,db3:3306/rota",
        "node-name" => "scheduler-1",
        "advertise-url" => "https://scheduler-1.example.com:8080",
        "tls-cert" => "/etc/rota/tls/node.crt",
        "tls-key" => "/etc/rota/tls/node.key",
        "tls-ca" => "/etc/rota/tls/ca.crt",
        "smtp-url" => "smtp://rota:PASSWORD@mail.example.com:587?tls=required",
        "secrets-key" => "0000000000000000000000000000000000000000000000000000000000000000",
        "app" => "billing",
        "scheduler" => return "[\"https://scheduler-1.example.com:8080\"]".into(),
        "ldap-url" => "ldaps://ldap.corp.example:636",
        "ldap-user-base" => "ou=people,dc=corp,dc=example",
        "ldap-group-base" => "ou=groups,dc=corp,dc=example",
        "oidc-issuer" => "https://id.corp.example/realms/main",
        "oidc-client-id" => "rota",
        "oidc-redirect-url" => "https://rota.corp.example/login/oidc/callback",
        "sso-map" => return "[\"ops=operator:orders,billing\", \"platform=admin\"]".into(),
        "async-threads" => "2",
        _ if long.contains("secret") || long.contains("token") || long.contains("password") => {
            "from-the-environment-instead"
        }
        _ => "…",
    };
    toml_value(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<String> {
        parse("rota.toml", text, "server")
            .map(|_| Vec::new())
            .unwrap_or_else(|e| e.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn keys_are_flags_by_command() {
        let text = "listen = \"127.0.0.1:9000\"\ncapacity = 4\n[server]\nfast-pool = 8\n\
                    egress-allow = [\"127.0.0.1:1\", \"10.0.0.0/8\"]\n[executor]\napp = \"x\"\n";
        let server = parse("f", text, "server").unwrap();
        let keys: Vec<_> = server.iter().map(|s| s.key.as_str()).collect();
        // `capacity` is the executor's and standalone's, not the server's.
        assert_eq!(keys, ["listen", "fast-pool", "egress-allow"]);
        assert_eq!(server[2].values, ["127.0.0.1:1", "10.0.0.0/8"]);
        let executor = parse("f", text, "executor").unwrap();
        let keys: Vec<_> = executor.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["listen", "capacity", "app"]);
    }

    #[test]
    fn a_table_beats_the_top_level() {
        let text = "listen = \"127.0.0.1:1\"\n[server]\nlisten = \"127.0.0.1:2\"\n";
        let server = parse("f", text, "server").unwrap();
        assert_eq!(server.len(), 1);
        assert_eq!(server[0].values, ["127.0.0.1:2"]);
    }

    #[test]
    fn mistakes_are_named_with_file_line_and_key() {
        let text = "listen = \"127.0.0.1:1\"\n\n[server]\nfast_pool = 8\nlisten = \"nowhere\"\n\
                    [schedulr]\nx = 1\n[executor]\nscheduler = 2026-12-06\negress-allow = \"a\"\n\
                    capacity = [1, 2]\n";
        let e = errors(text);
        assert!(e[0].starts_with("rota.toml:4: `fast_pool`: is not a setting of `rota server` (keys are flag names, with `-`: `fast-pool`)"), "{e:?}");
        assert!(
            e[1].starts_with("rota.toml:5: `listen`: invalid value 'nowhere'"),
            "{e:?}"
        );
        assert!(
            e[2].starts_with("rota.toml:6: `schedulr`: is not a command's table"),
            "{e:?}"
        );
        assert_eq!(
            e[3],
            "rota.toml:9: `scheduler`: expected a string or a number, not datetime"
        );
        assert_eq!(
            e[4],
            "rota.toml:11: `capacity`: takes one value, not a list"
        );
        assert_eq!(e.len(), 5, "{e:?}");
        assert!(errors("nonsense = 1").contains(&"rota.toml:1: `nonsense`: is not a setting of any of `rota server`, `rota executor`, `rota standalone`".to_owned()));
        assert_eq!(
            errors("config = \"other.toml\"")[0],
            "rota.toml:1: `config`: is not a setting of any of `rota server`, `rota executor`, `rota standalone`"
        );
        assert!(errors("listen = ")[0].starts_with("rota.toml:1: not TOML:"));
    }

    #[test]
    fn the_example_is_accepted_with_every_sample_uncommented() {
        let example = example();
        parse("example", &example, "server").unwrap();
        let all: String = example
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if looks_like_key(rest) => rest,
                _ => l,
            })
            .collect::<Vec<_>>()
            .join("\n");
        for p in PROCESSES {
            let settings = parse("example", &all, p).unwrap();
            assert_eq!(settings.len(), flags(&command(p)).count(), "{p}");
        }
    }

    fn looks_like_key(line: &str) -> bool {
        line.split_once(" = ").is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
    }
}

//! `rota config …`: config files without starting anything (`crate::config_file`).
//! `check` finds every mistake in a file, `show` prints what a command would run with and
//! where each value came from, `example` prints every key with its meaning and default.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, Subcommand};

use crate::cli::Cli;
use crate::config_file::{self, PROCESSES};

#[derive(Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check a file: every unknown key, wrong type or refused value, each with its line;
    /// then, for each command with a table in the file (or the one --for names), whether
    /// the file and the environment together give it every required setting. Exit 1 on any
    /// mistake.
    Check {
        file: PathBuf,
        /// Check the file as `rota <COMMAND>` would read it alone.
        #[arg(long = "for", value_name = "COMMAND", value_parser = PROCESSES)]
        process: Option<String>,
        /// Do not ask the services the file names whether they answer (the OpenID
        /// provider's discovery document and keys are read otherwise).
        #[arg(long)]
        offline: bool,
    },
    /// Print the settings `rota <COMMAND> [FLAGS…]` would run with (flags, environment,
    /// --config or ROTA_CONFIG, defaults), each with where it came from. Secrets and the
    /// passwords in URLs are shown as `<redacted>`.
    Show {
        #[arg(value_parser = PROCESSES)]
        process: String,
        /// The command's flags, as they would be given to it.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        flags: Vec<OsString>,
    },
    /// Print an example file: every key of every command, with its meaning, environment
    /// variable and default (docs/rota.example.toml).
    Example,
}

impl ConfigArgs {
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            ConfigCommand::Check {
                file,
                process,
                offline,
            } => check(&file, process.as_deref(), offline),
            ConfigCommand::Show { process, flags } => show(&process, flags),
            ConfigCommand::Example => {
                print!("{}", config_file::example());
                Ok(())
            }
        }
    }
}

fn check(file: &std::path::Path, only: Option<&str>, offline: bool) -> anyhow::Result<()> {
    if let Err(errors) = config_file::load(file, only.unwrap_or("server")) {
        fail(&config_file::report(&errors));
    }
    let text = std::fs::read_to_string(file)?;
    let has_table = |p: &str| text.lines().any(|l| l.trim() == format!("[{p}]"));
    let processes: Vec<&str> = match only {
        Some(p) => vec![p],
        None => PROCESSES.into_iter().filter(|p| has_table(p)).collect(),
    };
    let mut missing = Vec::new();
    for process in &processes {
        let argv = [
            OsString::from("rota"),
            (*process).into(),
            "--config".into(),
            file.into(),
        ];
        let (merged, _) = config_file::merge(argv.to_vec()).map_err(anyhow::Error::msg)?;
        match Cli::command().try_get_matches_from(merged) {
            Err(e) => missing.push(format!("rota {process}: {}", config_file::clap_message(&e))),
            Ok(matches) => {
                let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches)?;
                let mut mistakes = cli.whole_setting_mistakes();
                if mistakes.is_empty() && !offline {
                    mistakes = cli.unanswered_services();
                }
                for mistake in mistakes {
                    missing.push(format!("rota {process}: {mistake}"));
                }
            }
        }
    }
    if !missing.is_empty() {
        fail(&missing.join("\n"));
    }
    let checked = if processes.is_empty() {
        "its keys".to_owned()
    } else {
        format!("rota {}", processes.join(", rota "))
    };
    println!("{}: ok ({checked})", file.display());
    Ok(())
}

fn show(process: &str, flags: Vec<OsString>) -> anyhow::Result<()> {
    let mut argv = vec![OsString::from("rota"), process.into()];
    argv.extend(flags);
    let (merged, from_file) = config_file::merge(argv).map_err(anyhow::Error::msg)?;
    let matches = Cli::command()
        .try_get_matches_from(merged)
        .unwrap_or_else(|e| fail(&config_file::clap_message(&e)));
    let matches = matches
        .subcommand_matches(process)
        .expect("the subcommand parsed");
    let cmd = config_file::command(process);
    println!("[{process}]");
    for (long, arg) in config_file::flags(&cmd) {
        let id = arg.get_id().as_str();
        let Some(raw) = matches.get_raw(id) else {
            println!("# {long}: not set");
            continue;
        };
        let secret = arg.is_hide_env_values_set();
        let values: Vec<String> = raw
            .map(|v| redact(&v.to_string_lossy(), secret))
            .map(|v| config_file::toml_value(&v))
            .collect();
        let value = if matches!(arg.get_action(), clap::ArgAction::Append) {
            format!("[{}]", values.join(", "))
        } else {
            values.join(", ")
        };
        let source = match matches.value_source(id) {
            Some(ValueSource::EnvVariable) => arg
                .get_env()
                .map(|e| format!("env {}", e.to_string_lossy()))
                .unwrap_or_default(),
            Some(ValueSource::CommandLine) if from_file.iter().any(|k| k == long) => {
                "file".to_owned()
            }
            Some(ValueSource::CommandLine) => "flag".to_owned(),
            _ => "default".to_owned(),
        };
        println!("{long} = {value}  # {source}");
    }
    Ok(())
}

/// A secret's value hidden, and the password of a URL's `user:password@` (read by hand:
/// a Galera URL's `db1:3306,db2:3306` is no host a URL parser takes).
fn redact(value: &str, secret: bool) -> String {
    let Some((scheme, rest)) = value.split_once("://") else {
        return if secret {
            "<redacted>".into()
        } else {
            value.to_owned()
        };
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:<redacted>{}", &rest[at..])
        }
        None => value.to_owned(),
    }
}

/// Prints the message and exits 1, as every command reports an error.
fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn redacts_secrets_and_passwords_in_urls() {
        use super::redact;
        assert_eq!(redact("s3cret-value-here", true), "<redacted>");
        assert_eq!(redact("127.0.0.1:8080", false), "127.0.0.1:8080");
        assert_eq!(
            redact("mysql://rota:pw@db1:3306,db2:3306/rota", false),
            "mysql://rota:<redacted>@db1:3306,db2:3306/rota"
        );
        assert_eq!(redact("sqlite:/var/lib/rota.db", true), "<redacted>");
        assert_eq!(
            redact("http://127.0.0.1:8080/a@b", false),
            "http://127.0.0.1:8080/a@b"
        );
    }
}

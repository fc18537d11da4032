//! `rota`: one binary for every Rota process. `main` only reads the command line (with its
//! config file), starts tracing and hands over to the libraries (`rota-scheduler`, `rota-executor`).

mod cli;
mod cmd;
mod config_file;
mod nodes;

use clap::Parser;

/// mimalloc rather than glibc's allocator: on the fire path (JSON, HTTP, SQL rows, WASI
/// contexts) glibc's malloc and free took about 15 % of both the scheduler's and the
/// executor's CPU under sustained load (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    // A config file's settings join the command line as flags (`config_file`).
    let argv = match config_file::merge(std::env::args_os().collect()) {
        Ok((argv, _)) => argv,
        Err(errors) => {
            eprintln!("error: {errors}");
            std::process::exit(2);
        }
    };
    let cli = cli::Cli::parse_from(argv);
    let filter = tracing_subscriber::EnvFilter::try_from_env("ROTA_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "info,sqlx=warn,wasmtime=warn,cranelift=warn,tower_http=info",
        )
    });
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format() {
        cli::LogFormat::Json => logs.json().flatten_event(true).init(),
        cli::LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(cli.run())
}

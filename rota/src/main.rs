//! `rota`: one binary for every Rota process. `main` only parses the command line, starts
//! tracing and hands over to the libraries (`rota-scheduler`, `rota-executor`).

mod cli;
mod cmd;
mod nodes;

use clap::Parser;

/// mimalloc rather than glibc's allocator: on the fire path (JSON, HTTP, SQL rows, WASI
/// contexts) glibc's malloc and free took about 15 % of both the scheduler's and the
/// executor's CPU under sustained load (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ROTA_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(
                    "info,sqlx=warn,wasmtime=warn,cranelift=warn,tower_http=info",
                )
            }),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(cli.run())
}

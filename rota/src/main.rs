//! `rota`: one binary for every Rota process. `main` only reads the command line (with its
//! config file), starts tracing and hands over to the libraries (`rota-scheduler`, `rota-executor`).

mod cli;
mod cmd;
mod config_file;
mod nodes;
mod telemetry;

use clap::Parser;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

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
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = cli.async_threads() {
        runtime.worker_threads(threads);
    }
    let runtime = runtime.enable_all().build()?;
    // Traces leave from the runtime (a batch exporter task), so they are set up in it.
    let traces = match cli.service_name() {
        Some(service) if telemetry::wanted() => {
            let _in_runtime = runtime.enter();
            Some(telemetry::provider(service)?)
        }
        _ => None,
    };
    telemetry::set_enabled(traces.is_some());
    // ROTA_LOG filters what is logged, not what is traced: a node logging only warnings
    // still sends its request and task spans (`telemetry::FILTER`).
    let filter = tracing_subscriber::EnvFilter::try_from_env("ROTA_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "info,sqlx=warn,wasmtime=warn,cranelift=warn,tower_http=info,opentelemetry=warn",
        )
    });
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match cli.log_format() {
        cli::LogFormat::Json => logs.json().flatten_event(true).with_filter(filter).boxed(),
        cli::LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed(),
    };
    let otel = traces
        .as_ref()
        .map(|p| telemetry::layer(p).with_filter(telemetry::filter()));
    tracing_subscriber::registry().with(logs).with(otel).init();
    let result = runtime.block_on(cli.run());
    // The last batch of spans goes out before the process does.
    if let Some(provider) = traces {
        let _ = provider.shutdown();
    }
    result
}

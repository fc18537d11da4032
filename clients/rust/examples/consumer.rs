//! A consumer of a pull job: `cargo run -p rota-client --example consumer -- JOB`, with
//! `ROTA_SERVER` (default http://127.0.0.1:8080) and `ROTA_API_TOKEN`. Prints each task's
//! payload and acks it; stops on Ctrl-C.

use rota_client::{Client, Pull};

#[tokio::main]
async fn main() -> Result<(), rota_client::Error> {
    let job = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "close-order-q".into());
    let server = std::env::var("ROTA_SERVER").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let token = std::env::var("ROTA_API_TOKEN").unwrap_or_default();
    let rota = Client::new(&server, token)?;
    let acked = rota
        .consume(
            &job,
            Pull::default().max(10).lease_ms(60_000).consumer("example"),
            |task| async move {
                println!(
                    "task {} attempt {}: {}",
                    task.task,
                    task.attempt,
                    task.payload.as_deref().unwrap_or("")
                );
                Ok(())
            },
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await?;
    println!("acked {acked} task(s)");
    Ok(())
}

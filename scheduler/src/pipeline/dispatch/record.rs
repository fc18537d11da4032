//! The batched record of what was sent, after the send: the fire path has no database
//! write.

use super::*;

/// Writes what was sent, in batches, after the fact; then the ring forgets those tasks.
pub(crate) async fn record_loop(dispatcher: Arc<Dispatcher>, mut rx: mpsc::Receiver<Dispatched>) {
    let mut buf: Vec<Dispatched> = Vec::with_capacity(RECORD_BATCH);
    let mut shutdown = dispatcher.cluster.shutdown.clone();
    loop {
        let got = if *shutdown.borrow() {
            // Stopping: drain what in-flight dispatches still send, then end.
            match tokio::time::timeout(
                Duration::from_millis(50),
                rx.recv_many(&mut buf, RECORD_BATCH),
            )
            .await
            {
                Ok(n) => n,
                Err(_) if dispatcher.in_flight.load(Ordering::SeqCst) == 0 => return,
                Err(_) => continue,
            }
        } else {
            tokio::select! {
                n = rx.recv_many(&mut buf, RECORD_BATCH) => n,
                r = shutdown.changed() => {
                    if r.is_err() {
                        return;
                    }
                    continue;
                }
            }
        };
        if got == 0 {
            return;
        }
        // Linger briefly to fill the batch: fewer, larger statements.
        let deadline = tokio::time::Instant::now() + RECORD_LINGER;
        while buf.len() < RECORD_BATCH {
            let room = RECORD_BATCH - buf.len();
            match tokio::time::timeout_at(deadline, rx.recv_many(&mut buf, room)).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let mut retrying = Retrying::new(dispatcher.cluster.shutdown.clone());
        loop {
            // Under the lease held now: what was sent under an epoch this node lost is not
            // recorded (the taker recorded what had arrived).
            match dispatcher
                .cluster
                .store
                .record_dispatches(
                    dispatcher.cluster.lease.get(),
                    &buf,
                    dispatcher.cluster.clock.now_ms(),
                )
                .await
            {
                Ok(elsewhere) => {
                    if elsewhere > 0 {
                        tracing::warn!(
                            dropped = elsewhere,
                            "dispatches of claims taken over by another node were not recorded"
                        );
                    }
                    break;
                }
                Err(crate::store::Error::Fenced) => {
                    tracing::warn!(
                        dropped = buf.len(),
                        "this node was taken over: its unrecorded dispatches are the taker's to record"
                    );
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, rows = buf.len(), "recording dispatches failed; retrying");
                    if !retrying.pause().await {
                        tracing::warn!(
                            rows = buf.len(),
                            "stopping: dispatches left unrecorded, for the next start's recovery"
                        );
                        break;
                    }
                }
            }
        }
        dispatcher
            .ring
            .fired(buf.iter().map(|d| (d.task_id, d.attempt)));
        buf.clear();
    }
}

//! What pull delivery asks of the node (SPEC §8): the ready board its long polls wait on,
//! run ids for leased attempts, ending attempts like completion does, and the loop that
//! tells the other nodes which pull jobs have tasks ready here.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::Ports;
use crate::model::Millis;
use crate::pipeline::complete;
use crate::pipeline::ready::ReadyBoard;
use crate::store::{self, LeaseEnding, LeasesEnded, NodeRef};
use rota_proto::wire::PeerReady;

/// How long a node waits for another to take a ready notice (it is a wake-up: a pull that
/// misses it still looks again when its wait ends).
const READY_NOTICE_TIMEOUT: Duration = Duration::from_millis(500);

/// How long the list of the other nodes is reused by the notice loop.
const PEERS_TTL: Duration = Duration::from_secs(1);

impl Ports {
    /// Where this node's long polls wait for a pull job's tasks to become ready.
    pub(crate) fn ready_board(&self) -> &ReadyBoard {
        &self.ready
    }

    /// Tasks of these pull jobs became ready on another node.
    pub fn ready_elsewhere(&self, notice: &PeerReady) {
        if notice.tasks.len() == notice.job_ids.len() {
            let ready: Vec<(i64, u64)> = notice
                .job_ids
                .iter()
                .copied()
                .zip(notice.tasks.iter().copied())
                .collect();
            self.ready.wake(&ready);
        } else {
            self.ready.wake_all(notice.job_ids.iter().copied());
        }
    }

    /// `n` fresh run ids, for the attempts a pull leases.
    pub(crate) async fn take_run_ids(&self, n: usize) -> store::Result<Vec<i64>> {
        self.completion.run_ids.take(&self.cluster.store, n).await
    }

    /// Ends the attempts acks and nacks hold, each only while its lease is the task's live
    /// one (of `job_id`'s tasks, when given); `job_ids` are the tasks' jobs (for the alarm
    /// rules), and a retry of a task in `retry_after` is due that long from now.
    pub(crate) async fn end_leases(
        &self,
        job_id: Option<i64>,
        job_ids: &[i64],
        endings: &[LeaseEnding],
        retry_after: &HashMap<i64, Millis>,
    ) -> anyhow::Result<LeasesEnded> {
        complete::end_leases(&self.completion, job_id, job_ids, endings, retry_after).await
    }

    /// Scan now: something became due inside the window (a re-driven or moved task).
    pub(crate) fn wake_scan(&self) {
        self.scan_wake.now();
    }

    /// Resolves once the node is shutting down (a long poll ends early, empty).
    pub(crate) async fn stopping(&self) {
        let mut shutdown = self.cluster.shutdown.clone();
        let _ = shutdown.wait_for(|s| *s).await;
    }
}

/// Sends the pull jobs that had tasks become ready here to every other live node, one
/// request per node for whatever gathered since the last send, until shutdown.
pub(crate) async fn announce_loop(node: Ports) {
    let mut shutdown = node.cluster.shutdown.clone();
    // The other nodes, read again at most once a second: an announcement must not wait
    // for the database (a node that joined meanwhile is told from the next read on; its
    // pulls look again when their wait ends anyway).
    let mut peers: Vec<NodeRef> = Vec::new();
    let mut read_at: Option<Instant> = None;
    loop {
        let ready = tokio::select! {
            ready = node.ready.next_announcements() => ready,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        if read_at.is_none_or(|at| at.elapsed() >= PEERS_TTL) {
            let alive_after = node.cluster.clock.now_ms() - node.cluster.config.node_dead_after_ms;
            match node.cluster.store.live_nodes(alive_after).await {
                Ok(live) => {
                    let me = node.cluster.lease.get().node_id;
                    peers = live.into_iter().filter(|p| p.id != me).collect();
                    read_at = Some(Instant::now());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "listing the other nodes to announce ready tasks failed")
                }
            }
        }
        let (job_ids, tasks) = ready.into_iter().unzip();
        let notice = &PeerReady { job_ids, tasks };
        let client = &node.client;
        let calls = peers.iter().map(|NodeRef { address, .. }| async move {
                let call = client.node_ready(address, notice);
                match tokio::time::timeout(READY_NOTICE_TIMEOUT, call).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(node = %address, error = %e, "a node was not told of ready tasks; its pulls look again when their wait ends")
                    }
                    Err(_) => {
                        tracing::debug!(node = %address, "a node did not take a ready notice in time")
                    }
                }
            });
        futures_util::future::join_all(calls).await;
    }
}

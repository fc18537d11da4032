//! The cluster as the node and executor lists show it: scheduler nodes live or gone and how
//! far each one's clock is off the database's (SPEC §4 "Clocks"), and the live executors
//! of the apps the caller sees.

use super::Result;
use crate::access::Principal;
use crate::model::{Executor, Millis, now_ms};
use crate::node::Node;

/// One scheduler node's state.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeState {
    pub name: String,
    pub address: String,
    pub started_at: Millis,
    /// Its last heartbeat; `None` once it stopped or was taken over.
    pub heartbeat_at: Option<Millis>,
    /// It heartbeat within the dead-after time.
    pub live: bool,
    /// Its clock's offset from the database's (database minus node), as last measured.
    pub clock_offset_ms: Millis,
    /// The offset is beyond the cluster's `max_clock_offset_ms`.
    pub clock_off: bool,
}

/// Every scheduler node that ever ran on this database, by name.
pub async fn nodes(node: &Node) -> Result<Vec<NodeState>> {
    let config = node.config();
    let alive_after = now_ms() - config.node_dead_after_ms;
    let rows = node.store().nodes().await?;
    Ok(rows
        .into_iter()
        .map(|n| NodeState {
            live: n.heartbeat_at > alive_after,
            heartbeat_at: (n.heartbeat_at > 0).then_some(n.heartbeat_at),
            clock_off: n.clock_offset_ms.abs() > config.max_clock_offset_ms,
            clock_offset_ms: n.clock_offset_ms,
            name: n.name,
            address: n.address,
            started_at: n.started_at,
        })
        .collect())
}

/// The executors that heartbeat within the dead-after time, of `app` (or every app) that
/// `who` sees, by app then address.
pub async fn executors(node: &Node, who: &Principal, app: Option<&str>) -> Result<Vec<Executor>> {
    let alive_after = now_ms() - node.config().executor_dead_after_ms;
    let executors = node.store().list_executors(app, alive_after).await?;
    Ok(executors.into_iter().filter(|e| who.sees(&e.app)).collect())
}

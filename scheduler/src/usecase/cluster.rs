//! The scheduler nodes of the cluster as the node list shows them: live or gone, and how
//! far each one's clock is off the database's (SPEC §4 "Clocks").

use super::Result;
use crate::model::{Millis, now_ms};
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

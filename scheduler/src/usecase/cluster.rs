//! The cluster as the node and executor lists show it: scheduler nodes live or gone and how
//! far each one's clock is off the database's (SPEC §4 "Clocks"), and the live executors
//! of the apps the caller sees.

use super::Result;
use crate::access::Principal;
use crate::model::{Executor, Millis};
use crate::ports::Ports;
use crate::store::{Counts, RunStat};

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
pub async fn nodes(ports: &Ports) -> Result<Vec<NodeState>> {
    let config = ports.config();
    let alive_after = ports.clock().now_ms() - config.node_dead_after_ms;
    let rows = ports.store().nodes().await?;
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
pub async fn executors(ports: &Ports, who: &Principal, app: Option<&str>) -> Result<Vec<Executor>> {
    let alive_after = ports.clock().now_ms() - ports.config().executor_dead_after_ms;
    let executors = ports.store().list_executors(app, alive_after).await?;
    Ok(executors.into_iter().filter(|e| who.sees(&e.app)).collect())
}

/// What the dashboard shows `who`: today's counts (since `midnight`) of the apps they see,
/// the live executors they see, and the runs per minute over the last hour and per day
/// over the last week (`None` for a user scoped to some apps: the charts count every app).
pub struct Dashboard {
    pub counts: Counts,
    pub executors: usize,
    pub per_minute: Option<Vec<RunStat>>,
    pub per_day: Option<Vec<RunStat>>,
}

/// The dashboard: counts since `midnight`; the two charts from `minutes_since` and
/// `days_since`.
pub async fn dashboard(
    ports: &Ports,
    who: &Principal,
    midnight: Millis,
    minutes_since: Millis,
    days_since: Millis,
) -> Result<Dashboard> {
    const MINUTE: Millis = 60_000;
    const DAY: Millis = 86_400_000;
    let store = ports.store();
    let scope = who.app_filter();
    let counts = store.console_counts(midnight, scope).await?;
    let executors = executors(ports, who, None).await?.len();
    let (per_minute, per_day) = if scope.is_none() {
        (
            Some(store.run_stats(minutes_since, MINUTE).await?),
            Some(store.run_stats(days_since, DAY).await?),
        )
    } else {
        (None, None)
    };
    Ok(Dashboard {
        counts,
        executors,
        per_minute,
        per_day,
    })
}

/// Whether the database answers (`/healthz`).
pub async fn database_answers(ports: &Ports) -> Result<()> {
    Ok(ports.store().ping().await?)
}

//! A pull job's fires handed straight to the long polls waiting on this node (SPEC §8).
//!
//! When a fire of an enabled pull job falls due here and pulls of the job wait on this
//! node's ready board, dispatch leases the fire to them itself, in one transaction
//! (claimed → `running` with the lease and its run), and hands each pull its leases: the
//! pickup costs one commit instead of the `ready` update and then the pull's own
//! transaction, and no look at the queue. The pulls are served first come first, each
//! up to its `max`, in pull order (higher priority first, then earlier due). The fires no
//! waiting pull takes go on to `ready` ([`super::settle`]); a lease whose pull left before
//! it got it goes back to `ready` unspent.

use std::collections::BTreeMap;

use super::*;
use crate::pipeline::ready::Taker;
use crate::store::{Handover, Leased, lease_token};

/// Leases `fires` (of enabled pull jobs) to the pulls waiting for them on this node and
/// hands them over; returns the fires no pull took, which go on to `ready`.
pub(super) async fn hand_over(
    dispatcher: &Dispatcher,
    fires: Vec<DueTask>,
    now: Millis,
) -> Vec<DueTask> {
    let mut by_job: BTreeMap<i64, Vec<DueTask>> = BTreeMap::new();
    for fire in fires {
        by_job.entry(fire.job_id).or_default().push(fire);
    }
    let mut rest = Vec::new();
    let mut shares: Vec<(Taker, Vec<DueTask>)> = Vec::new();
    for (job_id, mut fires) in by_job {
        let takers = dispatcher.ready.takers(job_id, fires.len());
        if takers.is_empty() {
            rest.extend(fires);
            continue;
        }
        fires.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.due_at.cmp(&b.due_at))
                .then(a.task_id.cmp(&b.task_id))
        });
        let mut fires = fires.into_iter();
        for taker in takers {
            let share: Vec<DueTask> = fires.by_ref().take(taker.want.max).collect();
            shares.push((taker, share));
        }
        rest.extend(fires);
    }
    if shares.is_empty() {
        return rest;
    }
    let store = &dispatcher.cluster.store;
    let count = shares.iter().map(|(_, s)| s.len()).sum();
    // On any failure below the takers are dropped unhanded (their pulls look again) and
    // the fires go on to `ready`, which holds them in the wheel if it fails too.
    let run_ids = match dispatcher.run_ids.take(store, count).await {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!(error = %e, "reserving run ids to hand fires to waiting pulls failed; they become ready instead");
            rest.extend(shares.into_iter().flat_map(|(_, s)| s));
            return rest;
        }
    };
    let mut run_ids = run_ids.into_iter();
    let handovers: Vec<Handover> = shares
        .iter()
        .map(|(taker, share)| Handover {
            consumer: taker.want.consumer.clone(),
            leases: share
                .iter()
                .zip(run_ids.by_ref())
                .map(|(fire, run_id)| lease_of(fire, run_id, now + taker.want.lease_ms))
                .collect(),
        })
        .collect();
    let leased = match store
        .lease_claimed(dispatcher.cluster.lease.get(), &handovers, now)
        .await
    {
        Ok(leased) => leased,
        Err(e) => {
            tracing::warn!(error = %e, "leasing fires to waiting pulls failed; they become ready instead");
            rest.extend(shares.into_iter().flat_map(|(_, s)| s));
            return rest;
        }
    };
    // Every fire is out of the wheel now: leased, or no longer this node's to fire.
    dispatcher.ring.fired(
        shares
            .iter()
            .flat_map(|(_, s)| s.iter().map(|t| (t.task_id, t.attempt))),
    );
    let mut unhanded: Vec<Leased> = Vec::new();
    let mut handed = 0;
    for ((taker, _), Handover { leases, .. }) in shares.into_iter().zip(leased) {
        if leases.is_empty() {
            // Dropped unhanded: the pull looks again.
            continue;
        }
        handed += leases.len();
        if let Err(back) = taker.hand(leases) {
            unhanded.extend(back);
        }
    }
    metrics::counter!("rota_pulled_total").increment(handed as u64);
    metrics::counter!("rota_fires_handed_total").increment(handed as u64);
    if !unhanded.is_empty() {
        release(dispatcher, unhanded, now).await;
    }
    rest
}

/// Leases whose pull left before it got them go back to `ready`, unspent, and the pulls
/// still waiting hear of them like any ready task. If that fails, the leases expire and
/// the attempts are retried as lost ones.
async fn release(dispatcher: &Dispatcher, leases: Vec<Leased>, now: Millis) {
    match dispatcher.cluster.store.release_leases(&leases, now).await {
        Ok(_) => {
            let mut jobs: BTreeMap<i64, u64> = BTreeMap::new();
            for l in &leases {
                *jobs.entry(l.job_id).or_default() += 1;
            }
            let jobs: Vec<(i64, u64)> = jobs.into_iter().collect();
            dispatcher.ready.announce(&jobs);
        }
        Err(e) => {
            tracing::warn!(error = %e, tasks = leases.len(), "giving back leases no pull took failed; they are retried when they expire");
        }
    }
}

/// The lease of `fire` for a waiting pull, before the database has it.
fn lease_of(fire: &DueTask, run_id: i64, expires: Millis) -> Leased {
    Leased {
        task_id: fire.task_id,
        job_id: fire.job_id,
        attempt: fire.attempt,
        run_id,
        lease: lease_token(run_id),
        payload: fire.payload.clone(),
        key: fire.key.clone(),
        priority: fire.priority,
        due_at: fire.due_at,
        lease_expires_at: expires,
        traceparent: fire.traceparent.clone(),
    }
}

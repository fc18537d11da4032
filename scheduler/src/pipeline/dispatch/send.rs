//! The trigger requests to one executor, sized to the room it says it has, and asking an
//! executor what it took when a request went unanswered past this node's lease.

use super::*;

/// Sends one round's triggers for one executor: requests of at most [`MAX_PER_REQUEST`]
/// one after another, each sized to the room the executor said it had left, until it is
/// full, a request fails, or the round has taken [`ROUND_MAX_MS`]. A burst larger than
/// the executor's queue so costs one refused request, not a refused copy of the whole
/// burst every round; what is not sent goes back to the caller, for the next candidate
/// or the wheel. Run ids are taken per request, so triggers held back use up none.
pub(super) async fn send_to(
    dispatcher: &Dispatcher,
    app: &str,
    address: &str,
    mut rest: Vec<Pending>,
    not_after: Millis,
) -> Sent {
    let started = Instant::now();
    let mut answered = Vec::new();
    let mut room = dispatcher.rooms.first_request(address);
    let why = loop {
        if rest.is_empty() {
            break Unsent::Full;
        }
        let tail = rest.split_off(room.clamp(1, MAX_PER_REQUEST).min(rest.len()));
        let mut group = std::mem::replace(&mut rest, tail);
        let unnumbered = group.iter().filter(|p| p.run_id.is_none()).count();
        if unnumbered > 0 {
            match dispatcher
                .run_ids
                .take(&dispatcher.cluster.store, unnumbered)
                .await
            {
                Ok(ids) => {
                    let slots = group.iter_mut().filter(|p| p.run_id.is_none());
                    for (p, id) in slots.zip(ids) {
                        p.run_id = Some(id);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reserving run ids failed; retrying shortly");
                    group.append(&mut rest);
                    rest = group;
                    break Unsent::NoIds(e.to_string());
                }
            }
        }
        let sent_at = dispatcher.cluster.clock.now_ms();
        let batch = TriggerBatch {
            triggers: group
                .iter()
                .filter_map(|p| to_trigger(p, sent_at))
                .collect(),
            not_after: Some(not_after),
        };
        let sending = Instant::now();
        let result = match dispatcher.executors.protocol(app, address) {
            ExecutorProtocol::Rota => dispatcher.client.trigger(app, address, &batch).await,
            ExecutorProtocol::Xxl => xxl::trigger(dispatcher, app, address, &group, &batch).await,
        };
        let elapsed = sending.elapsed();
        metrics::histogram!("rota_dispatch_seconds").record(elapsed.as_secs_f64());
        dispatcher
            .slow
            .record(group.iter().map(|p| p.task.job_id), elapsed);
        let answered_at = dispatcher.cluster.clock.now_ms();
        let stop = match &result {
            Ok(ack) => {
                let full = ack.acks.iter().any(|a| a.outcome == TriggerOutcome::Full);
                // An executor that does not say its room is sent full requests.
                room = match ack.room {
                    Some(r) => r as usize,
                    None if full => 0,
                    None => MAX_PER_REQUEST,
                };
                dispatcher.rooms.note(address, room, answered_at);
                (room == 0 || full).then_some(Unsent::Full)
            }
            Err(e) => {
                if e.not_delivered() {
                    dispatcher.executors.mark_unreachable(address, answered_at);
                }
                Some(Unsent::Failed(
                    format!("not sent after the request before it failed: {e}"),
                    e.not_delivered(),
                ))
            }
        };
        answered.push(Answered {
            group,
            result,
            sent_at,
            answered_at,
        });
        if let Some(why) = stop {
            break why;
        }
        if started.elapsed() >= Duration::from_millis(ROUND_MAX_MS as u64) {
            break Unsent::Full;
        }
    };
    Sent {
        answered,
        unsent: rest,
        why,
    }
}

/// After an unanswered send whose `not_after` has passed: which of the triggers the
/// executor took (recorded as dispatched, under the run id it has) and which it did not
/// (held like any fire without a lease). If it does not answer this either, all count as
/// delivered, as for any unanswered send (its heartbeat sorts out the rest).
pub(super) async fn resolve_unanswered(
    dispatcher: &Dispatcher,
    app: &str,
    address: &str,
    group: Vec<Pending>,
) -> (Vec<Dispatched>, Vec<Pending>) {
    let now = dispatcher.cluster.clock.now_ms();
    if dispatcher.executors.protocol(app, address) == ExecutorProtocol::Xxl {
        // XXL-JOB executors cannot be asked (nor do they refuse late triggers): delivered.
        let taken = group.iter().filter_map(|p| dispatched(p, address, now));
        return (taken.collect(), Vec::new());
    }
    let req = RunsKnownRequest {
        runs: group
            .iter()
            .map(|p| TaskAttempt {
                task_id: p.task.task_id,
                attempt: p.task.attempt,
            })
            .collect(),
    };
    let known = match dispatcher.client.runs_known(app, address, &req).await {
        Ok(ack) => ack.known,
        Err(e) => {
            tracing::warn!(error = %e, "the executor did not answer which triggers it took; treating them as delivered");
            return (
                group
                    .iter()
                    .filter_map(|p| dispatched(p, address, now))
                    .collect(),
                Vec::new(),
            );
        }
    };
    let mut taken = Vec::new();
    let mut not_taken = Vec::new();
    for p in group {
        match known.iter().find(|k| {
            k.task_id == p.task.task_id
                && k.attempt == p.task.attempt
                && k.shard_index == p.shard_index
        }) {
            Some(k) => {
                // Under the run id the executor has: the one this node sent, or an
                // earlier node's.
                let numbered = Pending {
                    run_id: Some(k.run_id),
                    ..p
                };
                taken.extend(dispatched(&numbered, address, now));
            }
            None => not_taken.push(p),
        }
    }
    (taken, not_taken)
}

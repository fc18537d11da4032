//! One dispatch of a pool batch: plan each task's triggers, send them in rounds to their
//! candidates (one request per executor a round), classify the answers.

use super::*;

/// One shard of a trigger: its index, the total, and the executors it may go to in order.
pub(super) struct Shard {
    pub(super) index: i32,
    pub(super) total: i32,
    pub(super) candidates: Vec<String>,
}

/// One trigger on its way: the task, its run, and where it may still go.
pub(super) struct Pending {
    pub(super) task: DueTask,
    pub(super) job: Arc<JobEntry>,
    /// Numbered when first sent, so triggers held back in the wheel use up no ids; kept
    /// through failover, since an executor that answered `full` or was not reached did not
    /// take it.
    pub(super) run_id: Option<i64>,
    pub(super) shard_index: i32,
    pub(super) shard_total: i32,
    pub(super) candidates: Vec<String>,
    pub(super) next: usize,
    pub(super) failover: bool,
    pub(super) last_error: Option<String>,
    pub(super) all_full: bool,
    /// Executors that surely did not get it (no connection, or a 503)…
    pub(super) unreachable: usize,
    /// …out of this many live executors of the app: when it is all of them, the app has
    /// no executor to run it for now, and it waits (SPEC §4, "No executor yet").
    pub(super) live: usize,
    /// Its dispatch's span ([`dispatch_span`]), open until the trigger is settled.
    pub(super) span: tracing::Span,
    /// How soon its executor should report its end, when something waits on it
    /// ([`report_within`]).
    pub(super) report_within: Option<u32>,
}

/// A trigger that ends at the scheduler: its run is recorded `failed` with the reason.
pub(super) struct Failed {
    pub(super) task: DueTask,
    /// `None` if it was never sent: numbered when recorded.
    pub(super) run_id: Option<i64>,
    pub(super) shard_index: i32,
    pub(super) shard_total: i32,
    pub(super) executor: Option<String>,
    pub(super) at: Millis,
    pub(super) reason: String,
}

impl Failed {
    pub(super) fn of(p: Pending, executor: Option<&str>, at: Millis, reason: String) -> Self {
        Failed {
            task: p.task,
            run_id: p.run_id,
            shard_index: p.shard_index,
            shard_total: p.shard_total,
            executor: executor.map(str::to_owned),
            at,
            reason,
        }
    }
}

/// One request to an executor: its triggers, the answer, when it was sent (the runs'
/// `dispatched_at`) and when the answer came.
pub(super) struct Answered {
    pub(super) group: Vec<Pending>,
    pub(super) result: Result<TriggerBatchAck, ClientError>,
    pub(super) sent_at: Millis,
    pub(super) answered_at: Millis,
}

/// What became of one round's triggers for one executor.
pub(super) struct Sent {
    /// Each request sent.
    pub(super) answered: Vec<Answered>,
    /// Triggers not sent, and why.
    pub(super) unsent: Vec<Pending>,
    pub(super) why: Unsent,
}

pub(super) enum Unsent {
    /// The executor has no room left (it said so, or it took all this round's time).
    Full,
    /// The previous request failed (surely undelivered: the flag); the rest would have too.
    Failed(String, bool),
    /// No run ids could be reserved (the database is unreachable).
    NoIds(String),
}

/// Dispatches one tick's tasks of one pool: plan each task's triggers, send them in rounds
/// (each round sends every remaining trigger to its next candidate, one request per
/// executor), classify the answers, then hand on what became of each.
#[tracing::instrument(skip_all, fields(tasks = batch.len()))]
pub(super) async fn dispatch_tasks(dispatcher: &Dispatcher, batch: Vec<DueTask>) {
    let mut dispatch = Dispatch::new(dispatcher.cluster.clock.now_ms());
    for task in batch {
        dispatch.plan(dispatcher, task).await;
    }
    while !dispatch.pending.is_empty() && dispatch.round(dispatcher).await {}
    dispatch.finish(dispatcher).await;
}

/// One pool batch on its way out: the triggers still to send, and what became of the rest.
pub(super) struct Dispatch {
    /// When the batch left the pool.
    pub(super) now: Millis,
    /// Triggers for their next candidate.
    pub(super) pending: Vec<Pending>,
    /// Triggers an executor took: recorded.
    pub(super) sent: Vec<Dispatched>,
    /// Tasks every candidate was too full for: back to the wheel for a moment.
    pub(super) deferred: Vec<DueTask>,
    /// Triggers that end here as failed runs.
    pub(super) failed: Vec<Failed>,
    /// Fires that will not go out and need no run (see `settle_unsent`).
    pub(super) unsent: Unsendable,
    /// Fires of `http` jobs, POSTed by this node.
    pub(super) webhooks: Vec<webhook::Webhook>,
}

impl Dispatch {
    fn new(now: Millis) -> Self {
        Dispatch {
            now,
            pending: Vec::new(),
            sent: Vec::new(),
            deferred: Vec::new(),
            failed: Vec::new(),
            unsent: Unsendable::default(),
            webhooks: Vec::new(),
        }
    }

    /// Resolves a task's job and executors and queues its triggers (one per shard) with
    /// their candidates in route order.
    async fn plan(&mut self, dispatcher: &Dispatcher, task: DueTask) {
        let job = match dispatcher
            .jobs
            .get(&dispatcher.cluster.store, task.job_id)
            .await
        {
            Ok(Some(job)) => job,
            Ok(None) => return self.unsent.orphans.push(task),
            Err(e) => {
                tracing::warn!(error = %e, "loading a job for dispatch failed; retrying shortly");
                dispatcher.ring.defer(vec![task], self.now + JOB_RETRY_MS);
                return;
            }
        };
        if task.kind == TaskKind::Cron && task.generation != job.job.generation {
            // Planned under a schedule the job no longer has: its row is gone.
            return self.unsent.void.push(task);
        }
        let spec = &job.job.spec;
        let speaking = match spec.delivery {
            Delivery::Wasm => ExecutorProtocol::Rota,
            Delivery::Xxl { .. } => ExecutorProtocol::Xxl,
            // Handed to a pull waiting on this node, else `ready` for any consumer; a busy
            // job's fires gather first, to go together.
            Delivery::Pull if spec.enabled => {
                let waits = dispatcher.ready.is_waited_on(task.job_id);
                return match dispatcher.pull_gather.hold(&task, self.now, waits) {
                    Some(at) => dispatcher.ring.hold(task, at),
                    None => self.unsent.to_pull.push(task),
                };
            }
            // A disabled pull job hands out nothing: its fires wait `ready`.
            Delivery::Pull => return self.unsent.ready.push(task),
            // A disabled http job's fires wait `ready` (out of every wheel) until it is
            // enabled again (SPEC §8): nothing is POSTed meanwhile.
            Delivery::Http { .. } if !spec.enabled => return self.unsent.ready.push(task),
            Delivery::Http { .. } => {
                return self.webhooks.push(webhook::Webhook { task, job });
            }
        };
        if speaking == ExecutorProtocol::Rota && job.plugin.is_none() {
            let reason = format!("plugin `{}` does not exist", spec.plugin);
            return self.failed.push(Failed {
                task,
                run_id: None,
                shard_index: 0,
                shard_total: 1,
                executor: None,
                at: self.now,
                reason,
            });
        }
        let mut executors = dispatcher.executors.of_app(&spec.app);
        executors.retain(|e| e.protocol == speaking);
        if executors.is_empty() {
            return self.unsent.no_executor.push(task);
        }
        let live = executors.len();
        let addresses: Vec<String> = executors.into_iter().map(|e| e.address).collect();
        let shards = if spec.route == Route::ShardingBroadcast {
            let total = addresses.len() as i32;
            addresses
                .iter()
                .enumerate()
                .map(|(i, address)| Shard {
                    index: i as i32,
                    total,
                    candidates: vec![address.clone()],
                })
                .collect()
        } else {
            let order = dispatcher.router.order(spec.route, task.job_id, &addresses);
            let mut candidates: Vec<String> = order.iter().map(|&i| addresses[i].clone()).collect();
            if spec.route == Route::Busyover {
                candidates = idle_first(dispatcher, &spec.app, task.job_id, candidates).await;
            }
            vec![Shard {
                index: 0,
                total: 1,
                candidates,
            }]
        };
        let failover = spec.route.allows_failover();
        let traces = dispatcher.cluster.config.traces;
        let report_within = report_within(&task, spec, &dispatcher.jobs);
        for shard in shards {
            self.pending.push(Pending {
                task: task.clone(),
                job: job.clone(),
                run_id: None,
                shard_index: shard.index,
                shard_total: shard.total,
                candidates: shard.candidates,
                next: 0,
                failover,
                last_error: None,
                all_full: true,
                unreachable: 0,
                live,
                span: dispatch_span(traces, &task, &spec.name, shard.index),
                report_within,
            });
        }
    }

    /// Sends every pending trigger to its next candidate and sorts the answers; `false`
    /// when no further round can help (nothing left, or the lease is gone).
    async fn round(&mut self, dispatcher: &Dispatcher) -> bool {
        // The lease is checked again right before sending, not only when the ring fired:
        // a batch that waited in a pool past it (a starved or paused node) may belong to
        // another node by now. Send nothing; the wheel holds it, and drops it if this node
        // turns out to be fenced (docs/cluster.md).
        let round_at = dispatcher.cluster.clock.now_ms();
        // The lease as this round saw it travels with the triggers: an executor refuses
        // them past it (`expired`), so a stall between this check and the send (the
        // process paused, the request slow to go out) cannot deliver them after another
        // node took them over.
        let lease_until = dispatcher.cluster.fire_lease.until();
        // Read after the lease (a rejoin renews the epoch first, then the lease): under a
        // lease of the new epoch, the old epoch's fires are always seen as stale here.
        self.pending = drop_stale(dispatcher, std::mem::take(&mut self.pending), |p| &p.task);
        if self.pending.is_empty() {
            return false;
        }
        // What the executor checks: the lease plus a quarter of dead-after, so a busy
        // executor has time to admit what was sent near the lease's end, while every
        // admission still precedes by a quarter of dead-after the earliest moment a taker
        // could ask it (`docs/cluster.md`, argument 4).
        let not_after = lease_until + dispatcher.cluster.config.node_dead_after_ms / 4;
        if round_at > lease_until {
            hold_for_lease(dispatcher, self.pending.drain(..), round_at);
            return false;
        }
        let by_executor = self.by_executor(dispatcher, round_at);
        if by_executor.is_empty() {
            return false;
        }
        let requests = by_executor
            .into_iter()
            .map(|((app, address), group)| async move {
                let out = send_to(dispatcher, &app, &address, group, not_after).await;
                (app, address, out)
            });
        let mut expired: Vec<Pending> = Vec::new();
        for (app, address, out) in join_all(requests).await {
            for answered in out.answered {
                self.classify(
                    dispatcher,
                    &app,
                    &address,
                    answered,
                    not_after,
                    &mut expired,
                )
                .await;
            }
            self.not_sent(dispatcher, &address, out.unsent, out.why);
        }
        if !expired.is_empty() {
            tracing::warn!(
                triggers = expired.len(),
                "executors refused triggers sent after this node's lease had lapsed; holding them"
            );
            // The rest of this dispatch waits too: the lease is gone for all of it.
            hold_for_lease(
                dispatcher,
                expired.into_iter().chain(self.pending.drain(..)),
                dispatcher.cluster.clock.now_ms(),
            );
            return false;
        }
        true
    }

    /// This round's requests: the pending triggers by (app, executor), oldest first within
    /// each. Executors still marked full count as having said so again, without a request;
    /// triggers out of candidates end here.
    fn by_executor(
        &mut self,
        dispatcher: &Dispatcher,
        round_at: Millis,
    ) -> HashMap<(String, String), Vec<Pending>> {
        let mut held = std::mem::take(&mut self.pending);
        let mut ready = Vec::with_capacity(held.len());
        while let Some(mut p) = held.pop() {
            match p.candidates.get(p.next) {
                Some(address) if dispatcher.rooms.is_full(address, round_at) => {
                    p.last_error = Some(format!("executor {address} is at capacity"));
                    p.next += 1;
                    held.push(p);
                }
                _ => ready.push(p),
            }
        }
        // Oldest first within each executor's requests: the pops above reversed them.
        ready.reverse();
        // Keyed by app too: the app decides the key a request is signed with.
        let mut by_executor: HashMap<(String, String), Vec<Pending>> = HashMap::new();
        for p in ready {
            match p.candidates.get(p.next).cloned() {
                Some(address) => {
                    let key = (p.job.job.spec.app.clone(), address);
                    by_executor.entry(key).or_default().push(p);
                }
                None => self.exhausted(p),
            }
        }
        by_executor
    }

    /// A trigger every candidate turned down: deferred if they were all full, waiting if
    /// none could be reached, failed otherwise.
    fn exhausted(&mut self, p: Pending) {
        if p.all_full && p.last_error.is_some() && p.shard_total == 1 {
            self.deferred.push(p.task);
        } else if p.shard_total == 1 && p.unreachable >= p.live {
            let limit = p.job.job.spec.no_executor_timeout_ms();
            match unreachable_wait(p, self.now, limit) {
                Wait::Again(task) => self.unsent.unreachable.push(task),
                Wait::Over(f) => self.failed.push(f),
            }
        } else {
            let reason = p
                .last_error
                .clone()
                .unwrap_or_else(|| "no executor could take it".into());
            self.failed.push(Failed::of(p, None, self.now, reason));
        }
    }

    /// What one request's answer means for each of its triggers.
    async fn classify(
        &mut self,
        dispatcher: &Dispatcher,
        app: &str,
        address: &str,
        answered: Answered,
        not_after: Millis,
        expired: &mut Vec<Pending>,
    ) {
        let Answered {
            group,
            result,
            sent_at,
            answered_at,
        } = answered;
        match result {
            Ok(ack) if ack.acks.len() == group.len() => {
                for (p, a) in group.into_iter().zip(ack.acks) {
                    self.acked(p, a.outcome, address, sent_at, expired);
                }
            }
            Ok(ack) => {
                let reason = format!(
                    "executor {address} answered {} acks for {} triggers",
                    ack.acks.len(),
                    group.len()
                );
                requeue(&mut self.pending, group, reason, false);
            }
            Err(e) if e.not_delivered() => {
                tracing::warn!(error = %e, "dispatch failed");
                requeue(&mut self.pending, group, e.to_string(), true);
            }
            Err(e) if answered_at > not_after => {
                // No answer, and the lease ran out meanwhile (this node stalled, or the
                // request took that long): past `not_after` the executor takes none of them
                // any more, so what it has now is final. Ask it.
                tracing::warn!(error = %e, triggers = group.len(), "dispatch unanswered past this node's lease; asking the executor what it took");
                let (taken, not_taken) = resolve_unanswered(dispatcher, app, address, group).await;
                self.sent.extend(taken);
                expired.extend(not_taken);
            }
            Err(e) => {
                // Connected, but no answer: the executor may have the triggers. Sending
                // them elsewhere could run an attempt twice, so they count as dispatched to
                // it; if they never arrived, its next heartbeat (which lists the runs it
                // has) marks them lost and they are retried.
                tracing::warn!(error = %e, triggers = group.len(), "dispatch unanswered; treating it as delivered");
                self.sent
                    .extend(group.iter().filter_map(|p| dispatched(p, address, sent_at)));
            }
        }
    }

    /// One trigger's answer from the executor it was sent to.
    fn acked(
        &mut self,
        mut p: Pending,
        outcome: TriggerOutcome,
        address: &str,
        sent_at: Millis,
        expired: &mut Vec<Pending>,
    ) {
        match outcome {
            TriggerOutcome::Accepted | TriggerOutcome::Duplicate => {
                self.sent.extend(dispatched(&p, address, sent_at));
            }
            TriggerOutcome::Full => {
                p.last_error = Some(format!("executor {address} is at capacity"));
                p.next += 1;
                self.pending.push(p);
            }
            TriggerOutcome::Busy => {
                p.all_full = false;
                p.last_error = Some(format!(
                    "executor {address} is still running this job (block strategy discard_later)"
                ));
                p.next = if p.job.job.spec.route == Route::Busyover {
                    p.next + 1
                } else {
                    usize::MAX
                };
                self.pending.push(p);
            }
            TriggerOutcome::Expired => expired.push(p),
            TriggerOutcome::Rejected { reason } => {
                self.failed
                    .push(Failed::of(p, Some(address), sent_at, reason));
            }
        }
    }

    /// Triggers of one executor that this round did not send, and why.
    fn not_sent(
        &mut self,
        dispatcher: &Dispatcher,
        address: &str,
        unsent: Vec<Pending>,
        why: Unsent,
    ) {
        match why {
            Unsent::Full => {
                for mut p in unsent {
                    p.last_error = Some(format!("executor {address} is at capacity"));
                    p.next += 1;
                    self.pending.push(p);
                }
            }
            Unsent::Failed(reason, unreachable) => {
                requeue(&mut self.pending, unsent, reason, unreachable)
            }
            Unsent::NoIds(reason) => {
                for p in unsent {
                    if p.shard_total == 1 {
                        self.deferred.push(p.task);
                    } else {
                        // Other shards of the task may be out: fail this one alone.
                        let reason = format!("no run id could be reserved: {reason}");
                        let at = dispatcher.cluster.clock.now_ms();
                        self.failed.push(Failed::of(p, None, at, reason));
                    }
                }
            }
        }
    }

    /// Hands on what became of the batch: sends to the recorder, full ones back to the
    /// wheel, the rest settled or completed as failed.
    async fn finish(self, dispatcher: &Dispatcher) {
        let got_out = !self.sent.is_empty();
        if got_out {
            metrics::counter!("rota_dispatched_total").increment(self.sent.len() as u64);
            for d in self.sent {
                // The recorder is bounded; waiting here is back-pressure on the pool.
                if dispatcher.recorder.send(d).await.is_err() {
                    break;
                }
            }
        }
        if !self.deferred.is_empty() {
            metrics::counter!("rota_deferred_total").increment(self.deferred.len() as u64);
            let hold = if got_out {
                FULL_HOLD_MS
            } else {
                FULL_IDLE_HOLD_MS
            };
            dispatcher
                .ring
                .defer(self.deferred, dispatcher.cluster.clock.now_ms() + hold);
        }
        settle_unsent(dispatcher, self.unsent).await;
        complete_failures(dispatcher, self.failed).await;
        deliver(dispatcher, self.webhooks).await;
    }
}

/// Drops fires held under an epoch of this node's lease that has ended: the node was taken
/// over since, and they are the taker's (`docs/cluster.md`).
pub(super) fn drop_stale<T>(
    dispatcher: &Dispatcher,
    items: Vec<T>,
    task: impl Fn(&T) -> &DueTask,
) -> Vec<T> {
    let epoch = dispatcher.cluster.lease.get().epoch;
    let before = items.len();
    let kept: Vec<T> = items
        .into_iter()
        .filter(|i| task(i).epoch == epoch)
        .collect();
    if kept.len() < before {
        let dropped = before - kept.len();
        metrics::counter!("rota_fires_dropped_stale_total").increment(dropped as u64);
        tracing::info!(dropped, "dropped fires of a lease epoch this node lost");
    }
    kept
}

/// Gives fires back to the wheel, unsent, while this node's lease is unconfirmed: they go
/// out when a heartbeat renews it, or are dropped with the wheel if the node was fenced.
pub(super) fn hold_for_lease(
    dispatcher: &Dispatcher,
    pending: impl Iterator<Item = Pending>,
    now: Millis,
) {
    let mut held: HashMap<i64, DueTask> = HashMap::new();
    for p in pending {
        held.entry(p.task.task_id).or_insert(p.task);
    }
    metrics::counter!("rota_fires_held_total").increment(held.len() as u64);
    dispatcher
        .ring
        .defer(held.into_values().collect(), now + LEASE_RETRY_MS);
}

/// Busyover (XXL-JOB's semantics): ask the executors in order whether they run this job now
/// (`/idle-beat`) and put the first idle one first; executors that do not answer go last.
pub(super) async fn idle_first(
    dispatcher: &Dispatcher,
    app: &str,
    job_id: i64,
    candidates: Vec<String>,
) -> Vec<String> {
    let mut busy = Vec::new();
    let mut silent = Vec::new();
    for (i, address) in candidates.iter().enumerate() {
        let idle = match dispatcher.executors.protocol(app, address) {
            ExecutorProtocol::Rota => dispatcher
                .client
                .idle_beat(app, address, job_id)
                .await
                .map(|ack| ack.idle),
            ExecutorProtocol::Xxl => super::xxl::idle(dispatcher, app, address, job_id).await,
        };
        match idle {
            Ok(true) => {
                let mut ordered = vec![address.clone()];
                ordered.extend(busy);
                ordered.extend(candidates[i + 1..].iter().cloned());
                ordered.extend(silent);
                return ordered;
            }
            Ok(_) => busy.push(address.clone()),
            Err(_) => silent.push(address.clone()),
        }
    }
    busy.extend(silent);
    busy
}

/// Triggers whose request surely did not arrive go to their next candidate if the strategy
/// allows it; the others fail with the reason.
pub(super) fn requeue(
    pending: &mut Vec<Pending>,
    group: Vec<Pending>,
    reason: String,
    unreachable: bool,
) {
    for mut p in group {
        p.all_full = false;
        p.unreachable += usize::from(unreachable);
        p.last_error = Some(reason.clone());
        p.next = if p.failover { p.next + 1 } else { usize::MAX };
        pending.push(p);
    }
}

/// The span of one fire's dispatch when the node exports traces (`Config::traces`): a
/// child of the span that created its task, so a retry is another dispatch in the same
/// trace; a schedule's fire (nothing created it) starts a trace here. The executor's run
/// and a webhook's service continue from it.
pub(super) fn dispatch_span(traces: bool, task: &DueTask, job: &str, shard: i32) -> tracing::Span {
    if !traces {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        parent: None,
        "dispatch",
        otel.name = %format!("dispatch {job}"),
        otel.kind = "producer",
        rota.job = %job,
        rota.task.id = task.task_id,
        rota.attempt = task.attempt,
        rota.shard = shard,
    );
    rota_net::trace::continue_from(&span, task.traceparent.as_deref());
    span
}

/// The trigger of a numbered pending run (`None` before it has a run id).
pub(super) fn to_trigger(p: &Pending, sent_at: Millis) -> Option<Trigger> {
    let run_id = p.run_id?;
    let spec = &p.job.job.spec;
    let params = p.task.params.clone().or_else(|| spec.params.clone());
    // A job's block strategy orders its fires; a delayed task or a workflow step (a map's
    // elements) runs beside the others, bounded by the job's concurrency only.
    let exclusive = !matches!(p.task.kind, TaskKind::Delayed | TaskKind::Step);
    let input = p.task.input(spec.params.as_deref());
    let plugin = p.job.plugin.as_ref();
    Some(Trigger {
        run_id,
        job_id: p.job.job.id,
        job_name: spec.name.clone(),
        task_id: p.task.task_id,
        attempt: p.task.attempt,
        scheduled_at: p.task.due_at,
        dispatched_at: Some(sent_at),
        plugin: PluginRef {
            name: plugin.map(|p| p.name.clone()).unwrap_or_default(),
            sha256: plugin.map(|p| p.sha256.clone()).unwrap_or_default(),
        },
        input,
        params,
        shard_index: p.shard_index,
        shard_total: p.shard_total,
        timeout_ms: spec.timeout_ms,
        memory_mb: u32::try_from(spec.memory_mb).unwrap_or(64),
        block: spec.block,
        exclusive,
        http_allow: spec.http_allow.clone(),
        traceparent: rota_net::trace::traceparent(&p.span),
        report_within_ms: p.report_within,
    })
}

/// How soon after a run that something waits on ends its executor's report batch closes, ms: the
/// part of a workflow's step-to-step time (SPEC §7: the next step starts p99 ≤ 20 ms after
/// the report) spent on the executor. A batch collects the reports ending in this time, so
/// at 1,000 step ends/s one report batch (one transaction) still carries about ten; the runs
/// of a bounded job whose tasks wait for a slot ask for [`SLOT_REPORT_MS`]; other runs'
/// reports wait the executor's own window (100 ms by default) and share larger ones.
pub(super) const AWAITED_REPORT_MS: u32 = 10;

/// How soon after a run of a bounded job ends, while tasks of the job wait for a slot (or a
/// bucket of it is at its bound), its executor's report batch closes, ms. The next task's scan waits for the gap after the
/// scan before it anyway ([`crate::pipeline::ScanWake`], 50 ms), so a report within 30 ms
/// hands the slot on as soon as 10 ms would, and a busy executor's batches stay three
/// times larger (SPEC §11: the next task starts within 100 ms of a slot freeing).
pub(super) const SLOT_REPORT_MS: u32 = 30;

/// How soon `task`'s end should be reported, when something waits on it: a workflow
/// step's next steps and a job's children ([`AWAITED_REPORT_MS`]); tasks of its job
/// waiting `throttled` for the slot its run holds, or a bucket at its bound, as this
/// node's last scan of the job found ([`JobCache::set_slot_waits`], [`SLOT_REPORT_MS`]). The runs of a bounded job
/// whose limits do not bind keep the executor's window: smaller batches would cost the
/// database more report transactions for nobody.
fn report_within(task: &DueTask, spec: &JobSpec, jobs: &JobCache) -> Option<u32> {
    if task.kind == TaskKind::Step || !spec.child_jobs.is_empty() {
        Some(AWAITED_REPORT_MS)
    } else if spec.max_concurrency.is_some() && jobs.slot_waited(task.job_id) {
        Some(SLOT_REPORT_MS)
    } else {
        None
    }
}

/// The record of a sent trigger (`None` for one never numbered, hence never sent).
pub(super) fn dispatched(p: &Pending, address: &str, at: Millis) -> Option<Dispatched> {
    Some(Dispatched {
        run_id: p.run_id?,
        job_id: p.task.job_id,
        task_id: p.task.task_id,
        attempt: p.task.attempt,
        shard_index: p.shard_index,
        shard_total: p.shard_total,
        executor: address.to_owned(),
        scheduled_at: p.task.due_at,
        dispatched_at: at,
    })
}

//! What the node keeps in memory for the fire path: jobs with their plugins (re-read in
//! the background when stale), the live executors by app, and run ids reserved a block ahead.

use super::*;

/// What a job needs at dispatch time: the job and the newest version of its plugin.
#[derive(Debug)]
pub struct JobEntry {
    pub job: Job,
    pub plugin: Option<Plugin>,
}

/// A cache entry: when it was read, and the job (`None`: it does not exist).
type CachedJob = (Instant, Option<Arc<JobEntry>>);

/// Jobs by id, re-read at most every few seconds (other nodes may change them) and at once
/// when this node changes one. A stale entry is served while it is re-read in the background,
/// so the fire path waits for the database only for a job it has never seen.
pub(crate) struct JobCache {
    map: Arc<Mutex<HashMap<i64, CachedJob>>>,
    refreshing: Arc<Mutex<std::collections::HashSet<i64>>>,
    /// Job ids by name, with when they were read (a name is re-read after `ttl`).
    names: Mutex<HashMap<String, (Instant, i64)>>,
    /// Jobs with a concurrency bound whose tasks wait for a slot, as this node's last scan
    /// of each found them ([`JobCache::set_slot_waits`]).
    slot_waits: Mutex<std::collections::HashSet<i64>>,
    ttl: Duration,
}

impl JobCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        JobCache {
            map: Arc::new(Mutex::new(HashMap::new())),
            refreshing: Arc::new(Mutex::new(std::collections::HashSet::new())),
            names: Mutex::new(HashMap::new()),
            slot_waits: Mutex::new(std::collections::HashSet::new()),
            ttl,
        }
    }

    /// What a scan found of each job with a concurrency bound it decided for: whether its
    /// tasks wait `throttled` for a slot (or a bucket of it is at its bound). The ends of
    /// such a job's runs are awaited (their executor reports them within `SLOT_REPORT_MS`,
    /// not its report window), so a slot that frees is seen, and taken by the next task, in
    /// tens of ms (SPEC §11: 100 ms); the runs of a job whose limits do not bind keep the
    /// cheaper, larger report batches.
    pub(crate) fn set_slot_waits(&self, found: &[(i64, bool)]) {
        let mut waits = self.slot_waits.lock().unwrap_or_else(|e| e.into_inner());
        for &(job_id, waiting) in found {
            if waiting {
                waits.insert(job_id);
            } else {
                waits.remove(&job_id);
            }
        }
    }

    /// Whether tasks of `job_id` waited for a slot (or a bucket was full) at this node's
    /// last scan of it.
    pub(crate) fn slot_waited(&self, job_id: i64) -> bool {
        self.slot_waits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&job_id)
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, CachedJob>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) async fn get(&self, store: &Store, id: i64) -> store::Result<Option<Arc<JobEntry>>> {
        let cached = self.lock().get(&id).cloned();
        match cached {
            Some((at, entry)) if at.elapsed() < self.ttl => Ok(entry),
            Some((_, entry)) => {
                self.refresh_in_background(store, id);
                Ok(entry)
            }
            None => {
                let entry = load_job(store, id).await?;
                self.lock().insert(id, (Instant::now(), entry.clone()));
                Ok(entry)
            }
        }
    }

    /// Job `id` if this node read it from the database less than the cache's time to live
    /// ago; `None` for an older entry, a job it never read (or changed since: a change
    /// drops the entry), or one it found missing. Never reads: for a caller that reads the
    /// job itself when it must not act on rules older than that ([`super::complete`]'s
    /// rules of ended attempts).
    pub(crate) fn fresh(&self, id: i64) -> Option<Arc<JobEntry>> {
        match self.lock().get(&id) {
            Some((at, entry)) if at.elapsed() < self.ttl => entry.clone(),
            _ => None,
        }
    }

    pub(crate) fn refresh_in_background(&self, store: &Store, id: i64) {
        if !self
            .refreshing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id)
        {
            return;
        }
        let (store, map, refreshing) = (store.clone(), self.map.clone(), self.refreshing.clone());
        tokio::spawn(async move {
            match load_job(&store, id).await {
                Ok(entry) => {
                    map.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id, (Instant::now(), entry));
                }
                Err(e) => {
                    tracing::warn!(job.id = id, error = %e, "re-reading a job failed; keeping the cached one")
                }
            }
            refreshing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        });
    }

    /// The id of the job called `name`; `None` if there is none.
    pub(crate) async fn id_named(&self, store: &Store, name: &str) -> store::Result<Option<i64>> {
        let names = || self.names.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(at, id)) = names().get(name)
            && at.elapsed() < self.ttl
        {
            return Ok(Some(id));
        }
        match store.get_job_by_name(name).await {
            Ok(job) => {
                let mut names = names();
                if names.len() >= 10_000 {
                    names.clear();
                }
                names.insert(name.to_owned(), (Instant::now(), job.id));
                Ok(Some(job.id))
            }
            Err(store::Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn invalidate(&self, id: i64) {
        self.lock().remove(&id);
        // A rename moves a name to another job: forget them all (rare, and cheap).
        self.names.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    pub(crate) fn clear(&self) {
        self.lock().clear();
        self.names.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// A job and the newest version of its plugin; `None` if the job does not exist.
pub(crate) async fn load_job(store: &Store, id: i64) -> store::Result<Option<Arc<JobEntry>>> {
    let job = match store.get_job(id).await {
        Ok(job) => job,
        Err(store::Error::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let plugin = match store.latest_plugin(&job.spec.plugin).await {
        Ok(p) => Some(p),
        Err(store::Error::NotFound(_)) => None,
        Err(e) => return Err(e),
    };
    Ok(Some(Arc::new(JobEntry { job, plugin })))
}

/// Live executors by app, sorted by address; refreshed from the database every second (the
/// registry lives there, so every node sees every executor).
///
/// An executor a trigger request could not reach (no connection, or a 503: nothing was
/// delivered) is left out of every route on this node until it heartbeats again: in the
/// seconds before a killed executor is declared dead, round robin and the other
/// single-target routes would otherwise keep spending attempts on it. When every executor
/// of an app is left out, its fires wait as for an app with none (SPEC §4, "No executor
/// yet").
#[derive(Default)]
pub(crate) struct ExecutorCache {
    by_app: Mutex<Arc<HashMap<String, Vec<Executor>>>>,
    /// Address → when a request could not reach it (this node's clock).
    unreachable: Mutex<HashMap<String, Millis>>,
}

impl ExecutorCache {
    pub(crate) fn of_app(&self, app: &str) -> Vec<Executor> {
        let map = self
            .by_app
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut live = map.get(app).cloned().unwrap_or_default();
        let unreachable = self.unreachable.lock().unwrap_or_else(|e| e.into_inner());
        if !unreachable.is_empty() {
            live.retain(|e| reachable(&unreachable, e));
        }
        live
    }

    /// A trigger request to `address` did not reach it at `at`.
    pub(crate) fn mark_unreachable(&self, address: &str, at: Millis) {
        metrics::counter!("rota_executors_unreachable_total").increment(1);
        self.unreachable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(address.to_owned(), at);
    }

    /// The protocol the executor at `address` of `app` speaks (Rota's, if it is not
    /// registered any more).
    pub(crate) fn protocol(&self, app: &str, address: &str) -> ExecutorProtocol {
        let map = self
            .by_app
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        map.get(app)
            .and_then(|all| all.iter().find(|e| e.address == address))
            .map_or(ExecutorProtocol::Rota, |e| e.protocol)
    }

    /// The apps that have a live executor.
    pub(crate) fn apps(&self) -> Vec<String> {
        let map = self
            .by_app
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        map.keys().cloned().collect()
    }

    pub(crate) async fn refresh(&self, store: &Store, alive_after: Millis) -> store::Result<()> {
        let mut map: HashMap<String, Vec<Executor>> = HashMap::new();
        for e in store.list_executors(None, alive_after).await? {
            map.entry(e.app.clone()).or_default().push(e);
        }
        {
            // Forget the marks of executors that beat since, or are gone.
            let mut unreachable = self.unreachable.lock().unwrap_or_else(|e| e.into_inner());
            if !unreachable.is_empty() {
                let still: HashMap<String, Millis> = map
                    .values()
                    .flatten()
                    .filter(|e| !reachable(&unreachable, e))
                    .map(|e| (e.address.clone(), unreachable[&e.address]))
                    .collect();
                *unreachable = still;
            }
        }
        *self.by_app.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(map);
        Ok(())
    }
}

/// Not marked unreachable, or heartbeat since it was.
fn reachable(unreachable: &HashMap<String, Millis>, e: &Executor) -> bool {
    unreachable
        .get(&e.address)
        .is_none_or(|&at| e.last_heartbeat_at > at)
}

/// A block of run ids reserved from the database, handed out without a statement each.
pub(crate) struct RunIds {
    state: Arc<Mutex<IdBlocks>>,
    refill: tokio::sync::Mutex<()>,
}

/// The block being handed out and the next one, fetched in the background before the first
/// runs out, so the fire path does not wait for the database.
#[derive(Default)]
pub(crate) struct IdBlocks {
    next: i64,
    end: i64,
    spare: Option<(i64, i64)>,
    fetching: bool,
}

pub(crate) const RUN_ID_BLOCK: i64 = 10_000;

impl RunIds {
    pub(crate) fn new() -> Self {
        RunIds {
            state: Arc::new(Mutex::new(IdBlocks::default())),
            refill: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) async fn take(&self, store: &Store, n: usize) -> store::Result<Vec<i64>> {
        let n = n as i64;
        loop {
            {
                let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if g.end - g.next < n
                    && let Some((first, end)) = g.spare.take()
                    && end - first >= n
                {
                    (g.next, g.end) = (first, end);
                }
                if g.end - g.next >= n {
                    let first = g.next;
                    g.next += n;
                    if g.spare.is_none() && !g.fetching {
                        g.fetching = true;
                        let (store, state) = (store.clone(), self.state.clone());
                        tokio::spawn(async move {
                            let spare = store.allocate_ids("run", RUN_ID_BLOCK).await;
                            let mut g = state.lock().unwrap_or_else(|e| e.into_inner());
                            g.fetching = false;
                            match spare {
                                Ok(first) => g.spare = Some((first, first + RUN_ID_BLOCK)),
                                Err(e) => {
                                    tracing::warn!(error = %e, "reserving the next run id block failed")
                                }
                            }
                        });
                    }
                    return Ok((first..first + n).collect());
                }
            }
            // Nothing left (start-up, or a batch larger than a block): fetch now.
            let _refill = self.refill.lock().await;
            let size = RUN_ID_BLOCK.max(n);
            let first = store.allocate_ids("run", size).await?;
            let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if g.end - g.next < n {
                (g.next, g.end) = (first, first + size);
            } else {
                g.spare = Some((first, first + size));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Backoff;
    use crate::route::Route;
    use crate::schedule::{Misfire, Schedule};

    fn entry(id: i64) -> Option<Arc<JobEntry>> {
        let spec = JobSpec {
            name: format!("job-{id}"),
            app: "default".into(),
            plugin: "hello".into(),
            schedule: Schedule::None,
            params: None,
            route: Route::RoundRobin,
            block: rota_proto::BlockStrategy::Serial,
            misfire: Misfire::DoNothing,
            timeout_ms: 60_000,
            max_attempts: 3,
            backoff: Backoff::Fixed { delay_ms: 1_000 },
            memory_mb: 64,
            max_concurrency: None,
            concurrency_key: None,
            rate_limit: None,
            debounce_ms: None,
            child_jobs: vec![],
            http_allow: vec![],
            enabled: true,
            no_executor_timeout_ms: None,
            delivery: Delivery::Wasm,
        };
        let job = Job {
            id,
            spec,
            next_fire_at: None,
            generation: 0,
            created_at: 0,
            updated_at: 0,
        };
        Some(Arc::new(JobEntry { job, plugin: None }))
    }

    /// Completion decides an ended attempt's sequel from cached rules only while the cache
    /// read them within its time to live ([`JobCache::fresh`]): an entry served stale while
    /// it is re-read, one a change dropped, or one never read is read by the transaction.
    #[test]
    fn only_an_entry_read_within_the_time_to_live_is_fresh() {
        let ttl = Duration::from_secs(5);
        let cache = JobCache::new(ttl);
        let long_ago = Instant::now()
            .checked_sub(ttl + Duration::from_millis(1))
            .expect("the machine is up for longer than that");
        cache.lock().insert(1, (Instant::now(), entry(1)));
        cache.lock().insert(2, (long_ago, entry(2)));
        assert_eq!(cache.fresh(1).map(|e| e.job.id), Some(1), "read just now");
        assert!(cache.fresh(2).is_none(), "read longer ago than the ttl");
        assert!(cache.fresh(3).is_none(), "never read (and never loaded)");
        assert!(cache.lock().get(&3).is_none(), "fresh does not load");
        cache.invalidate(1);
        assert!(cache.fresh(1).is_none(), "dropped by a change");
    }
}

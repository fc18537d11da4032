//! Executor route strategies: which executor of a job's app gets a fire.
//!
//! This module owns XXL-JOB's ten route strategies ([`Route`]) and the little memory some
//! of them need between fires ([`Router`]: round-robin counters, use counts, last-use
//! order, consistent-hash rings). Dispatch asks [`Router::order`] for the executors to try
//! and then does the network part itself (trying the next on failure for `failover`,
//! skipping busy ones for `busyover`, sending shard i of n for `sharding_broadcast`). Kept
//! apart from dispatch so each strategy is plain, synchronous and tested without a
//! network.
//!
//! Like XXL-JOB's, the state is in memory and per scheduler node: two nodes may both start
//! a job's round robin at a different executor. That is harmless — the strategies spread
//! load, they do not promise an exact sequence across nodes — and consistent hashing,
//! which *is* expected to agree across nodes, uses a stable hash (SHA-256) and no state.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use rand::Rng;
use sha2::{Digest, Sha256};

use crate::names::named_enum;

named_enum! {
    what = "route";
    /// How a job's fires are spread over the executors of its app.
    #[derive(Default)]
    pub enum Route {
        /// Always the first executor (by address).
        #[default]
        First => "first",
        /// Always the last executor (by address).
        Last => "last",
        /// Each executor in turn.
        RoundRobin => "round_robin",
        /// A random executor each time.
        Random => "random",
        /// The same executor for the same job as long as the set of executors stays the same;
        /// when it changes, only a few jobs move.
        ConsistentHash => "consistent_hash",
        /// The executor this job used least often.
        LeastFrequentlyUsed => "least_frequently_used",
        /// The executor this job used least recently (or never).
        LeastRecentlyUsed => "least_recently_used",
        /// The first executor that accepts the fire, trying them in order.
        Failover => "failover",
        /// The first executor that is not busy with this job, trying them in order.
        Busyover => "busyover",
        /// Every executor, each with its shard index.
        ShardingBroadcast => "sharding_broadcast",
    }
}

impl Route {
    /// Whether dispatch moves on to the next executor of [`Router::order`] when one
    /// refuses (unreachable for `failover`, busy for `busyover`). For every other
    /// strategy the order has one executor, or (broadcast) every one must get its shard.
    pub fn allows_failover(self) -> bool {
        matches!(self, Self::Failover | Self::Busyover)
    }
}

/// Virtual nodes per executor on the consistent-hash ring (as XXL-JOB).
const VIRTUAL_NODES: usize = 100;

/// A job's memory of past picks is pruned to the current executors once it knows this
/// many times more executors than there are now (executors that left).
const STALE_STATE_FACTOR: usize = 4;

/// Rings are cached per executor list; past this many lists the cache starts over.
const MAX_CACHED_RINGS: usize = 256;

/// Picks executors for fires. One per scheduler node, shared by the dispatch pool; the
/// lock is held only for the few map operations of one pick (never across I/O).
#[derive(Debug, Default)]
pub struct Router {
    state: Mutex<RouterState>,
}

#[derive(Debug, Default)]
struct RouterState {
    jobs: HashMap<i64, JobState>,
    rings: HashMap<u64, Arc<Ring>>,
}

/// What one job's strategy remembers, keyed by executor address so that it survives the
/// list being re-sorted or growing.
#[derive(Debug, Default)]
struct JobState {
    /// Round robin: the next pick, modulo the number of executors.
    next_turn: Option<u64>,
    /// Least frequently used: picks per executor.
    uses: HashMap<String, u64>,
    /// Least recently used: the pick sequence number of each executor's last pick.
    last_used: HashMap<String, u64>,
    /// The last sequence number handed out in `last_used`.
    clock: u64,
}

impl Router {
    pub fn new() -> Self {
        Self::default()
    }

    /// The executors to try for one fire of job `job_id`, best first, as indexes into
    /// `executors` (which the caller passes sorted by address). Empty when there are no
    /// executors.
    ///
    /// - `first` / `last`: `[0]` / `[n-1]`;
    /// - `round_robin`: `[k % n]` for a per-job counter `k` that starts at a random value;
    /// - `random`: one uniformly random index;
    /// - `consistent_hash`: the executor owning the job id on a ring of 100 virtual nodes
    ///   per executor (SHA-256), the same on every scheduler node;
    /// - `least_frequently_used`: the executor this job picked least often (an executor
    ///   seen for the first time counts 0; ties go to the lowest index); the pick counts;
    /// - `least_recently_used`: an executor this job never picked, else the one picked
    ///   longest ago (ties go to the lowest index); the pick is recorded;
    /// - `failover`, `busyover`, `sharding_broadcast`: every executor, in order.
    pub fn order(&self, route: Route, job_id: i64, executors: &[impl AsRef<str>]) -> Vec<usize> {
        let n = executors.len();
        if n == 0 {
            return Vec::new();
        }
        match route {
            Route::First => vec![0],
            Route::Last => vec![n - 1],
            Route::Random => vec![rand::rng().random_range(0..n)],
            Route::Failover | Route::Busyover | Route::ShardingBroadcast => (0..n).collect(),
            Route::ConsistentHash => vec![self.ring(executors).owner(job_id)],
            Route::RoundRobin => {
                let mut state = self.lock();
                let job = state.jobs.entry(job_id).or_default();
                let turn = *job
                    .next_turn
                    .get_or_insert_with(|| rand::rng().random_range(0..n as u64));
                job.next_turn = Some(turn.wrapping_add(1));
                vec![usize::try_from(turn % n as u64).unwrap_or(0)]
            }
            Route::LeastFrequentlyUsed => {
                let mut state = self.lock();
                let job = state.jobs.entry(job_id).or_default();
                prune(&mut job.uses, executors);
                let pick =
                    min_index_by_key(executors, |addr| job.uses.get(addr).copied().unwrap_or(0));
                let addr = executors[pick].as_ref();
                match job.uses.get_mut(addr) {
                    Some(uses) => *uses += 1,
                    None => {
                        job.uses.insert(addr.to_owned(), 1);
                    }
                }
                vec![pick]
            }
            Route::LeastRecentlyUsed => {
                let mut state = self.lock();
                let job = state.jobs.entry(job_id).or_default();
                prune(&mut job.last_used, executors);
                // Never used sorts first (0); sequence numbers start at 1.
                let pick = min_index_by_key(executors, |addr| {
                    job.last_used.get(addr).copied().unwrap_or(0)
                });
                job.clock += 1;
                let addr = executors[pick].as_ref();
                match job.last_used.get_mut(addr) {
                    Some(last) => *last = job.clock,
                    None => {
                        job.last_used.insert(addr.to_owned(), job.clock);
                    }
                }
                vec![pick]
            }
        }
    }

    /// Drops what the router remembers about a job (deleted, or its route changed).
    pub fn forget_job(&self, job_id: i64) {
        self.lock().jobs.remove(&job_id);
    }

    /// Drops everything (XXL-JOB resets its route memory daily; call this from a daily
    /// timer to do the same).
    pub fn forget_all(&self) {
        let mut state = self.lock();
        state.jobs.clear();
        state.rings.clear();
    }

    fn lock(&self) -> MutexGuard<'_, RouterState> {
        // The state is only counters: one left half-updated by a panicking thread is
        // still a fine basis for spreading load.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ring for this executor list, built once per distinct list.
    fn ring(&self, executors: &[impl AsRef<str>]) -> Arc<Ring> {
        let key = list_fingerprint(executors);
        if let Some(ring) = self.lock().rings.get(&key)
            && ring.is_for(executors)
        {
            return Arc::clone(ring);
        }
        // Built outside the lock: 100 hashes per executor.
        let ring = Arc::new(Ring::new(executors));
        let mut state = self.lock();
        if state.rings.len() >= MAX_CACHED_RINGS {
            state.rings.clear();
        }
        state.rings.insert(key, Arc::clone(&ring));
        ring
    }
}

/// Forgets executors that left, once there are many of them: keeps per-job state in
/// proportion to the current executor list.
fn prune(per_executor: &mut HashMap<String, u64>, executors: &[impl AsRef<str>]) {
    if per_executor.len() > STALE_STATE_FACTOR * executors.len() {
        let current: HashSet<&str> = executors.iter().map(AsRef::as_ref).collect();
        per_executor.retain(|addr, _| current.contains(addr.as_str()));
    }
}

/// The index of the smallest key; the lowest index among equals.
fn min_index_by_key(executors: &[impl AsRef<str>], mut key: impl FnMut(&str) -> u64) -> usize {
    let mut best = (u64::MAX, 0);
    for (index, addr) in executors.iter().enumerate() {
        let k = key(addr.as_ref());
        if k < best.0 {
            best = (k, index);
        }
    }
    best.1
}

/// A consistent-hash ring: each executor at `VIRTUAL_NODES` points, a job goes to the
/// first point at or after its own hash (wrapping around).
#[derive(Debug)]
struct Ring {
    /// The list this ring was built for (to tell fingerprint collisions apart).
    executors: Box<[String]>,
    /// (point, executor index), sorted by point.
    points: Box<[(u64, usize)]>,
}

impl Ring {
    fn new(executors: &[impl AsRef<str>]) -> Self {
        let mut points = Vec::with_capacity(executors.len() * VIRTUAL_NODES);
        for (index, addr) in executors.iter().enumerate() {
            for node in 0..VIRTUAL_NODES {
                let label = format!("SHARD-{}-NODE-{node}", addr.as_ref());
                points.push((stable_hash(label.as_bytes()), index));
            }
        }
        points.sort_unstable();
        Self {
            executors: executors.iter().map(|e| e.as_ref().to_owned()).collect(),
            points: points.into_boxed_slice(),
        }
    }

    fn is_for(&self, executors: &[impl AsRef<str>]) -> bool {
        self.executors.len() == executors.len()
            && self
                .executors
                .iter()
                .zip(executors)
                .all(|(a, b)| a == b.as_ref())
    }

    fn owner(&self, job_id: i64) -> usize {
        let key = stable_hash(&job_id.to_be_bytes());
        let at = self.points.partition_point(|(point, _)| *point < key);
        self.points
            .get(at)
            .or_else(|| self.points.first())
            .map_or(0, |(_, index)| *index)
    }
}

/// The first 8 bytes of SHA-256: the same on every node and every Rust version (unlike
/// `std`'s randomly seeded hasher), and well spread even for similar labels.
fn stable_hash(bytes: &[u8]) -> u64 {
    let digest = Sha256::digest(bytes);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// A cheap FNV-1a fingerprint of an executor list, to find its cached ring.
fn list_fingerprint(executors: &[impl AsRef<str>]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for addr in executors {
        for byte in addr.as_ref().bytes().chain(std::iter::once(0xff)) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executors(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("http://10.0.0.{i}:9999")).collect()
    }

    fn picks(
        router: &Router,
        route: Route,
        job_id: i64,
        list: &[String],
        times: usize,
    ) -> Vec<usize> {
        (0..times)
            .map(|_| {
                let order = router.order(route, job_id, list);
                assert_eq!(order.len(), 1, "{route}: one executor");
                order[0]
            })
            .collect()
    }

    #[test]
    fn names_round_trip() {
        for route in Route::ALL {
            assert_eq!(route.as_str().parse::<Route>(), Ok(route));
            assert_eq!(route.to_string(), route.as_str());
            let json = serde_json::to_string(&route).expect("serializes");
            assert_eq!(json, format!("\"{}\"", route.as_str()));
            assert_eq!(serde_json::from_str::<Route>(&json).expect("parses"), route);
        }
        assert_eq!(Route::default(), Route::First);
        let distinct: HashSet<&str> = Route::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(distinct.len(), 10);
    }

    #[test]
    fn unknown_name_lists_the_valid_ones() {
        let err = "ROUND".parse::<Route>().expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "`ROUND` is not a valid route; expected one of: first, last, round_robin, random, \
             consistent_hash, least_frequently_used, least_recently_used, failover, \
             busyover, sharding_broadcast"
        );
        assert!("RoundRobin".parse::<Route>().is_err());
        assert!("".parse::<Route>().is_err());
    }

    #[test]
    fn only_failover_and_busyover_fail_over() {
        for route in Route::ALL {
            assert_eq!(
                route.allows_failover(),
                matches!(route, Route::Failover | Route::Busyover),
                "{route}"
            );
        }
    }

    #[test]
    fn no_executors_no_order() {
        let router = Router::new();
        let none: [&str; 0] = [];
        for route in Route::ALL {
            assert!(router.order(route, 1, &none).is_empty(), "{route}");
        }
    }

    #[test]
    fn first_and_last() {
        let router = Router::new();
        let list = executors(4);
        assert_eq!(picks(&router, Route::First, 1, &list, 5), vec![0; 5]);
        assert_eq!(picks(&router, Route::Last, 1, &list, 5), vec![3; 5]);
        let one = executors(1);
        assert_eq!(router.order(Route::Last, 1, &one), vec![0]);
        // &str works as well as String.
        assert_eq!(router.order(Route::Last, 1, &["a", "b"]), vec![1]);
    }

    #[test]
    fn all_in_order_for_failover_busyover_and_broadcast() {
        let router = Router::new();
        let list = executors(5);
        for route in [Route::Failover, Route::Busyover, Route::ShardingBroadcast] {
            assert_eq!(
                router.order(route, 9, &list),
                vec![0, 1, 2, 3, 4],
                "{route}"
            );
        }
        assert_eq!(
            router.order(Route::ShardingBroadcast, 9, &executors(1)),
            vec![0]
        );
    }

    #[test]
    fn round_robin_cycles_through_all() {
        let router = Router::new();
        let list = executors(5);
        let got = picks(&router, Route::RoundRobin, 7, &list, 15);
        // Whatever the random start, consecutive picks step by one.
        for pair in got.windows(2) {
            assert_eq!(pair[1], (pair[0] + 1) % 5);
        }
        for window in got.chunks(5) {
            let mut sorted = window.to_vec();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
        }
        // The list shrinking does not break it.
        let smaller = executors(2);
        let got = picks(&router, Route::RoundRobin, 7, &smaller, 4);
        assert!(got.iter().all(|i| *i < 2));
        assert_ne!(got[0], got[1]);
    }

    #[test]
    fn round_robin_starts_are_spread_across_jobs() {
        let router = Router::new();
        let list = executors(4);
        let firsts: HashSet<usize> = (0..200)
            .map(|job| router.order(Route::RoundRobin, job, &list)[0])
            .collect();
        assert_eq!(firsts.len(), 4, "random starts cover every executor");
    }

    #[test]
    fn random_covers_all_and_stays_in_range() {
        let router = Router::new();
        let list = executors(3);
        let got = picks(&router, Route::Random, 1, &list, 300);
        let seen: HashSet<usize> = got.iter().copied().collect();
        assert_eq!(seen, HashSet::from([0, 1, 2]));
    }

    #[test]
    fn least_frequently_used_balances() {
        let router = Router::new();
        let list = executors(3);
        // Ties go to the lowest index: 0, 1, 2, then around again.
        assert_eq!(
            picks(&router, Route::LeastFrequentlyUsed, 1, &list, 9),
            vec![0, 1, 2, 0, 1, 2, 0, 1, 2]
        );
        // A newcomer starts at 0 uses and is picked until it catches up.
        let mut grown = list.clone();
        grown.push("http://10.0.0.9:9999".to_owned());
        assert_eq!(
            picks(&router, Route::LeastFrequentlyUsed, 1, &grown, 4),
            vec![3, 3, 3, 0]
        );
        // Counts are per job.
        assert_eq!(router.order(Route::LeastFrequentlyUsed, 2, &list), vec![0]);
    }

    #[test]
    fn least_frequently_used_follows_addresses_not_positions() {
        let router = Router::new();
        let list = executors(3);
        picks(&router, Route::LeastFrequentlyUsed, 1, &list, 2); // uses: .0 and .1
        // .0 leaves: the list shifts, but .2 (now index 1) is still the least used.
        let shifted = list[1..].to_vec();
        assert_eq!(
            router.order(Route::LeastFrequentlyUsed, 1, &shifted),
            vec![1]
        );
    }

    #[test]
    fn least_recently_used_balances() {
        let router = Router::new();
        let list = executors(3);
        assert_eq!(
            picks(&router, Route::LeastRecentlyUsed, 1, &list, 7),
            vec![0, 1, 2, 0, 1, 2, 0]
        );
        // A never-used newcomer wins at once, then the oldest again.
        let mut grown = list.clone();
        grown.insert(0, "http://10.0.0.00:9999".to_owned());
        assert_eq!(
            picks(&router, Route::LeastRecentlyUsed, 1, &grown, 3),
            vec![0, 2, 3]
        );
    }

    #[test]
    fn per_job_state_is_pruned_when_executors_churn() {
        let router = Router::new();
        // Executors come and go: 100 different pairs.
        for generation in 0..100 {
            let list = vec![format!("a-{generation}"), format!("b-{generation}")];
            router.order(Route::LeastFrequentlyUsed, 1, &list);
            router.order(Route::LeastRecentlyUsed, 1, &list);
        }
        let state = router.lock();
        let job = state.jobs.get(&1).expect("job state");
        assert!(
            job.uses.len() <= STALE_STATE_FACTOR * 2 + 2,
            "{}",
            job.uses.len()
        );
        assert!(job.last_used.len() <= STALE_STATE_FACTOR * 2 + 2);
    }

    #[test]
    fn forget_job_resets_its_state() {
        let router = Router::new();
        let list = executors(3);
        picks(&router, Route::LeastFrequentlyUsed, 1, &list, 2);
        picks(&router, Route::LeastFrequentlyUsed, 2, &list, 1);
        router.forget_job(1);
        assert_eq!(router.order(Route::LeastFrequentlyUsed, 1, &list), vec![0]);
        // Job 2 kept its memory.
        assert_eq!(router.order(Route::LeastFrequentlyUsed, 2, &list), vec![1]);
        router.forget_all();
        assert!(router.lock().jobs.is_empty());
    }

    #[test]
    fn consistent_hash_is_deterministic_across_routers() {
        let list = executors(5);
        let a = Router::new();
        let b = Router::new();
        for job in 0..200 {
            let pick = a.order(Route::ConsistentHash, job, &list);
            assert_eq!(pick.len(), 1);
            assert_eq!(pick, a.order(Route::ConsistentHash, job, &list));
            assert_eq!(pick, b.order(Route::ConsistentHash, job, &list));
        }
        // Pinned values: a change of hash or ring layout would move every job.
        let pinned: Vec<usize> = (0..8)
            .map(|job| a.order(Route::ConsistentHash, job, &list)[0])
            .collect();
        assert_eq!(pinned, vec![1, 2, 2, 4, 0, 4, 4, 0]);
    }

    #[test]
    fn consistent_hash_spreads_jobs() {
        let router = Router::new();
        let list = executors(5);
        let mut counts = [0usize; 5];
        for job in 0..1_000 {
            counts[router.order(Route::ConsistentHash, job, &list)[0]] += 1;
        }
        // 100 virtual nodes each: every executor gets a fair share (200 expected).
        assert!(counts.iter().all(|c| (100..=320).contains(c)), "{counts:?}");
    }

    #[test]
    fn consistent_hash_moves_a_minority_when_an_executor_joins_or_leaves() {
        let router = Router::new();
        let before = executors(5);
        let mut after = before.clone();
        after.push("http://10.0.0.77:9999".to_owned());
        after.sort();
        let mut moved = 0;
        for job in 0..1_000 {
            let old = &before[router.order(Route::ConsistentHash, job, &before)[0]];
            let new = &after[router.order(Route::ConsistentHash, job, &after)[0]];
            if old != new {
                moved += 1;
                // A job only ever moves to the newcomer.
                assert_eq!(new, "http://10.0.0.77:9999");
            }
        }
        // About 1/6 of the jobs move to the 6th executor.
        assert!((60..=300).contains(&moved), "{moved} of 1000 moved");

        // One leaves: only its own jobs move.
        let fewer: Vec<String> = before
            .iter()
            .filter(|e| !e.ends_with(".2:9999"))
            .cloned()
            .collect();
        for job in 0..1_000 {
            let old = &before[router.order(Route::ConsistentHash, job, &before)[0]];
            let new = &fewer[router.order(Route::ConsistentHash, job, &fewer)[0]];
            if old != new {
                assert!(
                    old.ends_with(".2:9999"),
                    "job {job} moved off a live executor"
                );
            }
        }
    }

    #[test]
    fn consistent_hash_rings_are_cached_and_bounded() {
        let router = Router::new();
        let list = executors(3);
        router.order(Route::ConsistentHash, 1, &list);
        router.order(Route::ConsistentHash, 2, &list);
        assert_eq!(router.lock().rings.len(), 1);
        for n in 1..=(MAX_CACHED_RINGS + 10) {
            router.order(Route::ConsistentHash, 1, &[format!("x-{n}")]);
        }
        assert!(router.lock().rings.len() <= MAX_CACHED_RINGS);
    }

    #[test]
    fn fingerprint_distinguishes_splits() {
        assert_ne!(
            list_fingerprint(&["ab", "c"]),
            list_fingerprint(&["a", "bc"])
        );
        assert_ne!(list_fingerprint(&["a"]), list_fingerprint(&["a", ""]));
        let ring = Ring::new(&["ab", "c"]);
        assert!(ring.is_for(&["ab", "c"]));
        assert!(!ring.is_for(&["a", "bc"]));
        assert!(!ring.is_for(&["ab"]));
    }
}

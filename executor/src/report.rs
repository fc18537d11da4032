//! Run reports on their way to a scheduler: batched, retried, spooled to disk.
//!
//! Runs hand their reports ([`RunReport`]: `running` when a plugin starts, then the final
//! one) to one bounded channel ([`report_channel`]). A `running` report is held back for
//! [`RUNNING_HOLD`] and dropped if its run's final report comes in that time, so a short
//! run costs the scheduler one update, not two. The reporter task drains the channel into
//! batches (up to [`BATCH_MAX`] reports or a window,
//! [`ExecutorConfig::report_window`](crate::config::ExecutorConfig::report_window), after
//! the first) and POSTs each to
//! `/api/executor/v1/callback` on the first scheduler that answers 2xx, retrying a few
//! times with backoff. While it collects a batch the reporter sleeps until the window ends
//! and then takes what came: a report wakes it early only when the batch must close
//! sooner (an awaited final report, or [`BATCH_MAX`] waiting), so a quiet executor does
//! not wake its async side once per run.
//!
//! When no scheduler takes a batch it goes to the [`Spool`]: one JSON file per batch in
//! `<data_dir>/spool/`, written atomically (temp file, fsync, rename), replayed in order
//! with exponential backoff (newer batches queue behind it so order is kept) and deleted
//! only after a 2xx. So a result survives a scheduler restart and an executor restart; a
//! batch whose 2xx was lost is sent again, which is harmless since the scheduler's apply
//! is idempotent. A run whose final report no scheduler has taken yet — queued, on its
//! way or spooled — is listed in every registration ([`Unacked`]), so a scheduler never
//! declares it lost while its result is still coming. A batch a scheduler refuses as malformed (400/422) is moved to
//! `spool/rejected/` for an operator rather than blocking the spool forever.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use rota_proto::wire::PATH_CALLBACK;
use rota_proto::{CallbackBatch, RunReport};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{CallError, SchedulerClient};
use crate::logs::LogStore;

/// Most reports in one callback.
pub const BATCH_MAX: usize = 1_000;
/// How long a `running` report waits for its run's final report before it is sent.
pub const RUNNING_HOLD: Duration = Duration::from_millis(500);
/// Fresh batches on their way at once: while one is applied by a scheduler the next are
/// collected and sent, so the reports of a burst are not held up behind one round trip.
/// (Order between batches does not matter: applying is idempotent and a final status is
/// never replaced by a `running` one.)
const IN_FLIGHT_MAX: usize = 3;
/// Pauses between the attempts of a fresh batch before it is spooled.
const RETRIES: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(400)];
const REPLAY_BACKOFF_MIN: Duration = Duration::from_millis(200);
const REPLAY_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Batches kept in memory when the spool cannot be written (disk full); beyond this the
/// reporter stops taking reports, which holds up the runs (back-pressure).
const HELD_MAX: usize = 64;

/// The runs whose final reports no scheduler has acknowledged yet: queued for the reporter,
/// in a batch on its way, held in memory or in the spool. The node adds a run when it
/// queues the final report (before the run leaves its registry) and the reporter removes it
/// once a scheduler took the batch, so every registration lists the run until its result is
/// in: a heartbeat built in between never makes a scheduler declare a finished run lost.
#[derive(Debug, Clone, Default)]
pub struct Unacked(Arc<Mutex<HashMap<i64, u32>>>);

impl Unacked {
    fn lock(&self) -> MutexGuard<'_, HashMap<i64, u32>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `report` if it is a final one.
    pub fn add_report(&self, report: &RunReport) {
        if report.status.is_final() {
            *self.lock().entry(report.run_id).or_default() += 1;
        }
    }

    fn add(&self, batch: &CallbackBatch) {
        for report in &batch.reports {
            self.add_report(report);
        }
    }

    fn remove(&self, batch: &CallbackBatch) {
        let mut ids = self.lock();
        for report in batch.reports.iter().filter(|r| r.status.is_final()) {
            if let Some(count) = ids.get_mut(&report.run_id) {
                *count -= 1;
                if *count == 0 {
                    ids.remove(&report.run_id);
                }
            }
        }
    }

    pub fn run_ids(&self) -> Vec<i64> {
        self.lock().keys().copied().collect()
    }
}

/// Batches no scheduler has taken yet, on disk, oldest first.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    next_seq: u64,
    files: VecDeque<(PathBuf, CallbackBatch)>,
    index: Unacked,
}

impl Spool {
    /// Opens (creating if needed) the spool in `dir` and loads what an earlier process
    /// left there.
    pub fn open(dir: impl Into<PathBuf>, index: Unacked) -> io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        let mut found = Vec::new();
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.contains(".tmp") {
                let _ = fs::remove_file(&path);
                continue;
            }
            if let Some(seq) = name
                .strip_suffix(".json")
                .and_then(|s| s.parse::<u64>().ok())
            {
                found.push((seq, path));
            }
        }
        found.sort();
        let mut spool = Self {
            dir,
            next_seq: found.last().map_or(1, |(seq, _)| seq + 1),
            files: VecDeque::new(),
            index,
        };
        for (_, path) in found {
            match fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<CallbackBatch>(&bytes).ok())
            {
                Some(batch) => {
                    spool.index.add(&batch);
                    spool.files.push_back((path, batch));
                }
                None => {
                    tracing::error!(path = %path.display(), "unreadable spooled callback batch; moving it aside");
                    spool.set_aside(&path);
                }
            }
        }
        Ok(spool)
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Writes `batch` behind the others; hands it back if it cannot.
    pub fn push(&mut self, batch: CallbackBatch) -> Result<(), (io::Error, CallbackBatch)> {
        let path = self.dir.join(format!("{:020}.json", self.next_seq));
        let written = serde_json::to_vec(&batch)
            .map_err(io::Error::other)
            .and_then(|bytes| write_atomically(&path, &bytes));
        if let Err(e) = written {
            return Err((e, batch));
        }
        self.next_seq += 1;
        self.files.push_back((path, batch));
        Ok(())
    }

    fn front(&self) -> Option<&CallbackBatch> {
        self.files.front().map(|(_, batch)| batch)
    }

    /// Drops the oldest batch: delivered.
    fn pop_front(&mut self) {
        if let Some((path, batch)) = self.files.pop_front() {
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot delete a delivered spool file; it will be sent again after a restart");
            }
            self.index.remove(&batch);
        }
    }

    /// Moves the oldest batch to `rejected/`: a scheduler refused its content.
    fn reject_front(&mut self) {
        if let Some((path, batch)) = self.files.pop_front() {
            self.set_aside(&path);
            self.index.remove(&batch);
        }
    }

    fn set_aside(&self, path: &Path) {
        let rejected = self.dir.join("rejected");
        let moved = fs::create_dir_all(&rejected).and_then(|()| {
            let name = path.file_name().unwrap_or_default();
            fs::rename(path, rejected.join(name))
        });
        if let Err(e) = moved {
            tracing::error!(path = %path.display(), error = %e, "cannot move a spool file aside; deleting it");
            let _ = fs::remove_file(path);
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let result = (|| {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)?;
        // Make the rename itself durable.
        if let Some(dir) = path.parent() {
            fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Reports of one batch, a run's `running` report replaced by its final one.
#[derive(Default)]
struct Batch {
    reports: Vec<RunReport>,
    by_run: HashMap<i64, usize>,
}

impl Batch {
    fn push(&mut self, report: RunReport) {
        match self.by_run.get(&report.run_id) {
            Some(&i) => {
                if report.status.is_final() || !self.reports[i].status.is_final() {
                    self.reports[i] = report;
                }
            }
            None => {
                self.by_run.insert(report.run_id, self.reports.len());
                self.reports.push(report);
            }
        }
    }

    fn len(&self) -> usize {
        self.reports.len()
    }

    fn into_callback(self) -> CallbackBatch {
        CallbackBatch {
            reports: self.reports,
        }
    }
}

/// Adds to each final report's message that lines of its run's log were dropped, and
/// why (a full disk), so a short log is not taken for the whole of it.
fn tell_log_losses(logs: &LogStore, reports: &mut [RunReport]) {
    for r in reports.iter_mut().filter(|r| r.status.is_final()) {
        if let Some(loss) = logs.loss(r.run_id) {
            r.message = Some(match r.message.take() {
                Some(m) if !m.is_empty() => format!("{m} ({loss})"),
                _ => loss.to_string(),
            });
        }
    }
}

/// `running` reports held back for [`RUNNING_HOLD`], oldest first.
#[derive(Default)]
struct Postponed {
    due: VecDeque<(Instant, i64)>,
    reports: HashMap<i64, RunReport>,
}

impl Postponed {
    /// Routes a report: a `running` one is held, a final one goes to `batch` and
    /// cancels its run's held `running` report.
    fn route(&mut self, report: RunReport, batch: &mut Batch) {
        if report.status.is_final() {
            self.reports.remove(&report.run_id);
            batch.push(report);
        } else {
            self.due
                .push_back((Instant::now() + RUNNING_HOLD, report.run_id));
            self.reports.insert(report.run_id, report);
        }
    }

    /// When the oldest held report is due, if any is held.
    fn next_due(&mut self) -> Option<Instant> {
        while let Some(&(at, run_id)) = self.due.front() {
            if self.reports.contains_key(&run_id) {
                return Some(at);
            }
            self.due.pop_front();
        }
        None
    }

    /// Moves the held reports due by `now` (all of them if `now` is `None`) to `batch`.
    fn release(&mut self, now: Option<Instant>, batch: &mut Batch) {
        while let Some(&(at, run_id)) = self.due.front() {
            if now.is_some_and(|now| at > now) {
                break;
            }
            self.due.pop_front();
            if let Some(report) = self.reports.remove(&run_id) {
                batch.push(report);
            }
        }
    }
}

/// A report on its way to the reporter, and when the batch it joins must close if it is a
/// final one (queued + the trigger's `report_within_ms`: something waits on the run's
/// result); `None`: the reporter's window applies.
#[derive(Debug)]
pub struct Queued {
    pub report: RunReport,
    pub send_by: Option<Instant>,
}

/// The runs' end of the reporter's channel.
#[derive(Clone)]
pub struct ReportSender {
    tx: mpsc::Sender<Queued>,
    close_early: Arc<Notify>,
    room: Arc<AtomicUsize>,
}

/// The reporter's end of the channel.
pub struct ReportReceiver {
    rx: mpsc::Receiver<Queued>,
    /// Poked when a batch being collected must close before its window ends.
    close_early: Arc<Notify>,
    /// Reports the batch being collected still has room for: so many waiting in the
    /// channel fill it ([`BATCH_MAX`] while none is being collected).
    room: Arc<AtomicUsize>,
}

/// The channel from the runs to the reporter, holding up to `capacity` reports.
pub fn report_channel(capacity: usize) -> (ReportSender, ReportReceiver) {
    let (tx, rx) = mpsc::channel(capacity);
    let close_early = Arc::new(Notify::new());
    let room = Arc::new(AtomicUsize::new(BATCH_MAX));
    let sender = ReportSender {
        tx,
        close_early: close_early.clone(),
        room: room.clone(),
    };
    let receiver = ReportReceiver {
        rx,
        close_early,
        room,
    };
    (sender, receiver)
}

/// The reporter has stopped: the report was not queued.
#[derive(Debug)]
pub struct ReporterGone;

impl ReportSender {
    /// Queues `queued`, waiting while the channel is full.
    pub async fn send(&self, queued: Queued) -> Result<(), ReporterGone> {
        let urgent = Self::urgent(&queued);
        self.tx.send(queued).await.map_err(|_| ReporterGone)?;
        self.poke(urgent);
        Ok(())
    }

    /// [`ReportSender::send`] from a thread outside the async runtime.
    pub fn blocking_send(&self, queued: Queued) -> Result<(), ReporterGone> {
        let urgent = Self::urgent(&queued);
        self.tx.blocking_send(queued).map_err(|_| ReporterGone)?;
        self.poke(urgent);
        Ok(())
    }

    /// An awaited final report closes its batch sooner than the window.
    fn urgent(queued: &Queued) -> bool {
        queued.send_by.is_some() && queued.report.status.is_final()
    }

    /// Wakes a collecting reporter if the batch must close now or sooner: an urgent
    /// report, or enough waiting to fill the batch. (A poke while no batch is being
    /// collected leaves a permit that makes the next collection look once more: harmless.)
    fn poke(&self, urgent: bool) {
        let waiting = self.tx.max_capacity() - self.tx.capacity();
        if urgent || waiting >= self.room.load(Ordering::Relaxed) {
            self.close_early.notify_one();
        }
    }
}

/// The reporter task: runs until `stop`, then sends or spools whatever is left.
pub async fn run_reporter(
    window: Duration,
    mut reports: ReportReceiver,
    client: Arc<SchedulerClient>,
    spool: Spool,
    logs: LogStore,
    stop: CancellationToken,
) {
    let mut reporter = Reporter {
        client,
        spool,
        logs,
        held: VecDeque::new(),
        backoff: REPLAY_BACKOFF_MIN,
        retry_at: Instant::now(),
    };
    let mut postponed = Postponed::default();
    let mut in_flight: JoinSet<Fate> = JoinSet::new();
    loop {
        let backlog = reporter.has_backlog();
        let held_due = postponed.next_due();
        let room = reporter.held.len() < HELD_MAX && in_flight.len() < IN_FLIGHT_MAX;
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            Some(sent) = in_flight.join_next(), if !in_flight.is_empty() => {
                reporter.settle(sent);
            }
            first = reports.rx.recv(), if room => {
                let Some(first) = first else { break };
                let batch = collect(&mut reports, first, window, &mut postponed).await;
                reporter.submit(batch, &mut in_flight, &stop);
            }
            _ = tokio::time::sleep_until(held_due.unwrap_or_else(Instant::now)), if held_due.is_some() && room => {
                let mut batch = Batch::default();
                postponed.release(Some(Instant::now()), &mut batch);
                reporter.submit(batch, &mut in_flight, &stop);
            }
            _ = tokio::time::sleep_until(reporter.retry_at), if backlog && in_flight.is_empty() => {
                reporter.replay().await;
            }
        }
    }
    // Shutting down: the runs are over; send or spool what is left, once.
    while let Some(sent) = in_flight.join_next().await {
        reporter.settle(sent);
    }
    reporter.logs.flush();
    reports.rx.close();
    let mut batch = Batch::default();
    while let Some(Queued { report, .. }) = reports.rx.recv().await {
        postponed.route(report, &mut batch);
        if batch.len() >= BATCH_MAX {
            reporter.stash(std::mem::take(&mut batch).into_callback());
        }
    }
    postponed.release(None, &mut batch);
    if batch.len() > 0 {
        reporter.stash(batch.into_callback());
    }
    reporter.replay().await;
    if reporter.has_backlog() {
        tracing::warn!(
            batches = reporter.spool.len() + reporter.held.len(),
            "no scheduler took the last run reports; they stay in the spool for the next start"
        );
    }
}

/// Up to [`BATCH_MAX`] reports arriving within `window` of `first` (`running` ones held
/// back), or until the earliest [`Queued::send_by`] of a final report in it, plus the held
/// reports that are due. It sleeps until the batch must close, woken sooner only by a
/// report that moves that time ([`ReportSender::poke`]), and then takes what came.
async fn collect(
    reports: &mut ReportReceiver,
    first: Queued,
    window: Duration,
    postponed: &mut Postponed,
) -> Batch {
    let mut deadline = Instant::now() + window;
    let mut batch = Batch::default();
    let mut take = |queued: Queued, deadline: &mut Instant, batch: &mut Batch| {
        if let Some(by) = queued.send_by.filter(|_| queued.report.status.is_final()) {
            *deadline = (*deadline).min(by);
        }
        postponed.route(queued.report, batch);
    };
    take(first, &mut deadline, &mut batch);
    loop {
        while batch.len() < BATCH_MAX {
            match reports.rx.try_recv() {
                Ok(queued) => take(queued, &mut deadline, &mut batch),
                Err(_) => break,
            }
        }
        if batch.len() >= BATCH_MAX || Instant::now() >= deadline {
            break;
        }
        reports
            .room
            .store(BATCH_MAX - batch.len(), Ordering::Relaxed);
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {}
            () = reports.close_early.notified() => {}
        }
    }
    reports.room.store(BATCH_MAX, Ordering::Relaxed);
    postponed.release(Some(Instant::now()), &mut batch);
    batch
}

struct Reporter {
    client: Arc<SchedulerClient>,
    spool: Spool,
    /// The runs' logs: handed to the OS before their reports leave.
    logs: LogStore,
    /// Batches that could not be spooled (disk trouble), oldest first.
    held: VecDeque<CallbackBatch>,
    backoff: Duration,
    retry_at: Instant,
}

enum Sent {
    Delivered,
    Refused,
    Failed,
}

impl Reporter {
    fn has_backlog(&self) -> bool {
        !self.spool.is_empty() || !self.held.is_empty()
    }

    /// A fresh batch: on its way now (with a few retries) unless older ones wait, else
    /// spooled.
    fn submit(&mut self, batch: Batch, in_flight: &mut JoinSet<Fate>, stop: &CancellationToken) {
        if batch.len() == 0 {
            return;
        }
        // The lines of the runs reported here reach the OS first (one `write` for the
        // whole batch): what is reported survives a SIGKILL of the executor.
        self.logs.flush();
        let mut batch = batch.into_callback();
        tell_log_losses(&self.logs, &mut batch.reports);
        if self.has_backlog() {
            self.stash(batch);
            return;
        }
        let client = self.client.clone();
        let stop = stop.clone();
        in_flight.spawn(async move { deliver(&client, batch, &stop).await });
    }

    /// What became of a fresh batch.
    fn settle(&mut self, sent: Result<Fate, tokio::task::JoinError>) {
        match sent {
            Ok(Fate::Done(batch)) => self.spool.index.remove(&batch),
            Ok(Fate::Kept(batch)) => {
                self.stash(batch);
                self.retry_at = Instant::now() + self.backoff;
            }
            Err(e) => tracing::error!(error = %e, "a run report delivery failed"),
        }
    }

    /// Keeps a batch for later: in the spool, or in memory if the disk fails.
    fn stash(&mut self, batch: CallbackBatch) {
        let batch = if self.held.is_empty() {
            match off_the_runtime(|| self.spool.push(batch)) {
                Ok(()) => return,
                Err((e, batch)) => {
                    tracing::error!(error = %e, "cannot write run reports to the spool; keeping them in memory");
                    batch
                }
            }
        } else {
            // Behind the batches already held, to keep the order.
            batch
        };
        self.held.push_back(batch);
    }

    /// Sends the spool (then the held batches) in order until one fails.
    async fn replay(&mut self) {
        while let Some(batch) = self.spool.front() {
            let body = match serde_json::to_vec(batch) {
                Ok(body) => Bytes::from(body),
                Err(_) => {
                    self.spool.reject_front();
                    continue;
                }
            };
            match send(&self.client, &body).await {
                Sent::Delivered => self.spool.pop_front(),
                Sent::Refused => self.spool.reject_front(),
                Sent::Failed => return self.back_off(),
            }
        }
        while let Some(batch) = self.held.front() {
            let Ok(body) = serde_json::to_vec(batch) else {
                self.held.pop_front();
                continue;
            };
            match send(&self.client, &Bytes::from(body)).await {
                Sent::Delivered | Sent::Refused => {
                    if let Some(batch) = self.held.pop_front() {
                        self.spool.index.remove(&batch);
                    }
                }
                Sent::Failed => return self.back_off(),
            }
        }
        self.backoff = REPLAY_BACKOFF_MIN;
    }

    fn back_off(&mut self) {
        self.retry_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(REPLAY_BACKOFF_MAX);
    }
}

/// Runs `f`, which blocks (a write and an fsync), without holding up the async runtime's
/// other tasks: on a multi-thread runtime the thread hands them to another first (the
/// executor may have one async thread, `--async-threads`).
fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

async fn send(client: &SchedulerClient, body: &Bytes) -> Sent {
    match client.post_accepted(PATH_CALLBACK, body.clone()).await {
        Ok(()) => Sent::Delivered,
        Err(e) if e.is_refused_content() => {
            log_refused(&e);
            Sent::Refused
        }
        Err(e) => {
            tracing::warn!(error = %e, "no scheduler took the run reports; will retry");
            Sent::Failed
        }
    }
}

/// What became of a fresh batch.
enum Fate {
    /// A scheduler took it (or it could not be encoded: nothing more can be done).
    Done(CallbackBatch),
    /// No scheduler took it, or one refused it: it goes to the spool (a refused one is
    /// moved aside for an operator on replay).
    Kept(CallbackBatch),
}

/// Sends a fresh batch with a few retries.
async fn deliver(client: &SchedulerClient, batch: CallbackBatch, stop: &CancellationToken) -> Fate {
    let body = match serde_json::to_vec(&batch) {
        Ok(body) => Bytes::from(body),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode run reports");
            return Fate::Done(batch);
        }
    };
    let mut pauses = RETRIES.iter();
    loop {
        match send(client, &body).await {
            Sent::Delivered => return Fate::Done(batch),
            Sent::Refused => return Fate::Kept(batch),
            Sent::Failed => {}
        }
        match pauses.next() {
            Some(&pause) if !stop.is_cancelled() => tokio::time::sleep(pause).await,
            _ => return Fate::Kept(batch),
        }
    }
}

fn log_refused(e: &CallError) {
    tracing::error!(error = %e, "a scheduler refused a batch of run reports as malformed; it is kept in spool/rejected/");
}

#[cfg(test)]
mod tests {
    use super::*;
    use rota_proto::ReportStatus;
    use std::future::Future;

    fn report(run_id: i64, status: ReportStatus) -> RunReport {
        RunReport {
            run_id,
            job_id: 1,
            task_id: run_id,
            attempt: 1,
            shard_index: 0,
            shard_total: 1,
            executor: "http://127.0.0.1:1".into(),
            scheduled_at: 0,
            dispatched_at: None,
            started_at: Some(0),
            finished_at: status.is_final().then_some(1),
            status,
            exit_code: None,
            message: None,
            output: None,
            traceparent: None,
        }
    }

    #[test]
    fn a_short_run_is_reported_once_and_a_long_one_as_running_after_the_hold() {
        let mut postponed = Postponed::default();
        let mut batch = Batch::default();
        postponed.route(report(1, ReportStatus::Running), &mut batch);
        postponed.route(report(2, ReportStatus::Running), &mut batch);
        assert_eq!(batch.len(), 0, "running reports are held");
        postponed.route(report(1, ReportStatus::Succeeded), &mut batch);
        postponed.release(Some(Instant::now()), &mut batch);
        let sent: Vec<_> = batch.reports.iter().map(|r| (r.run_id, r.status)).collect();
        assert_eq!(sent, vec![(1, ReportStatus::Succeeded)]);

        let due = postponed.next_due().expect("run 2 is still held");
        assert!(due > Instant::now() && due <= Instant::now() + RUNNING_HOLD);
        let mut later = Batch::default();
        postponed.release(Some(due), &mut later);
        let sent: Vec<_> = later.reports.iter().map(|r| (r.run_id, r.status)).collect();
        assert_eq!(sent, vec![(2, ReportStatus::Running)]);
        assert_eq!(postponed.next_due(), None);
    }

    /// A report: its run, its status, and the `report_within_ms` of its trigger.
    type Sent = (i64, ReportStatus, Option<u64>);

    /// A report queued now, to be sent within `within_ms` if it is awaited.
    fn queued((run_id, status, within_ms): Sent) -> Queued {
        Queued {
            report: report(run_id, status),
            send_by: within_ms.map(|ms| Instant::now() + Duration::from_millis(ms)),
        }
    }

    /// `collect` from `first`, queued `first_waited_ms` before the reporter takes it, then
    /// `later`, each queued so many ms after: the runs in the batch it closed, and how long
    /// after it took `first` it closed it. (The channel stays open, as the node's does: the
    /// batch ends by its deadline; what comes after it stays in the channel.)
    async fn collected(
        first: Sent,
        first_waited_ms: u64,
        later: Vec<(u64, Sent)>,
    ) -> (Vec<i64>, Duration) {
        let (tx, mut rx) = report_channel(8);
        let first = queued(first);
        tokio::time::advance(Duration::from_millis(first_waited_ms)).await;
        let began = Instant::now();
        let sender = tx.clone();
        tokio::spawn(async move {
            for (after_ms, sent) in later {
                tokio::time::sleep_until(began + Duration::from_millis(after_ms)).await;
                let _ = sender.send(queued(sent)).await;
            }
        });
        let mut postponed = Postponed::default();
        let window = Duration::from_millis(100);
        let batch = collect(&mut rx, first, window, &mut postponed).await;
        let took = began.elapsed();
        drop(tx);
        let mut runs: Vec<i64> = batch.reports.iter().map(|r| r.run_id).collect();
        // What the batch left behind, for the next one.
        tokio::time::sleep(Duration::from_secs(1)).await;
        while let Ok(next) = rx.rx.try_recv() {
            runs.push(-next.report.run_id);
        }
        (runs, took)
    }

    #[tokio::test(start_paused = true)]
    async fn an_awaited_final_report_closes_its_batch_sooner_than_the_window() {
        use ReportStatus::{Running, Succeeded};
        let ms = Duration::from_millis;
        // Nothing awaited: the batch collects for the whole window.
        let plain = vec![(30, (2, Succeeded, None)), (90, (3, Succeeded, None))];
        let (runs, took) = collected((1, Succeeded, None), 0, plain).await;
        assert_eq!((runs, took), (vec![1, 2, 3], ms(100)));
        // An awaited final report queued 30 ms in closes it 10 ms later; the report after
        // it is left for the next batch (negative: still in the channel).
        let awaited = vec![(30, (2, Succeeded, Some(10))), (60, (3, Succeeded, None))];
        let (runs, took) = collected((1, Succeeded, None), 0, awaited).await;
        assert_eq!((runs, took), (vec![1, 2, -3], ms(40)));
        // Awaited and first: 10 ms; awaited and queued 8 ms before the reporter took it
        // (it was busy): 2 ms; queued longer ago than that: at once.
        let later = vec![(1, (2, Succeeded, None)), (50, (3, Succeeded, None))];
        let (runs, took) = collected((1, Succeeded, Some(10)), 0, later.clone()).await;
        assert_eq!((runs, took), (vec![1, 2, -3], ms(10)));
        let (runs, took) = collected((1, Succeeded, Some(10)), 8, later.clone()).await;
        assert_eq!((runs, took), (vec![1, 2, -3], ms(2)));
        let (runs, took) = collected((1, Succeeded, Some(10)), 30, later).await;
        assert_eq!((runs, took), (vec![1, -2, -3], ms(0)));
        // A `running` report of an awaited run is not what waits: the window stands.
        let (runs, took) = collected((1, Running, Some(10)), 0, vec![]).await;
        assert_eq!((runs.len(), took), (0, ms(100)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_closes_when_it_is_full_not_at_the_end_of_its_window() {
        use ReportStatus::Succeeded;
        let (tx, mut rx) = report_channel(2 * BATCH_MAX);
        let began = Instant::now();
        tokio::spawn(async move {
            // The reporter holds the first report and sleeps by then: these fill its batch.
            tokio::time::sleep(Duration::from_millis(10)).await;
            for run_id in 1..(BATCH_MAX as i64) {
                tx.send(queued((run_id, Succeeded, None))).await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        });
        let first = queued((0, Succeeded, None));
        let window = Duration::from_millis(100);
        let batch = collect(&mut rx, first, window, &mut Postponed::default()).await;
        assert_eq!(batch.len(), BATCH_MAX);
        assert_eq!(
            began.elapsed(),
            Duration::from_millis(10),
            "closed when full"
        );
    }

    /// Whether the reporter was poked since it last looked (takes the poke).
    fn poked(rx: &ReportReceiver) -> bool {
        let notified = std::pin::pin!(rx.close_early.notified());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        notified.poll(&mut cx).is_ready()
    }

    #[tokio::test]
    async fn only_a_report_that_closes_the_batch_sooner_wakes_the_collecting_reporter() {
        use ReportStatus::{Running, Succeeded};
        let (tx, rx) = report_channel(2 * BATCH_MAX);
        // Plain reports, and the `running` report of an awaited run: no wake-up each.
        for run_id in 1..=10 {
            tx.send(queued((run_id, Succeeded, None))).await.unwrap();
        }
        tx.send(queued((11, Running, Some(10)))).await.unwrap();
        assert!(
            !poked(&rx),
            "a report that changes nothing woke the reporter"
        );
        // An awaited final report does.
        tx.send(queued((11, Succeeded, Some(10)))).await.unwrap();
        assert!(poked(&rx));
        assert!(!poked(&rx), "one poke, taken once");
        // So does a full batch waiting, from a worker thread too.
        let sender = tx.clone();
        tokio::task::spawn_blocking(move || {
            // 12 reports are in the channel: up to one short of a batch.
            for run_id in 12..(BATCH_MAX as i64 - 1) {
                sender
                    .blocking_send(queued((run_id, Succeeded, None)))
                    .unwrap();
            }
        })
        .await
        .unwrap();
        assert!(!poked(&rx), "{} waiting is not yet a batch", BATCH_MAX - 1);
        tx.send(queued((0, Succeeded, None))).await.unwrap();
        assert!(poked(&rx));
    }

    #[test]
    fn shutdown_releases_every_held_report() {
        let mut postponed = Postponed::default();
        let mut batch = Batch::default();
        for run_id in 1..=3 {
            postponed.route(report(run_id, ReportStatus::Running), &mut batch);
        }
        postponed.release(None, &mut batch);
        assert_eq!(batch.len(), 3);
    }

    fn listed(unacked: &Unacked) -> Vec<i64> {
        let mut ids = unacked.run_ids();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn a_run_is_listed_from_its_final_report_until_a_scheduler_takes_it() {
        let dir = tempfile::tempdir().unwrap();
        let unacked = Unacked::default();
        let mut spool = Spool::open(dir.path(), unacked.clone()).unwrap();

        unacked.add_report(&report(1, ReportStatus::Running));
        assert!(
            listed(&unacked).is_empty(),
            "a running run is in the registry, not here"
        );
        for run_id in [1, 2] {
            unacked.add_report(&report(run_id, ReportStatus::Succeeded));
        }
        assert_eq!(listed(&unacked), vec![1, 2]);

        // Run 2's batch is delivered at once; run 1's goes to the spool and stays listed,
        // also for the next process that opens the spool.
        unacked.remove(&CallbackBatch {
            reports: vec![report(2, ReportStatus::Succeeded)],
        });
        let kept = CallbackBatch {
            reports: vec![
                report(1, ReportStatus::Running),
                report(1, ReportStatus::Failed),
            ],
        };
        spool.push(kept).unwrap();
        assert_eq!(listed(&unacked), vec![1]);
        let after_restart = Unacked::default();
        let _reopened = Spool::open(dir.path(), after_restart.clone()).unwrap();
        assert_eq!(listed(&after_restart), vec![1]);

        spool.pop_front();
        assert!(listed(&unacked).is_empty());
    }
}

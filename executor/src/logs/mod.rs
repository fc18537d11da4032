//! Per-run logs: what a plugin writes to stdout and stderr, line by line.
//!
//! [`LogStore`] owns `<data_dir>/logs/`. The lines of all runs go to a few append-only
//! *segment* files, `<seq>.seg`, rather than one file per run: creating a file per run
//! (ext4 inode allocation) took 61 % of the executor's CPU under load, and left 100,000
//! files behind after 100,000 runs. No file is created, opened or deleted per run; a
//! segment is created when the previous one is full and deleted whole by retention.
//!
//! # Records
//!
//! A segment is a sequence of records, each some complete lines of one run:
//! `[0xB7][run_id: i64 LE][lines: u32 LE][len: u32 LE][len bytes, each line ending in
//! '\n'][CRC-32 of all before: u32 LE]`. The checksum is what lets a restart tell a
//! complete record from one a kill cut short.
//!
//! # Writing
//!
//! [`RunLog`] is one run's writer. It splits each stream into lines (stdout and stderr
//! keep separate partial lines so they never mix inside a line) and enforces the cap:
//! the line that would cross it is replaced by `[rota] log truncated at 1 MiB` and
//! everything after is dropped. Completed lines gather in the run's memory until about
//! 8 KiB, a second, a read of that run, or the end of the run; then they become one
//! record in the store's shared buffer, which reaches the OS (one `write`) at 64 KiB,
//! after a second, before a read, or at [`LogStore::flush`]. The executor flushes before
//! each batch of reports leaves, so every run it reports has its lines with the OS, and
//! a killed process loses nothing the OS already has (there is no fsync: a power cut may
//! lose what the OS had not yet put on disk) — at one `write` per report batch rather
//! than one per run. The buffer is written without holding the lock appenders take, so
//! runs finishing together share one `write` (group commit).
//!
//! # Index
//!
//! The *active* segment (the one being appended to) is indexed in memory: per record
//! 24 bytes plus a hash map slot per run. It is sealed (and a new one started on the
//! next line) at `segment_bytes` or 262,144 records, which bounds that memory (≈ 15 MB
//! at most), or when older than an eighth of the retention, so age retention can apply.
//! Sealing writes `<seq>.idx`: 20 bytes per record, sorted by run, binary-searched on
//! read. Of a sealed segment only its run-id range and sizes stay in memory (~100 bytes
//! per segment), so memory does not grow with the runs retained.
//!
//! [`LogStore::read`] first pushes the run's gathered lines to the file, so a live tail
//! sees every complete line, and serves any line range.
//!
//! # A full disk
//!
//! Lines whose write fails (no space, an I/O error) are dropped, the file is cut back to
//! its last whole record, and the loss is remembered by run ([`LogStore::loss`]): the
//! run's log ends with `[rota] N lines of this run's log were dropped: writing them
//! failed: No space left on device (os error 28)`, and its final report's message says
//! the same. Writing resumes by itself once there is room.
//!
//! # Crash safety
//!
//! On open, a segment without a valid index (the one active when the process died, or
//! one killed while being sealed) is scanned, cut at the first torn or corrupt record,
//! and sealed; a new active segment follows. Other segments, and their runs, are not
//! touched. A run cut short by the kill keeps the lines written before it: all but
//! those gathered in memory in its last second (or since it went quiet).
//!
//! # Retention
//!
//! Whole segments, never per run: [`LogStore::sweep`] deletes segments whose newest
//! record is older than the retention, and the oldest segments while the directory is
//! over `max_total_bytes` (also checked each time a segment is sealed, so a busy node
//! stays bounded between sweeps). A segment holding lines of a run still being written
//! is never deleted.
//!
//! Files of the one-file-per-run layout (`<run_id>.log`) are still read and swept, so
//! an upgraded node keeps showing older runs until their retention ends.
//!
//! A `RunLog` can also keep its lines in memory (`rota plugin run`) or discard them
//! (benchmarks).

mod losses;
mod run_log;
mod segment;
#[cfg(test)]
mod tests;
mod writer;

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use rota_proto::LogPage;

pub use losses::Loss;
use losses::Losses;
use run_log::*;
pub use run_log::{RunLog, Stream};
use segment::*;
use writer::*;

/// Default cap on one run's log.
pub const DEFAULT_LOG_CAP_BYTES: u64 = 1 << 20;
/// Default time a run's log is kept after it was last written.
pub const DEFAULT_LOG_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Default bound on the whole log directory: 1,000 runs at the full cap, or millions of
/// short ones.
pub const DEFAULT_LOG_MAX_TOTAL_BYTES: u64 = 1 << 30;
/// Default size at which a segment is sealed: large enough that segment files are
/// created rarely, small enough that retention by size deletes in fine steps.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
/// A longer line without a newline is cut into pieces of this size, so one endless line
/// cannot hold unbounded memory while the run is live.
pub const MAX_LINE_BYTES: usize = 16 * 1024;
/// Most lines one [`LogStore::read`] returns, whatever the caller asks for.
pub const MAX_PAGE_LINES: u32 = 10_000;
/// Prefix of the lines the executor itself adds to a run's log.
pub const NOTE_PREFIX: &str = "[rota] ";

/// What a [`LogStore`] keeps, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    /// Cap on one run's log.
    pub cap_bytes: u64,
    /// A segment whose newest record is older than this is deleted.
    pub retention: Duration,
    /// The oldest segments are deleted while the directory holds more than this. The
    /// active segment and those with lines of live runs count but are kept.
    pub max_total_bytes: u64,
    /// A segment is sealed, and the next one started, at this size (at most 2 GiB).
    pub segment_bytes: u64,
}

impl Default for LogLimits {
    fn default() -> Self {
        Self {
            cap_bytes: DEFAULT_LOG_CAP_BYTES,
            retention: DEFAULT_LOG_RETENTION,
            max_total_bytes: DEFAULT_LOG_MAX_TOTAL_BYTES,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
        }
    }
}

impl LogLimits {
    /// Age at which the active segment is sealed even if not full: a segment is only
    /// deleted whole, so one appended to forever would never age out.
    fn seal_after(&self) -> Duration {
        (self.retention / 8).clamp(Duration::from_secs(60), Duration::from_secs(24 * 3600))
    }
}

/// The run logs of one executor.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<StoreInner>,
}

impl fmt::Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore")
            .field("dir", &self.inner.dir)
            .field("limits", &self.inner.limits)
            .finish()
    }
}

impl LogStore {
    /// Opens (creating if needed) the log directory `dir`, with the default total bound
    /// and segment size.
    pub fn open(dir: impl Into<PathBuf>, cap_bytes: u64, retention: Duration) -> io::Result<Self> {
        Self::open_with(
            dir,
            LogLimits {
                cap_bytes,
                retention,
                ..LogLimits::default()
            },
        )
    }

    /// Opens (creating if needed) the log directory `dir`: indexes the segments left by
    /// the last process, cutting a torn tail, and applies the total bound.
    pub fn open_with(dir: impl Into<PathBuf>, limits: LogLimits) -> io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        let limits = LogLimits {
            segment_bytes: limits.segment_bytes.clamp(1, MAX_SEGMENT_BYTES),
            ..limits
        };
        let mut segments = Vec::new();
        let mut indexes = Vec::new();
        let mut legacy = false;
        for entry in fs::read_dir(&dir)? {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(seq) = parse_seq(name, ".seg") {
                segments.push(seq);
            } else if let Some(seq) = parse_seq(name, ".idx") {
                indexes.push(seq);
            } else if legacy_run_id(name).is_some() {
                legacy = true;
            }
        }
        segments.sort_unstable();
        for seq in indexes {
            if segments.binary_search(&seq).is_err() {
                remove_if_present(&index_path(&dir, seq))?;
            }
        }
        let next_seq = segments.last().map_or(1, |last| last + 1);
        let mut writer = Writer::new(dir.clone(), limits, next_seq, legacy);
        for seq in segments {
            match recover_segment(&dir, seq) {
                Ok(Some(meta)) => writer.insert_sealed(meta),
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    segment = %segment_path(&dir, seq).display(),
                    error = %e,
                    "a run log segment cannot be read; its runs' logs are not shown"
                ),
            }
        }
        writer.enforce_size();
        let doomed = std::mem::take(&mut writer.doomed);
        let store = Self {
            inner: Arc::new(StoreInner {
                dir,
                limits,
                next_key: AtomicU64::new(0),
                io: Mutex::new(()),
                writer: Mutex::new(writer),
            }),
        };
        store.inner.delete(doomed)?;
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn cap_bytes(&self) -> u64 {
        self.inner.limits.cap_bytes
    }

    pub fn limits(&self) -> LogLimits {
        self.inner.limits
    }

    /// The writer for a run's log. Nothing touches the disk before the first line.
    pub fn create(&self, run_id: i64) -> RunLog {
        let store = self.inner.clone();
        let key = store.next_key.fetch_add(1, Ordering::Relaxed);
        let cap = store.limits.cap_bytes;
        RunLog {
            inner: Arc::new_cyclic(|me| {
                Mutex::new(LogState::new(
                    Sink::Store(StoreSink {
                        store,
                        me: me.clone(),
                        run_id,
                        key,
                        live: false,
                        last: None,
                    }),
                    cap,
                ))
            }),
        }
    }

    /// Hands every line of every finished run to the OS (one `write` for all of them):
    /// call it before reporting those runs, so that a report never vouches for lines a
    /// SIGKILL of the executor could still lose. Lines also reach the OS when the shared
    /// buffer fills (64 KiB), a second after they were queued, and before any read.
    pub fn flush(&self) {
        self.inner.flush();
    }

    /// Up to `max_lines` lines (at most [`MAX_PAGE_LINES`]) of a run's log, from the
    /// 1-based `from_line` (0 reads as 1). `live` says whether the run may still write:
    /// the page is `complete` only when it is not and no line is left. A run that wrote
    /// nothing has no lines.
    pub fn read(
        &self,
        run_id: i64,
        from_line: u64,
        max_lines: u32,
        live: bool,
    ) -> io::Result<LogPage> {
        let from_line = from_line.max(1);
        let max_lines = max_lines.min(MAX_PAGE_LINES) as usize;
        let (records, legacy) = self.records(run_id)?;
        if records.is_empty() && legacy {
            return self.read_legacy(run_id, from_line, max_lines, live);
        }
        let total: u64 = records.iter().map(|r| u64::from(r.lines)).sum();
        let skip = from_line - 1;
        let mut lines = Vec::new();
        let mut before = 0u64;
        let mut file: Option<(u64, File)> = None;
        let mut buf = Vec::new();
        for rec in &records {
            if lines.len() >= max_lines {
                break;
            }
            let count = u64::from(rec.lines);
            if before + count <= skip {
                before += count;
                continue;
            }
            if file.as_ref().is_none_or(|(seq, _)| *seq != rec.seq) {
                file = match File::open(segment_path(&self.inner.dir, rec.seq)) {
                    Ok(f) => Some((rec.seq, f)),
                    // Deleted by retention since the records were listed.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                    Err(e) => return Err(e),
                };
            }
            let Some((_, f)) = file.as_mut() else {
                before += count;
                continue;
            };
            let payload = read_record(f, rec, run_id, &mut buf)?;
            let payload = payload.strip_suffix(b"\n").unwrap_or(payload);
            for (i, line) in payload.split(|&b| b == b'\n').enumerate() {
                if before + i as u64 >= skip && lines.len() < max_lines {
                    lines.push(String::from_utf8_lossy(line).into_owned());
                }
            }
            before += count;
        }
        // Lines the disk refused end the log with a note saying so (the note is the line
        // after the last one stored), so it never reads as complete without them.
        let loss = self.loss(run_id);
        let total = total + u64::from(loss.is_some());
        if let Some(loss) = loss
            && lines.len() < max_lines
            && from_line + lines.len() as u64 == total
        {
            lines.push(format!("{NOTE_PREFIX}{loss}"));
        }
        let next_line = from_line + lines.len() as u64;
        Ok(LogPage {
            complete: !live && next_line > total,
            lines,
            next_line,
        })
    }

    /// The lines of a run that could not be written, and why; `None` if it lost none
    /// (or lost them too long ago to remember: see [`losses::MAX_RUNS`]).
    pub fn loss(&self, run_id: i64) -> Option<Loss> {
        self.inner.writer().losses.get(run_id)
    }

    /// Bytes of a run's lines on disk (newlines included; 0 for a run that wrote
    /// nothing): what the cap bounds.
    pub fn stored_bytes(&self, run_id: i64) -> io::Result<u64> {
        let (records, legacy) = self.records(run_id)?;
        if records.is_empty() && legacy {
            return match fs::metadata(legacy_path(&self.inner.dir, run_id)) {
                Ok(m) => Ok(m.len()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
                Err(e) => Err(e),
            };
        }
        Ok(records.iter().map(|r| u64::from(r.len)).sum())
    }

    /// Deletes the segments whose newest record is older than the retention period, then
    /// the oldest while over the total bound; returns how many runs' logs went with them
    /// (a run spread over two segments counts twice).
    pub fn sweep(&self) -> io::Result<usize> {
        let cutoff = SystemTime::now()
            .checked_sub(self.inner.limits.retention)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        self.sweep_older_than(cutoff)
    }

    /// [`LogStore::sweep`] with the age limit at `cutoff`: deletes the segments whose
    /// newest record is older (the active one too, sealing it, unless a live run writes
    /// there), then the oldest while over the total bound. Segments with lines of a live
    /// run are kept.
    pub fn sweep_older_than(&self, cutoff: SystemTime) -> io::Result<usize> {
        let (removed, doomed, legacy) = {
            let _io = self.inner.io();
            let mut w = self.inner.writer();
            let pinned = w.pinned();
            let mut removed = 0;
            if let Some(active) = &w.active
                && !active.entries.is_empty()
            {
                let idle = active.newest < cutoff && pinned.binary_search(&active.seq).is_err();
                if idle || active.opened.elapsed() >= self.inner.limits.seal_after() {
                    removed += w.seal();
                }
            }
            let old: Vec<u64> = w
                .sealed
                .values()
                .filter(|m| m.newest < cutoff && pinned.binary_search(&m.seq).is_err())
                .map(|m| m.seq)
                .collect();
            for seq in old {
                removed += w.release(seq);
            }
            removed += w.enforce_size();
            (removed, std::mem::take(&mut w.doomed), w.legacy)
        };
        self.inner.delete(doomed)?;
        let mut removed = usize::try_from(removed).unwrap_or(usize::MAX);
        if legacy {
            let (legacy_removed, left) = self.sweep_legacy(cutoff)?;
            removed += legacy_removed;
            if !left {
                self.inner.writer().legacy = false;
            }
        }
        Ok(removed)
    }

    /// Where a run's records are, oldest first, once its gathered lines are written; and
    /// whether files of the one-file-per-run layout may hold it instead.
    fn records(&self, run_id: i64) -> io::Result<(Vec<Rec>, bool)> {
        self.inner.push_pending(run_id);
        let (sealed, active, legacy) = {
            let _io = self.inner.io();
            let mut w = self.inner.writer();
            w.flush_now();
            let sealed: Vec<SegMeta> = w
                .sealed
                .values()
                .filter(|m| (m.min_run..=m.max_run).contains(&run_id))
                .cloned()
                .collect();
            let active = w
                .active
                .as_ref()
                .map(|a| a.records(run_id))
                .unwrap_or_default();
            (sealed, active, w.legacy)
        };
        let mut records = Vec::new();
        for meta in &sealed {
            records.extend(sealed_records(&self.inner.dir, meta, run_id)?);
        }
        records.extend(active);
        Ok((records, legacy))
    }

    /// A page of a `<run_id>.log` file of the one-file-per-run layout.
    fn read_legacy(
        &self,
        run_id: i64,
        from_line: u64,
        max_lines: usize,
        live: bool,
    ) -> io::Result<LogPage> {
        let mut text = Vec::new();
        match File::open(legacy_path(&self.inner.dir, run_id)) {
            Ok(file) => {
                let limit = self.inner.limits.cap_bytes + 4 * MAX_LINE_BYTES as u64;
                file.take(limit).read_to_end(&mut text)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let all = text
            .iter()
            .rposition(|&b| b == b'\n')
            .map(|last| text[..last].split(|&b| b == b'\n'))
            .into_iter()
            .flatten();
        let skip = usize::try_from(from_line - 1).unwrap_or(usize::MAX);
        let mut total = 0usize;
        let mut lines = Vec::new();
        for (i, line) in all.enumerate() {
            total = i + 1;
            if i >= skip && lines.len() < max_lines {
                lines.push(String::from_utf8_lossy(line).into_owned());
            }
        }
        let next_line = from_line + lines.len() as u64;
        Ok(LogPage {
            complete: !live && next_line > total as u64,
            lines,
            next_line,
        })
    }

    /// Deletes `<run_id>.log` files last written before `cutoff`; returns how many, and
    /// whether any are left.
    fn sweep_legacy(&self, cutoff: SystemTime) -> io::Result<(usize, bool)> {
        let mut removed = 0;
        let mut left = false;
        for entry in fs::read_dir(&self.inner.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_str().and_then(legacy_run_id).is_none() {
                continue;
            }
            let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
                left = true;
                continue;
            };
            if modified < cutoff {
                match fs::remove_file(entry.path()) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            } else {
                left = true;
            }
        }
        Ok((removed, left))
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock leaves at worst a half-split line or a record the
    // next write or open cuts.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

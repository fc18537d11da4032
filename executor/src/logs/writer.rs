//! The shared side of writing: the active segment, its buffer and in-memory index, the
//! sealed segments, the live runs, group commit and retention.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

use super::*;

/// A run's completed lines become a record at this size: fewer, larger records keep the
/// per-record overhead (21 bytes on disk, 20 in the index) small for chatty runs.
pub(super) const RECORD_BYTES: usize = 8 * 1024;
/// The shared buffer is written out at this size.
pub(super) const BUFFER_BYTES: usize = 64 * 1024;
/// Lines wait in memory at most this long once another line of theirs comes along (a
/// quiet run's lines wait until it is read or finishes).
pub(super) const WRITE_DELAY: Duration = Duration::from_secs(1);
/// Most records in the active segment: bounds its in-memory index.
pub(super) const SEGMENT_MAX_RECORDS: usize = 1 << 18;
/// Largest `segment_bytes`: record offsets are 32-bit.
pub(super) const MAX_SEGMENT_BYTES: u64 = 1 << 31;

pub(super) struct StoreInner {
    pub(super) dir: PathBuf,
    pub(super) limits: LogLimits,
    /// Tells apart the [`RunLog`]s of one store (two logs may share a run id).
    pub(super) next_key: AtomicU64,
    /// Held while bytes go to the active segment, and (taken before `writer`) while a
    /// segment is sealed. Writing does not hold `writer`, so runs keep appending to the
    /// buffer meanwhile, and the next write takes all of it.
    pub(super) io: Mutex<()>,
    pub(super) writer: Mutex<Writer>,
}

impl StoreInner {
    pub(super) fn writer(&self) -> MutexGuard<'_, Writer> {
        lock(&self.writer)
    }

    pub(super) fn io(&self) -> MutexGuard<'_, ()> {
        lock(&self.io)
    }

    /// Queues one record (sealing the active segment first if it is full); writes the
    /// buffer if it is due. `None` if no segment could be created.
    pub(super) fn append(
        &self,
        key: u64,
        run_id: i64,
        me: &Weak<Mutex<LogState>>,
        lines: u32,
        payload: &[u8],
    ) -> Option<Pos> {
        let len = (RECORD_OVERHEAD + payload.len()) as u64;
        let (pos, due) = loop {
            let mut w = self.writer();
            if w.must_seal(len) {
                drop(w);
                self.seal_full(len);
                continue;
            }
            break w.append(key, run_id, me, lines, payload)?;
        };
        if due {
            self.flush_upto(pos);
        }
        Some(pos)
    }

    /// Seals the active segment if it is (still) full, and applies the total bound.
    pub(super) fn seal_full(&self, len: u64) {
        let doomed = {
            let _io = self.io();
            let mut w = self.writer();
            if w.must_seal(len) {
                w.seal();
            }
            std::mem::take(&mut w.doomed)
        };
        if let Err(e) = self.delete(doomed) {
            tracing::warn!(error = %e, "deleting run log segments over the size bound failed");
        }
    }

    /// Returns once the bytes up to `pos` were handed to the OS. The buffer is written
    /// with only `io` held, so others keep appending meanwhile; whoever gets `io` next
    /// writes all they appended (group commit), and the rest find their bytes written.
    pub(super) fn flush_upto(&self, pos: Pos) {
        let _io = self.io();
        let mut w = self.writer();
        if w.is_written(pos) {
            return;
        }
        let Some((file, batch)) = w.take_batch() else {
            return;
        };
        drop(w);
        let result = (&*file).write_all(&batch);
        self.writer().batch_written(batch, result);
    }

    /// Hands everything appended so far to the OS (one `write`, if anything waits).
    pub(super) fn flush(&self) {
        let _io = self.io();
        let mut w = self.writer();
        let Some((file, batch)) = w.take_batch() else {
            return;
        };
        drop(w);
        let result = (&*file).write_all(&batch);
        self.writer().batch_written(batch, result);
    }

    /// Turns the gathered lines of `run_id`'s live logs into records.
    pub(super) fn push_pending(&self, run_id: i64) {
        let states: Vec<Arc<Mutex<LogState>>> = {
            let w = self.writer();
            w.live
                .values()
                .filter(|l| l.run_id == run_id)
                .filter_map(|l| l.state.upgrade())
                .collect()
        };
        // Outside the writer's lock: a run's lock is always taken before it, and if
        // this is the last handle, dropping it finishes the log (which takes it).
        for state in &states {
            lock(state).flush_pending(true);
        }
    }

    /// Deletes the files of segments already dropped from the index.
    pub(super) fn delete(&self, doomed: Vec<u64>) -> io::Result<()> {
        let mut result = Ok(());
        for seq in doomed {
            for path in [segment_path(&self.dir, seq), index_path(&self.dir, seq)] {
                if let Err(e) = remove_if_present(&path) {
                    tracing::warn!(path = %path.display(), error = %e, "deleting a run log segment failed");
                    result = Err(e);
                }
            }
        }
        result
    }
}

impl Drop for StoreInner {
    fn drop(&mut self) {
        // Sealed now, the segment need not be scanned on the next open.
        let w = self.writer.get_mut().unwrap_or_else(|e| e.into_inner());
        w.seal();
        let doomed = std::mem::take(&mut w.doomed);
        let _ = self.delete(doomed);
    }
}

/// Where a record ends: the bytes up to `end` of segment `seq`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pos {
    pub(super) seq: u64,
    pub(super) end: u64,
}

/// A run between its first line and [`RunLog::finish`].
pub(super) struct LiveRun {
    pub(super) run_id: i64,
    /// For [`LogStore::read`] to push its gathered lines out.
    pub(super) state: Weak<Mutex<LogState>>,
    /// The segments it has records in: retention keeps them.
    pub(super) segments: Vec<u64>,
}

/// The shared side of writing: the active segment, its buffer and index, the sealed
/// segments and the live runs.
pub(super) struct Writer {
    pub(super) dir: PathBuf,
    pub(super) limits: LogLimits,
    pub(super) max_records: usize,
    pub(super) next_seq: u64,
    /// Created on the first record after the previous one was sealed.
    pub(super) active: Option<Active>,
    /// Records of the active segment not yet given to `write`.
    pub(super) buf: Vec<u8>,
    /// The buffer's allocation, back from the last write.
    pub(super) spare: Vec<u8>,
    /// When the oldest record in `buf` was queued.
    pub(super) buf_since: Option<Instant>,
    pub(super) sealed: BTreeMap<u64, SegMeta>,
    pub(super) sealed_bytes: u64,
    pub(super) live: HashMap<u64, LiveRun>,
    /// Whether `<run_id>.log` files of the old layout may be present.
    pub(super) legacy: bool,
    /// Segments dropped from the index whose files are still to be deleted, outside the
    /// locks.
    pub(super) doomed: Vec<u64>,
    /// Lines that could not be written, by run.
    pub(super) losses: Losses,
}

/// The segment being appended to.
pub(super) struct Active {
    pub(super) seq: u64,
    pub(super) file: Arc<File>,
    /// Bytes handed to the OS.
    pub(super) written: u64,
    /// Bytes written or queued: the next record's offset.
    pub(super) end: u64,
    /// Every record, in offset order.
    pub(super) entries: Vec<Entry>,
    /// Each run's first and last record in `entries`.
    pub(super) runs: HashMap<i64, (u32, u32)>,
    pub(super) opened: Instant,
    /// When bytes were last written.
    pub(super) newest: SystemTime,
    /// A write failed and the file could not be reset: seal it at the next record.
    pub(super) broken: bool,
}

/// A record in the active segment; 24 bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub(super) run_id: i64,
    pub(super) offset: u32,
    pub(super) len: u32,
    pub(super) lines: u32,
    /// The run's next record in `entries`, or [`NO_ENTRY`].
    pub(super) next: u32,
}

pub(super) const NO_ENTRY: u32 = u32::MAX;

impl Active {
    pub(super) fn push(&mut self, run_id: i64, offset: u32, len: u32, lines: u32) {
        let idx = self.entries.len() as u32;
        self.entries.push(Entry {
            run_id,
            offset,
            len,
            lines,
            next: NO_ENTRY,
        });
        match self.runs.get_mut(&run_id) {
            Some((_, last)) => {
                self.entries[*last as usize].next = idx;
                *last = idx;
            }
            None => {
                self.runs.insert(run_id, (idx, idx));
            }
        }
    }

    /// The run's records the OS has.
    pub(super) fn records(&self, run_id: i64) -> Vec<Rec> {
        let mut out = Vec::new();
        let mut at = self.runs.get(&run_id).map_or(NO_ENTRY, |&(first, _)| first);
        while let Some(e) = self.entries.get(at as usize) {
            if u64::from(e.offset) + (RECORD_OVERHEAD as u64) + u64::from(e.len) > self.written {
                break;
            }
            out.push(Rec {
                seq: self.seq,
                offset: e.offset,
                len: e.len,
                lines: e.lines,
            });
            at = e.next;
        }
        out
    }

    /// Forgets the records past `written` (their write failed).
    pub(super) fn drop_unwritten(&mut self) {
        let keep = self
            .entries
            .partition_point(|e| u64::from(e.offset) < self.written);
        self.entries.truncate(keep);
        self.end = self.written;
        self.runs.clear();
        for i in 0..self.entries.len() {
            self.entries[i].next = NO_ENTRY;
            let run_id = self.entries[i].run_id;
            match self.runs.get_mut(&run_id) {
                Some((_, last)) => {
                    self.entries[*last as usize].next = i as u32;
                    *last = i as u32;
                }
                None => {
                    self.runs.insert(run_id, (i as u32, i as u32));
                }
            }
        }
    }
}

impl Writer {
    pub(super) fn new(dir: PathBuf, limits: LogLimits, next_seq: u64, legacy: bool) -> Self {
        Self {
            dir,
            limits,
            max_records: SEGMENT_MAX_RECORDS,
            next_seq,
            active: None,
            buf: Vec::new(),
            spare: Vec::new(),
            buf_since: None,
            sealed: BTreeMap::new(),
            sealed_bytes: 0,
            live: HashMap::new(),
            legacy,
            doomed: Vec::new(),
            losses: Losses::default(),
        }
    }

    pub(super) fn total_bytes(&self) -> u64 {
        self.sealed_bytes + self.active.as_ref().map_or(0, |a| a.end)
    }

    /// Whether the active segment must be sealed before a record of `len` bytes.
    pub(super) fn must_seal(&self, len: u64) -> bool {
        self.active.as_ref().is_some_and(|a| {
            a.broken
                || !a.entries.is_empty()
                    && (a.end + len > self.limits.segment_bytes
                        || a.entries.len() >= self.max_records
                        || a.opened.elapsed() >= self.limits.seal_after())
        })
    }

    pub(super) fn register(
        &mut self,
        key: u64,
        run_id: i64,
        me: &Weak<Mutex<LogState>>,
    ) -> &mut LiveRun {
        self.live.entry(key).or_insert_with(|| LiveRun {
            run_id,
            state: me.clone(),
            segments: Vec::new(),
        })
    }

    /// Queues a record; returns where it ends and whether the buffer is due for writing.
    pub(super) fn append(
        &mut self,
        key: u64,
        run_id: i64,
        me: &Weak<Mutex<LogState>>,
        lines: u32,
        payload: &[u8],
    ) -> Option<(Pos, bool)> {
        if self.active.is_none() {
            match self.start_segment() {
                Ok(active) => self.active = Some(active),
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "creating a run log segment failed; dropping log lines");
                    self.losses.add(run_id, u64::from(lines), &e);
                    return None;
                }
            }
        }
        let active = self.active.as_mut()?;
        let offset = u32::try_from(active.end).ok()?;
        let len = u32::try_from(payload.len()).ok()?;
        encode_record(&mut self.buf, run_id, lines, payload);
        active.end += (RECORD_OVERHEAD + payload.len()) as u64;
        active.push(run_id, offset, len, lines);
        let pos = Pos {
            seq: active.seq,
            end: active.end,
        };
        let live = self.register(key, run_id, me);
        if live.segments.last() != Some(&pos.seq) {
            live.segments.push(pos.seq);
        }
        let since = *self.buf_since.get_or_insert_with(Instant::now);
        let due = self.buf.len() >= BUFFER_BYTES || since.elapsed() >= WRITE_DELAY;
        Some((pos, due))
    }

    pub(super) fn start_segment(&mut self) -> io::Result<Active> {
        loop {
            let seq = self.next_seq;
            self.next_seq += 1;
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(segment_path(&self.dir, seq))
            {
                Ok(file) => {
                    return Ok(Active {
                        seq,
                        file: Arc::new(file),
                        written: 0,
                        end: 0,
                        entries: Vec::new(),
                        runs: HashMap::new(),
                        opened: Instant::now(),
                        newest: SystemTime::now(),
                        broken: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
    }

    pub(super) fn is_written(&self, pos: Pos) -> bool {
        match &self.active {
            Some(a) if a.seq == pos.seq => pos.end <= a.written,
            // Sealed segments were written in full (or lost what failed).
            _ => true,
        }
    }

    /// Takes the buffer for writing; the caller holds `io` until [`Writer::batch_written`].
    pub(super) fn take_batch(&mut self) -> Option<(Arc<File>, Vec<u8>)> {
        if self.buf.is_empty() {
            return None;
        }
        let Some(active) = &self.active else {
            self.buf.clear();
            return None;
        };
        let batch = std::mem::replace(&mut self.buf, std::mem::take(&mut self.spare));
        self.buf_since = None;
        Some((active.file.clone(), batch))
    }

    pub(super) fn batch_written(&mut self, mut batch: Vec<u8>, result: io::Result<()>) {
        match result {
            Ok(()) => {
                if let Some(active) = &mut self.active {
                    active.written += batch.len() as u64;
                    active.newest = SystemTime::now();
                }
            }
            Err(e) => self.write_failed(&e),
        }
        batch.clear();
        if batch.capacity() <= 4 * BUFFER_BYTES {
            self.spare = batch;
        }
    }

    /// Writes the buffer while holding this lock; the caller holds `io`.
    pub(super) fn flush_now(&mut self) {
        if let Some((file, batch)) = self.take_batch() {
            let result = (&*file).write_all(&batch);
            self.batch_written(batch, result);
        }
    }

    /// Drops what was not written (the runs lose those lines, as a full disk loses
    /// them), and puts the file back at its last good length so the next write follows
    /// whole records.
    pub(super) fn write_failed(&mut self, error: &io::Error) {
        self.buf.clear();
        self.buf_since = None;
        let Some(active) = &mut self.active else {
            return;
        };
        let lost = active.end - active.written;
        let written = active.written;
        for e in active
            .entries
            .iter()
            .filter(|e| u64::from(e.offset) >= written)
        {
            self.losses.add(e.run_id, u64::from(e.lines), error);
        }
        active.drop_unwritten();
        let reset = active
            .file
            .set_len(active.written)
            .and_then(|()| (&*active.file).seek(SeekFrom::Start(active.written)));
        if reset.is_err() {
            active.broken = true;
        }
        tracing::warn!(
            segment = %segment_path(&self.dir, active.seq).display(),
            error = %error,
            lost_bytes = lost,
            "writing run logs failed; dropping those lines"
        );
    }

    /// Writes what is buffered, indexes the active segment and applies the total bound;
    /// the caller holds `io`. Returns how many runs' logs the bound deleted.
    pub(super) fn seal(&mut self) -> u64 {
        self.flush_now();
        let Some(active) = self.active.take() else {
            return 0;
        };
        if active.entries.is_empty() {
            drop(active.file);
            let _ = remove_if_present(&segment_path(&self.dir, active.seq));
            return 0;
        }
        let entries = active
            .entries
            .iter()
            .map(|e| IndexEntry {
                run_id: e.run_id,
                offset: e.offset,
                len: e.len,
                lines: e.lines,
            })
            .collect();
        let meta = write_index(
            &self.dir,
            active.seq,
            entries,
            active.written,
            active.newest,
        );
        self.insert_sealed(meta);
        self.enforce_size()
    }

    pub(super) fn insert_sealed(&mut self, meta: SegMeta) {
        self.sealed_bytes += meta.data_len + meta.index_len;
        self.sealed.insert(meta.seq, meta);
    }

    /// Drops a sealed segment from the index (its files are deleted after the locks are
    /// released); returns how many runs it had.
    pub(super) fn release(&mut self, seq: u64) -> u64 {
        let Some(meta) = self.sealed.remove(&seq) else {
            return 0;
        };
        self.sealed_bytes -= meta.data_len + meta.index_len;
        self.doomed.push(seq);
        meta.runs
    }

    /// The segments live runs have records in, sorted.
    pub(super) fn pinned(&self) -> Vec<u64> {
        let mut pinned: Vec<u64> = self
            .live
            .values()
            .flat_map(|l| l.segments.iter().copied())
            .collect();
        pinned.sort_unstable();
        pinned.dedup();
        pinned
    }

    /// Drops the oldest sealed segments not holding lines of live runs while the total
    /// is over the bound; returns how many runs' logs went.
    pub(super) fn enforce_size(&mut self) -> u64 {
        let max = self.limits.max_total_bytes;
        let mut total = self.total_bytes();
        if total <= max {
            return 0;
        }
        let pinned = self.pinned();
        let candidates: Vec<(u64, u64)> = self
            .sealed
            .values()
            .filter(|m| pinned.binary_search(&m.seq).is_err())
            .map(|m| (m.seq, m.data_len + m.index_len))
            .collect();
        let mut removed = 0;
        for (seq, bytes) in candidates {
            if total <= max {
                break;
            }
            total -= bytes;
            removed += self.release(seq);
        }
        removed
    }
}

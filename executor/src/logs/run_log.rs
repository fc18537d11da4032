//! One run's writer: lines split per stream, the cap, and the way to the store.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use super::*;

/// Which of the guest's output streams a write came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One run's log writer; cheap to clone (the clones share the log).
#[derive(Clone)]
pub struct RunLog {
    pub(super) inner: Arc<Mutex<LogState>>,
}

impl fmt::Debug for RunLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunLog")
    }
}

pub(super) enum Sink {
    /// The store's segments.
    Store(StoreSink),
    Memory(Vec<String>),
    Discard,
}

pub(super) struct StoreSink {
    pub(super) store: Arc<StoreInner>,
    /// This log, for the store to push its gathered lines out on a read.
    pub(super) me: Weak<Mutex<LogState>>,
    pub(super) run_id: i64,
    pub(super) key: u64,
    /// Registered with the store as live: from the first line to `finish`.
    pub(super) live: bool,
    /// Where the run's last record ends: `finish` waits until the OS has it.
    pub(super) last: Option<Pos>,
}

pub(super) struct LogState {
    pub(super) sink: Sink,
    pub(super) cap: u64,
    /// Bytes accepted so far (lines plus their newlines).
    pub(super) written: u64,
    pub(super) truncated: bool,
    /// The current unfinished line of stdout and of stderr.
    pub(super) partial: [Vec<u8>; 2],
    /// Completed lines not yet written out.
    pub(super) pending: Vec<u8>,
    pub(super) pending_lines: u32,
    /// When the oldest line in `pending` was completed.
    pub(super) pending_since: Option<Instant>,
}

impl RunLog {
    pub(super) fn new(sink: Sink, cap: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(LogState::new(sink, cap))),
        }
    }

    /// A log kept in memory, read back with [`RunLog::lines`].
    pub fn memory(cap: u64) -> Self {
        Self::new(Sink::Memory(Vec::new()), cap)
    }

    /// A log that drops everything.
    pub fn discard() -> Self {
        Self::new(Sink::Discard, 0)
    }

    pub(super) fn state(&self) -> MutexGuard<'_, LogState> {
        lock(&self.inner)
    }

    /// Appends guest output. Every line it completes is readable at once; it reaches the
    /// disk in batches, by [`RunLog::finish`] at the latest.
    pub fn write(&self, stream: Stream, bytes: &[u8]) {
        let mut state = self.state();
        if state.truncated || matches!(state.sink, Sink::Discard) {
            return;
        }
        state.append(stream, bytes);
        state.flush_pending(false);
    }

    /// Adds a line of the executor's own (`[rota] …`), after finishing any partial lines.
    pub fn note(&self, text: &str) {
        let mut state = self.state();
        state.finish_partials();
        let line = format!("{NOTE_PREFIX}{text}");
        state.push_line(line.as_bytes());
        state.flush_pending(false);
    }

    /// Ends the log: unfinished lines are written as lines. Returns once the OS has every
    /// byte of the run (a report sent after survives a kill of this process).
    pub fn finish(&self) {
        let mut state = self.state();
        state.finish_partials();
        state.finish_sink();
    }

    /// The lines of an in-memory log (empty for other logs).
    pub fn lines(&self) -> Vec<String> {
        match &self.state().sink {
            Sink::Memory(lines) => lines.clone(),
            _ => Vec::new(),
        }
    }

    /// Whether the cap was hit.
    pub fn truncated(&self) -> bool {
        self.state().truncated
    }
}

impl LogState {
    pub(super) fn new(sink: Sink, cap: u64) -> Self {
        Self {
            sink,
            cap,
            written: 0,
            truncated: false,
            partial: [Vec::new(), Vec::new()],
            pending: Vec::new(),
            pending_lines: 0,
            pending_since: None,
        }
    }

    pub(super) fn append(&mut self, stream: Stream, mut bytes: &[u8]) {
        let idx = stream as usize;
        while !bytes.is_empty() && !self.truncated {
            match bytes.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    let mut line = std::mem::take(&mut self.partial[idx]);
                    line.extend_from_slice(&bytes[..end]);
                    self.push_line(&line);
                    line.clear();
                    self.partial[idx] = line;
                    bytes = &bytes[end + 1..];
                }
                None => {
                    let room = MAX_LINE_BYTES - self.partial[idx].len();
                    let take = bytes.len().min(room);
                    self.partial[idx].extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.partial[idx].len() >= MAX_LINE_BYTES {
                        let line = std::mem::take(&mut self.partial[idx]);
                        self.push_line(&line);
                    }
                }
            }
        }
    }

    pub(super) fn finish_partials(&mut self) {
        for idx in 0..2 {
            if !self.partial[idx].is_empty() {
                let line = std::mem::take(&mut self.partial[idx]);
                self.push_line(&line);
            }
        }
    }

    /// Queues one line (without its newline), or the truncation notice if it would
    /// cross the cap.
    pub(super) fn push_line(&mut self, line: &[u8]) {
        if self.truncated {
            return;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let len = line.len() as u64 + 1;
        if self.pending.is_empty() {
            self.pending_since = Some(Instant::now());
        }
        self.pending_lines += 1;
        if self.written + len > self.cap {
            self.truncated = true;
            let notice = format!("{NOTE_PREFIX}log truncated at {}", human_bytes(self.cap));
            self.pending.extend_from_slice(notice.as_bytes());
            self.pending.push(b'\n');
            return;
        }
        self.written += len;
        self.pending.extend_from_slice(line);
        self.pending.push(b'\n');
    }

    /// Moves completed lines on: to memory at once; to the store as a record when
    /// `force`d or enough has gathered (until then the store knows the run is live, so
    /// a read can push them out).
    pub(super) fn flush_pending(&mut self, force: bool) {
        if self.pending.is_empty() {
            return;
        }
        match &mut self.sink {
            Sink::Store(sink) => {
                let due = force
                    || self.pending.len() >= RECORD_BYTES
                    || self
                        .pending_since
                        .is_some_and(|t| t.elapsed() >= WRITE_DELAY);
                if !due {
                    if !sink.live {
                        sink.store
                            .writer()
                            .register(sink.key, sink.run_id, &sink.me);
                        sink.live = true;
                    }
                    return;
                }
                if let Some(pos) = sink.store.append(
                    sink.key,
                    sink.run_id,
                    &sink.me,
                    self.pending_lines,
                    &self.pending,
                ) {
                    sink.last = Some(pos);
                    sink.live = true;
                }
            }
            Sink::Memory(lines) => {
                let text = self.pending.strip_suffix(b"\n").unwrap_or(&self.pending);
                lines.extend(
                    text.split(|&b| b == b'\n')
                        .map(|l| String::from_utf8_lossy(l).into_owned()),
                );
            }
            Sink::Discard => {}
        }
        self.pending.clear();
        self.pending_lines = 0;
        self.pending_since = None;
    }

    /// Writes out every completed line; for the store, waits until the OS has the run's
    /// bytes and forgets the run as live.
    /// Queues the run's last lines as a record in the shared buffer and stops pinning
    /// its segments. No `write` here: [`super::LogStore::flush`] hands the buffer to the
    /// OS for many finished runs at once, and the executor calls it before it reports
    /// them.
    pub(super) fn finish_sink(&mut self) {
        self.flush_pending(true);
        if let Sink::Store(sink) = &mut self.sink
            && sink.live
        {
            sink.store.writer().live.remove(&sink.key);
            sink.live = false;
        }
    }
}

impl Drop for LogState {
    /// A log dropped without `finish` (a panicking run) still writes what it had, and
    /// stops pinning its segments.
    fn drop(&mut self) {
        if matches!(self.sink, Sink::Store(_)) {
            self.finish_partials();
            self.finish_sink();
        }
    }
}

/// `1 MiB`, `512 KiB`, `1000 bytes`: the cap as the notice states it.
pub(super) fn human_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

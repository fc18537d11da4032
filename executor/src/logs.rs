//! Per-run logs: what a plugin writes to stdout and stderr, line by line.
//!
//! [`LogStore`] owns `<data_dir>/logs/`: one file per run, `<run_id>.log`, appended while
//! the run is live so the console can tail it ([`LogStore::read`] serves any line range),
//! and deleted by [`LogStore::sweep`] once older than the retention period.
//!
//! [`RunLog`] is one run's writer. It splits each stream into lines (stdout and stderr
//! keep separate partial lines so they never mix inside a line), writes every completed
//! line to the file at once (one `write` per guest write, never per byte), and enforces
//! the cap: the line that would cross it is replaced by
//! `[rota] log truncated at 1 MiB` and everything after is dropped. The file is created
//! on the first line, so a run that prints nothing costs no file system work.
//!
//! A `RunLog` can also keep its lines in memory (`rota plugin run`) or discard them
//! (benchmarks).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use rota_proto::LogPage;

/// Default cap on one run's log.
pub const DEFAULT_LOG_CAP_BYTES: u64 = 1 << 20;
/// Default time a run's log is kept after it was last written.
pub const DEFAULT_LOG_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// A longer line without a newline is cut into pieces of this size, so one endless line
/// cannot hold unbounded memory while the run is live.
pub const MAX_LINE_BYTES: usize = 16 * 1024;
/// Most lines one [`LogStore::read`] returns, whatever the caller asks for.
pub const MAX_PAGE_LINES: u32 = 10_000;
/// Prefix of the lines the executor itself adds to a run's log.
pub const NOTE_PREFIX: &str = "[rota] ";

/// The log files of one executor.
#[derive(Debug, Clone)]
pub struct LogStore {
    inner: Arc<StoreInner>,
}

#[derive(Debug)]
struct StoreInner {
    dir: PathBuf,
    cap_bytes: u64,
    retention: Duration,
}

impl LogStore {
    /// Opens (creating if needed) the log directory `dir`.
    pub fn open(dir: impl Into<PathBuf>, cap_bytes: u64, retention: Duration) -> io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(Self {
            inner: Arc::new(StoreInner {
                dir,
                cap_bytes,
                retention,
            }),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn cap_bytes(&self) -> u64 {
        self.inner.cap_bytes
    }

    /// Where the log of `run_id` lives.
    pub fn path(&self, run_id: i64) -> PathBuf {
        self.inner.dir.join(format!("{run_id}.log"))
    }

    /// The writer for a run's log. Nothing touches the disk before the first line.
    pub fn create(&self, run_id: i64) -> RunLog {
        RunLog::new(
            Sink::File {
                path: self.path(run_id),
                file: None,
            },
            self.inner.cap_bytes,
        )
    }

    /// Up to `max_lines` lines (at most [`MAX_PAGE_LINES`]) of a run's log, from the
    /// 1-based `from_line` (0 reads as 1). `live` says whether the run may still write:
    /// the page is `complete` only when it is not and no line is left. A run without a
    /// log file has no lines.
    pub fn read(
        &self,
        run_id: i64,
        from_line: u64,
        max_lines: u32,
        live: bool,
    ) -> io::Result<LogPage> {
        let from_line = from_line.max(1);
        let max_lines = max_lines.min(MAX_PAGE_LINES) as usize;
        let mut text = Vec::new();
        match File::open(self.path(run_id)) {
            Ok(file) => {
                // Bounded: the writer stops at the cap plus one notice line (and one cut
                // line from each stream's partial buffer).
                let limit = self.inner.cap_bytes + 4 * MAX_LINE_BYTES as u64;
                file.take(limit).read_to_end(&mut text)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // Only complete lines: a line being written while we read is left for later.
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

    /// Deletes the logs last written before the retention period; returns how many.
    pub fn sweep(&self) -> io::Result<usize> {
        self.sweep_older_than(SystemTime::now() - self.inner.retention)
    }

    /// Deletes the logs last written before `cutoff`; returns how many.
    pub fn sweep_older_than(&self, cutoff: SystemTime) -> io::Result<usize> {
        let mut removed = 0;
        for entry in fs::read_dir(&self.inner.dir)? {
            let entry = entry?;
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "log") {
                continue;
            }
            let Ok(modified) = entry.metadata().and_then(|m| m.modified()) else {
                continue;
            };
            if modified < cutoff {
                match fs::remove_file(&path) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(removed)
    }
}

/// Which of the guest's output streams a write came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One run's log writer; cheap to clone (the clones share the log).
#[derive(Clone)]
pub struct RunLog {
    inner: Arc<Mutex<LogState>>,
}

impl fmt::Debug for RunLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunLog")
    }
}

enum Sink {
    /// The run's log file, opened on the first line.
    File {
        path: PathBuf,
        file: Option<File>,
    },
    Memory(Vec<String>),
    Discard,
    /// Writing failed (disk full, …); the rest of the output is dropped.
    Broken,
}

struct LogState {
    sink: Sink,
    cap: u64,
    /// Bytes accepted so far (lines plus their newlines).
    written: u64,
    truncated: bool,
    /// The current unfinished line of stdout and of stderr.
    partial: [Vec<u8>; 2],
    /// Completed lines not yet written out (reused between writes).
    pending: Vec<u8>,
}

impl RunLog {
    fn new(sink: Sink, cap: u64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(LogState {
                sink,
                cap,
                written: 0,
                truncated: false,
                partial: [Vec::new(), Vec::new()],
                pending: Vec::new(),
            })),
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

    fn state(&self) -> MutexGuard<'_, LogState> {
        // A panic while holding the lock leaves at worst a half-split line behind.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends guest output; every line it completes is written out before returning.
    pub fn write(&self, stream: Stream, bytes: &[u8]) {
        let mut state = self.state();
        if state.truncated || matches!(state.sink, Sink::Discard | Sink::Broken) {
            return;
        }
        state.append(stream, bytes);
        state.flush_pending();
    }

    /// Adds a line of the executor's own (`[rota] …`), after finishing any partial lines.
    pub fn note(&self, text: &str) {
        let mut state = self.state();
        state.finish_partials();
        let line = format!("{NOTE_PREFIX}{text}");
        state.push_line(line.as_bytes());
        state.flush_pending();
    }

    /// Ends the log: unfinished lines are written as lines.
    pub fn finish(&self) {
        let mut state = self.state();
        state.finish_partials();
        state.flush_pending();
        if let Sink::File { file, .. } = &mut state.sink {
            // Closes the file; the log stays readable by path.
            *file = None;
        }
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
    fn append(&mut self, stream: Stream, mut bytes: &[u8]) {
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

    fn finish_partials(&mut self) {
        for idx in 0..2 {
            if !self.partial[idx].is_empty() {
                let line = std::mem::take(&mut self.partial[idx]);
                self.push_line(&line);
            }
        }
    }

    /// Queues one line (without its newline), or the truncation notice if it would
    /// cross the cap.
    fn push_line(&mut self, line: &[u8]) {
        if self.truncated {
            return;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let len = line.len() as u64 + 1;
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

    fn flush_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        match &mut self.sink {
            Sink::File { path, file } => {
                let result = match file {
                    Some(f) => f.write_all(&pending),
                    None => OpenOptions::new()
                        .create(true)
                        .write(true)
                        .truncate(true)
                        .open(&*path)
                        .and_then(|mut f| {
                            f.write_all(&pending)?;
                            *file = Some(f);
                            Ok(())
                        }),
                };
                if let Err(e) = result {
                    tracing::warn!(path = %path.display(), error = %e, "writing a run's log failed; dropping the rest of its output");
                    self.sink = Sink::Broken;
                }
            }
            Sink::Memory(lines) => {
                let text = pending.strip_suffix(b"\n").unwrap_or(&pending);
                lines.extend(
                    text.split(|&b| b == b'\n')
                        .map(|l| String::from_utf8_lossy(l).into_owned()),
                );
            }
            Sink::Discard | Sink::Broken => {}
        }
        let mut pending = pending;
        pending.clear();
        self.pending = pending;
    }
}

/// `1 MiB`, `512 KiB`, `1000 bytes`: the cap as the notice states it.
fn human_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(cap: u64) -> (tempfile::TempDir, LogStore) {
        let dir = tempfile::tempdir().unwrap();
        let logs = LogStore::open(dir.path().join("logs"), cap, DEFAULT_LOG_RETENTION).unwrap();
        (dir, logs)
    }

    #[test]
    fn lines_are_split_per_stream_and_appended_live() {
        let (_dir, logs) = store(DEFAULT_LOG_CAP_BYTES);
        let log = logs.create(7);
        assert!(!logs.path(7).exists(), "no file before the first line");
        log.write(Stream::Stdout, b"hel");
        log.write(Stream::Stderr, b"oops: ");
        assert!(!logs.path(7).exists());
        log.write(Stream::Stdout, b"lo\nwor");
        let page = logs.read(7, 1, 100, true).unwrap();
        assert_eq!(page.lines, ["hello"]);
        assert_eq!(page.next_line, 2);
        assert!(!page.complete);
        log.write(Stream::Stderr, b"bad\r\n");
        log.write(Stream::Stdout, b"ld");
        log.finish();
        let page = logs.read(7, 1, 100, false).unwrap();
        assert_eq!(page.lines, ["hello", "oops: bad", "world"]);
        assert_eq!(page.next_line, 4);
        assert!(page.complete);
    }

    #[test]
    fn pages_by_line_range() {
        let (_dir, logs) = store(DEFAULT_LOG_CAP_BYTES);
        let log = logs.create(1);
        for i in 1..=10 {
            log.write(Stream::Stdout, format!("line {i}\n").as_bytes());
        }
        log.finish();
        let page = logs.read(1, 3, 4, false).unwrap();
        assert_eq!(page.lines, ["line 3", "line 4", "line 5", "line 6"]);
        assert_eq!(page.next_line, 7);
        assert!(!page.complete);
        let page = logs.read(1, 7, 100, false).unwrap();
        assert_eq!(page.lines.len(), 4);
        assert_eq!(page.next_line, 11);
        assert!(page.complete);
        let page = logs.read(1, 11, 100, false).unwrap();
        assert!(page.lines.is_empty());
        assert_eq!(page.next_line, 11);
        assert!(page.complete);
        // 0 reads as 1; a page far past the end is empty.
        assert_eq!(logs.read(1, 0, 1, false).unwrap().lines, ["line 1"]);
        assert!(logs.read(1, u64::MAX, 10, false).unwrap().lines.is_empty());
    }

    #[test]
    fn a_run_without_output_has_no_lines() {
        let (_dir, logs) = store(DEFAULT_LOG_CAP_BYTES);
        let page = logs.read(99, 1, 10, true).unwrap();
        assert_eq!(
            (page.lines.len(), page.next_line, page.complete),
            (0, 1, false)
        );
        assert!(logs.read(99, 1, 10, false).unwrap().complete);
    }

    #[test]
    fn the_cap_is_stated_and_the_rest_dropped() {
        let (_dir, logs) = store(1 << 10);
        let log = logs.create(3);
        let line = [b'x'; 99];
        for _ in 0..20 {
            log.write(Stream::Stdout, &line);
            log.write(Stream::Stdout, b"\n");
        }
        log.write(Stream::Stderr, b"after the cap\n");
        log.finish();
        assert!(log.truncated());
        let page = logs.read(3, 1, 100, false).unwrap();
        assert_eq!(page.lines.len(), 11, "{:?}", page.lines);
        assert_eq!(page.lines[10], "[rota] log truncated at 1 KiB");
        assert!(fs::metadata(logs.path(3)).unwrap().len() <= 1024 + 64);
        assert_eq!(human_bytes(1 << 20), "1 MiB");
        assert_eq!(human_bytes(1000), "1000 bytes");
    }

    #[test]
    fn endless_lines_are_cut() {
        let log = RunLog::memory(DEFAULT_LOG_CAP_BYTES);
        log.write(Stream::Stdout, &vec![b'a'; MAX_LINE_BYTES * 2 + 5]);
        log.finish();
        let lines = log.lines();
        assert_eq!(
            lines.iter().map(String::len).collect::<Vec<_>>(),
            [MAX_LINE_BYTES, MAX_LINE_BYTES, 5]
        );
    }

    #[test]
    fn notes_and_lossy_utf8() {
        let log = RunLog::memory(DEFAULT_LOG_CAP_BYTES);
        log.write(Stream::Stdout, b"half");
        log.note("timed out after 200 ms");
        log.write(Stream::Stdout, b"\xffok\n");
        log.finish();
        assert_eq!(
            log.lines(),
            ["half", "[rota] timed out after 200 ms", "\u{fffd}ok"]
        );
        let discard = RunLog::discard();
        discard.write(Stream::Stdout, b"x\n");
        assert!(discard.lines().is_empty());
    }

    #[test]
    fn sweep_removes_old_logs_only() {
        let (_dir, logs) = store(DEFAULT_LOG_CAP_BYTES);
        for id in [1, 2] {
            let log = logs.create(id);
            log.write(Stream::Stdout, b"x\n");
            log.finish();
        }
        fs::write(logs.dir().join("other.txt"), b"keep").unwrap();
        assert_eq!(logs.sweep().unwrap(), 0);
        let future = SystemTime::now() + Duration::from_secs(60);
        assert_eq!(logs.sweep_older_than(future).unwrap(), 2);
        assert!(!logs.path(1).exists());
        assert!(logs.dir().join("other.txt").exists());
    }
}

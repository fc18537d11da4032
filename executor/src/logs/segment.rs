//! The segment files on disk: records, per-segment indexes, recovery after a kill.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub(super) const RECORD_MAGIC: u8 = 0xB7;
/// Magic, run id, line count, payload length.
pub(super) const RECORD_HEADER: usize = 1 + 8 + 4 + 4;
/// The CRC-32.
pub(super) const RECORD_TRAILER: usize = 4;
pub(super) const RECORD_OVERHEAD: usize = RECORD_HEADER + RECORD_TRAILER;

pub(super) const INDEX_MAGIC: [u8; 8] = *b"ROTAIX01";
/// Run id, offset, payload length, line count.
pub(super) const INDEX_ENTRY: usize = 8 + 4 + 4 + 4;
/// Records, runs, segment length, lowest and highest run id, CRC-32 of those.
pub(super) const INDEX_FOOTER: usize = 5 * 8 + 4;

/// Where one record of a run is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rec {
    pub(super) seq: u64,
    pub(super) offset: u32,
    pub(super) len: u32,
    pub(super) lines: u32,
}

/// One record in a sealed segment's index; sorted by run, then offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct IndexEntry {
    pub(super) run_id: i64,
    pub(super) offset: u32,
    pub(super) len: u32,
    pub(super) lines: u32,
}

impl IndexEntry {
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.run_id.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.lines.to_le_bytes());
    }

    pub(super) fn decode(b: &[u8; INDEX_ENTRY]) -> Self {
        Self {
            run_id: i64::from_le_bytes(le(&b[0..8])),
            offset: u32::from_le_bytes(le(&b[8..12])),
            len: u32::from_le_bytes(le(&b[12..16])),
            lines: u32::from_le_bytes(le(&b[16..20])),
        }
    }

    pub(super) fn rec(&self, seq: u64) -> Rec {
        Rec {
            seq,
            offset: self.offset,
            len: self.len,
            lines: self.lines,
        }
    }
}

/// A sealed segment, as much of it as stays in memory.
#[derive(Debug, Clone)]
pub(super) struct SegMeta {
    pub(super) seq: u64,
    pub(super) data_len: u64,
    /// 0 when the index could not be written: reads scan the segment instead.
    pub(super) index_len: u64,
    pub(super) records: u64,
    pub(super) runs: u64,
    pub(super) min_run: i64,
    pub(super) max_run: i64,
    pub(super) newest: SystemTime,
}

/// Writes `<seq>.idx` for a segment of `data_len` bytes holding `entries` (not empty).
/// A failed write is not fatal: reads scan the segment, and the next open rebuilds it.
pub(super) fn write_index(
    dir: &Path,
    seq: u64,
    mut entries: Vec<IndexEntry>,
    data_len: u64,
    newest: SystemTime,
) -> SegMeta {
    entries.sort_unstable();
    let runs = 1 + entries
        .windows(2)
        .filter(|w| w[0].run_id != w[1].run_id)
        .count() as u64;
    let min_run = entries.first().map_or(0, |e| e.run_id);
    let max_run = entries.last().map_or(0, |e| e.run_id);
    let records = entries.len() as u64;
    let mut bytes =
        Vec::with_capacity(INDEX_MAGIC.len() + entries.len() * INDEX_ENTRY + INDEX_FOOTER);
    bytes.extend_from_slice(&INDEX_MAGIC);
    for e in &entries {
        e.encode(&mut bytes);
    }
    let footer_at = bytes.len();
    bytes.extend_from_slice(&records.to_le_bytes());
    bytes.extend_from_slice(&runs.to_le_bytes());
    bytes.extend_from_slice(&data_len.to_le_bytes());
    bytes.extend_from_slice(&min_run.to_le_bytes());
    bytes.extend_from_slice(&max_run.to_le_bytes());
    let crc = crc32(&bytes[footer_at..]);
    bytes.extend_from_slice(&crc.to_le_bytes());
    let path = index_path(dir, seq);
    let index_len = match fs::write(&path, &bytes) {
        Ok(()) => bytes.len() as u64,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "writing a run log index failed; reads will scan the segment");
            let _ = remove_if_present(&path);
            0
        }
    };
    SegMeta {
        seq,
        data_len,
        index_len,
        records,
        runs,
        min_run,
        max_run,
        newest,
    }
}

/// A segment's index footer, if `path` holds a complete index.
pub(super) fn read_footer(path: &Path) -> io::Result<Option<SegMeta>> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if len < (INDEX_MAGIC.len() + INDEX_FOOTER) as u64 {
        return Ok(None);
    }
    let mut magic = [0u8; 8];
    file.read_exact(&mut magic)?;
    let mut footer = [0u8; INDEX_FOOTER];
    file.seek(SeekFrom::End(-(INDEX_FOOTER as i64)))?;
    file.read_exact(&mut footer)?;
    let field = |i: usize| le::<8>(&footer[i * 8..i * 8 + 8]);
    let records = u64::from_le_bytes(field(0));
    let crc = u32::from_le_bytes(le(&footer[40..44]));
    // The index is written in one go: its length says it is whole, the CRC that the
    // footer is what was written.
    let whole = records
        .checked_mul(INDEX_ENTRY as u64)
        .and_then(|n| n.checked_add((INDEX_MAGIC.len() + INDEX_FOOTER) as u64))
        == Some(len);
    if magic != INDEX_MAGIC || crc != crc32(&footer[..40]) || !whole || records == 0 {
        return Ok(None);
    }
    let meta = SegMeta {
        seq: 0,
        data_len: u64::from_le_bytes(field(2)),
        index_len: len,
        records,
        runs: u64::from_le_bytes(field(1)),
        min_run: i64::from_le_bytes(field(3)),
        max_run: i64::from_le_bytes(field(4)),
        newest: SystemTime::UNIX_EPOCH,
    };
    Ok(Some(meta))
}

/// Indexes a segment found on open: by its index if whole and matching, else by
/// scanning it, cutting a torn tail and writing the index. `None`: nothing in it (the
/// files are deleted).
pub(super) fn recover_segment(dir: &Path, seq: u64) -> io::Result<Option<SegMeta>> {
    let path = segment_path(dir, seq);
    let metadata = fs::metadata(&path)?;
    let data_len = metadata.len();
    let newest = metadata.modified().unwrap_or_else(|_| SystemTime::now());
    if let Some(meta) = read_footer(&index_path(dir, seq))?
        && meta.data_len == data_len
    {
        return Ok(Some(SegMeta {
            seq,
            newest,
            ..meta
        }));
    }
    let (entries, valid_len) = scan_segment(&path)?;
    if entries.is_empty() {
        remove_if_present(&path)?;
        remove_if_present(&index_path(dir, seq))?;
        return Ok(None);
    }
    if valid_len < data_len {
        tracing::warn!(
            segment = %path.display(),
            cut_bytes = data_len - valid_len,
            "a run log segment ended in a torn record (the executor was killed mid-write); cutting it"
        );
        OpenOptions::new()
            .write(true)
            .open(&path)?
            .set_len(valid_len)?;
    }
    Ok(Some(write_index(dir, seq, entries, valid_len, newest)))
}

/// The records of a segment up to the first torn or corrupt one, and where that is.
pub(super) fn scan_segment(path: &Path) -> io::Result<(Vec<IndexEntry>, u64)> {
    let file = File::open(path)?;
    let len = file.metadata()?.len().min(u64::from(u32::MAX));
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut entries = Vec::new();
    let mut pos = 0u64;
    let mut record = Vec::new();
    while len - pos >= RECORD_OVERHEAD as u64 {
        record.resize(RECORD_HEADER, 0);
        if read_or_eof(&mut reader, &mut record)? {
            break;
        }
        let (magic, run_id, lines, payload_len) = parse_header(&record);
        let size = RECORD_OVERHEAD as u64 + u64::from(payload_len);
        if magic != RECORD_MAGIC || size > len - pos {
            break;
        }
        record.resize(RECORD_HEADER + payload_len as usize + RECORD_TRAILER, 0);
        if read_or_eof(&mut reader, &mut record[RECORD_HEADER..])? {
            break;
        }
        let Some(payload) = check_record(&record) else {
            break;
        };
        if !payload.ends_with(b"\n") || count_lines(payload) != u64::from(lines) {
            break;
        }
        entries.push(IndexEntry {
            run_id,
            offset: pos as u32,
            len: payload_len,
            lines,
        });
        pos += size;
    }
    Ok((entries, pos))
}

/// Fills `buf`; `true` if the file ended first.
pub(super) fn read_or_eof(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    match reader.read_exact(buf) {
        Ok(()) => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(true),
        Err(e) => Err(e),
    }
}

/// A sealed segment's records of `run_id`, by binary search in its index (or a scan
/// when it has none). A segment deleted meanwhile has none.
pub(super) fn sealed_records(dir: &Path, meta: &SegMeta, run_id: i64) -> io::Result<Vec<Rec>> {
    let entries = if meta.index_len > 0 {
        match lookup_index(&index_path(dir, meta.seq), meta.records, run_id) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
    } else {
        match scan_segment(&segment_path(dir, meta.seq)) {
            Ok((entries, _)) => entries.into_iter().filter(|e| e.run_id == run_id).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
    };
    entries
        .iter()
        .map(|e| {
            if u64::from(e.offset) + (RECORD_OVERHEAD as u64) + u64::from(e.len) > meta.data_len {
                return Err(corrupt(meta.seq, e.offset, "its index points past its end"));
            }
            Ok(e.rec(meta.seq))
        })
        .collect()
}

/// The entries of `run_id` in an index of `records` entries.
pub(super) fn lookup_index(path: &Path, records: u64, run_id: i64) -> io::Result<Vec<IndexEntry>> {
    let mut file = File::open(path)?;
    let at = |i: u64| SeekFrom::Start(INDEX_MAGIC.len() as u64 + i * INDEX_ENTRY as u64);
    let (mut lo, mut hi) = (0u64, records);
    let mut id = [0u8; 8];
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        file.seek(at(mid))?;
        file.read_exact(&mut id)?;
        if i64::from_le_bytes(id) < run_id {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    file.seek(at(lo))?;
    let mut reader = BufReader::with_capacity(4096, file);
    let mut entries = Vec::new();
    let mut raw = [0u8; INDEX_ENTRY];
    for _ in lo..records {
        reader.read_exact(&mut raw)?;
        let entry = IndexEntry::decode(&raw);
        if entry.run_id != run_id {
            break;
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// Reads one record of `run_id` into `buf`, checks it, and returns its lines.
pub(super) fn read_record<'a>(
    file: &mut File,
    rec: &Rec,
    run_id: i64,
    buf: &'a mut Vec<u8>,
) -> io::Result<&'a [u8]> {
    buf.resize(RECORD_OVERHEAD + rec.len as usize, 0);
    file.seek(SeekFrom::Start(u64::from(rec.offset)))?;
    file.read_exact(buf)?;
    let (magic, id, lines, len) = parse_header(buf);
    if magic != RECORD_MAGIC || id != run_id || lines != rec.lines || len != rec.len {
        return Err(corrupt(rec.seq, rec.offset, "it is not the record indexed"));
    }
    check_record(buf).ok_or_else(|| corrupt(rec.seq, rec.offset, "its checksum does not match"))
}

pub(super) fn corrupt(seq: u64, offset: u32, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the log record at byte {offset} of segment {seq} is corrupt: {why}"),
    )
}

pub(super) fn encode_record(buf: &mut Vec<u8>, run_id: i64, lines: u32, payload: &[u8]) {
    let start = buf.len();
    buf.push(RECORD_MAGIC);
    buf.extend_from_slice(&run_id.to_le_bytes());
    buf.extend_from_slice(&lines.to_le_bytes());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(payload);
    let crc = crc32(&buf[start..]);
    buf.extend_from_slice(&crc.to_le_bytes());
}

/// Magic, run id, line count and payload length of a record starting `b`.
pub(super) fn parse_header(b: &[u8]) -> (u8, i64, u32, u32) {
    (
        b[0],
        i64::from_le_bytes(le(&b[1..9])),
        u32::from_le_bytes(le(&b[9..13])),
        u32::from_le_bytes(le(&b[13..17])),
    )
}

/// The payload of a whole record, if its checksum matches.
pub(super) fn check_record(record: &[u8]) -> Option<&[u8]> {
    let body = record.len().checked_sub(RECORD_TRAILER)?;
    let stored = u32::from_le_bytes(le(&record[body..]));
    (crc32(&record[..body]) == stored).then(|| &record[RECORD_HEADER..body])
}

pub(super) fn count_lines(payload: &[u8]) -> u64 {
    payload.iter().filter(|&&b| b == b'\n').count() as u64
}

/// The first `N` bytes of `b` as an array (`b` is always at least that long here).
pub(super) fn le<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[..N]);
    out
}

/// CRC-32 (IEEE, as zlib): enough to tell a torn or damaged record.
pub(super) fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

pub(super) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016}.seg"))
}

pub(super) fn index_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016}.idx"))
}

pub(super) fn legacy_path(dir: &Path, run_id: i64) -> PathBuf {
    dir.join(format!("{run_id}.log"))
}

pub(super) fn parse_seq(name: &str, extension: &str) -> Option<u64> {
    let stem = name.strip_suffix(extension)?;
    stem.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| stem.parse().ok())
        .flatten()
}

pub(super) fn legacy_run_id(name: &str) -> Option<i64> {
    name.strip_suffix(".log")?.parse().ok()
}

pub(super) fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

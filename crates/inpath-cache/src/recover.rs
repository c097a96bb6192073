//! Checkpoint of the index and recovery: load the checkpoint when intact, then replay the log
//! chunks written after it (each record checksummed; the first bad record ends a chunk).
//! Format in docs/FORMATS.md ("cache checkpoint").

use crate::error::CheckpointError;
use crate::flash::{self, AlignedBuf, FlashFile, ALIGN, CHUNK_HEADER, REC_HEADER};
use crate::index::{Bucket, Entry, Index, KeyHash, Loc, BUCKET_BYTES, ENTRY_BYTES, WAYS};
use crate::types::{Geometry, RecoveryReport, SealHook};
use std::path::Path;

const MAGIC: &[u8; 8] = b"INPCKPT1";
const END: &[u8; 8] = b"CKPTEND1";
/// 2: five 12-byte entries per bucket, locations modulo 2^38 read against `head` (version 1:
/// four 16-byte entries; refused, the log is replayed instead).
const VERSION: u32 = 2;
const HEADER: usize = 64;

/// A copy of the index with its log position, written at once (tests).
#[cfg(test)]
pub struct Snapshot {
    pub buckets: Vec<Bucket>,
    pub head: u64,
    pub tail: u64,
    pub cas: u64,
    pub clock: u32,
    pub geo: Geometry,
}

/// Writes the checkpoint all-or-nothing (`inpath_core::output::OutputFile`): a crash leaves
/// the previous checkpoint in place.
#[cfg(test)]
pub fn write_checkpoint(path: &Path, snap: &Snapshot) -> std::io::Result<()> {
    let mut w = CheckpointWriter::create(
        path,
        snap.geo,
        snap.buckets.len() as u64,
        snap.head,
        snap.tail,
        snap.cas,
        snap.clock,
    )?;
    w.buckets(&snap.buckets)?;
    w.commit()
}

/// A checkpoint written piece by piece (the header, then buckets in order, then the checksum
/// and end marker), so the store never holds a second copy of its index: it copies a piece of
/// buckets under its lock, hands it here, and goes on. Nothing is visible under the name until
/// [`CheckpointWriter::commit`] (a temporary file beside it, fsync, rename).
pub struct CheckpointWriter {
    out: inpath_core::output::OutputFile,
    crc: crc32fast::Hasher,
    buf: Vec<u8>,
    left: u64,
}

impl CheckpointWriter {
    /// Starts a checkpoint of `nbuckets` buckets taken at log `head` (replay starts there),
    /// `tail`, the highest `cas` and the LRU `clock`.
    pub fn create(
        path: &Path,
        geo: Geometry,
        nbuckets: u64,
        head: u64,
        tail: u64,
        cas: u64,
        clock: u32,
    ) -> std::io::Result<CheckpointWriter> {
        let out =
            inpath_core::output::OutputFile::create(path, &[]).map_err(std::io::Error::other)?;
        let mut w = CheckpointWriter {
            out,
            crc: crc32fast::Hasher::new(),
            buf: Vec::with_capacity(HEADER),
            left: nbuckets,
        };
        w.buf.extend_from_slice(MAGIC);
        w.buf.extend_from_slice(&VERSION.to_le_bytes());
        w.buf.extend_from_slice(&clock.to_le_bytes());
        for v in [geo.chunk_size, geo.nchunks, nbuckets, head, tail, cas] {
            w.buf.extend_from_slice(&v.to_le_bytes());
        }
        w.emit()?;
        Ok(w)
    }

    fn emit(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        self.crc.update(&self.buf);
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// The next buckets, in index order.
    pub fn buckets(&mut self, buckets: &[Bucket]) -> std::io::Result<()> {
        if buckets.len() as u64 > self.left {
            return Err(std::io::Error::other("more buckets than the header says"));
        }
        self.left -= buckets.len() as u64;
        for b in buckets {
            for e in &b.e {
                for w in e.w {
                    self.buf.extend_from_slice(&w.to_le_bytes());
                }
            }
            self.buf
                .resize(self.buf.len() + BUCKET_BYTES - WAYS * ENTRY_BYTES, 0);
        }
        self.emit()
    }

    /// Ends the file (checksum and end marker) and puts it in place.
    pub fn commit(mut self) -> std::io::Result<()> {
        use std::io::Write;
        if self.left != 0 {
            return Err(std::io::Error::other("fewer buckets than the header says"));
        }
        let crc = self.crc.clone().finalize();
        self.out.write_all(&crc.to_le_bytes())?;
        self.out.write_all(END)?;
        self.out.commit().map_err(std::io::Error::other)
    }
}

/// What a checkpoint says beside its buckets.
struct Loaded {
    head: u64,
    tail: u64,
    cas: u64,
    clock: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Reads and checks a checkpoint into `index` (of `geo`'s size), a piece at a time (no second
/// copy of the index in memory): an error when absent, damaged or for another geometry, and
/// then `index` is left empty.
fn load_checkpoint(
    path: &Path,
    geo: Geometry,
    index: &mut Index,
) -> Result<Loaded, CheckpointError> {
    let r = read_checkpoint(path, geo, index);
    if r.is_err() {
        index.clear();
    }
    r
}

fn read_checkpoint(
    path: &Path,
    geo: Geometry,
    index: &mut Index,
) -> Result<Loaded, CheckpointError> {
    use std::io::Read;
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(CheckpointError::Missing),
        Err(e) => return Err(CheckpointError::Unreadable(e)),
    };
    let len = f.metadata().map_err(CheckpointError::Unreadable)?.len();
    let mut head_bytes = [0u8; HEADER];
    if len < (HEADER + 12) as u64
        || f.read_exact(&mut head_bytes).is_err()
        || &head_bytes[0..8] != MAGIC
    {
        return Err(CheckpointError::NotACheckpoint);
    }
    let data = &head_bytes;
    if u32::from_le_bytes([data[8], data[9], data[10], data[11]]) != VERSION {
        return Err(CheckpointError::UnknownVersion);
    }
    let clock = u32::from_le_bytes([data[12], data[13], data[14], data[15]]);
    let (chunk_size, nchunks, nbuckets) = (u64_at(data, 16), u64_at(data, 24), u64_at(data, 32));
    let (head, tail, cas) = (u64_at(data, 40), u64_at(data, 48), u64_at(data, 56));
    let mut crc = crc32fast::Hasher::new();
    crc.update(data);
    const PIECE: usize = 16 << 10;
    let mut buf = vec![0u8; PIECE * BUCKET_BYTES];
    if chunk_size != geo.chunk_size || nchunks != geo.nchunks || nbuckets != geo.nbuckets {
        // Other sizes wipe the flash file: only when the whole checkpoint is intact (a damaged
        // header is a damaged checkpoint, and the log is replayed).
        let mut left = len - (HEADER + 12) as u64;
        while left > 0 {
            let n = (buf.len() as u64).min(left) as usize;
            f.read_exact(&mut buf[..n])
                .map_err(|_| CheckpointError::Damaged)?;
            crc.update(&buf[..n]);
            left -= n as u64;
        }
        let mut foot = [0u8; 12];
        f.read_exact(&mut foot)
            .map_err(|_| CheckpointError::Damaged)?;
        if &foot[4..] != END
            || u32::from_le_bytes([foot[0], foot[1], foot[2], foot[3]]) != crc.finalize()
        {
            return Err(CheckpointError::Damaged);
        }
        return Err(CheckpointError::GeometryChanged);
    }
    if Some(len)
        != nbuckets
            .checked_mul(BUCKET_BYTES as u64)
            .map(|b| b + (HEADER + 12) as u64)
    {
        return Err(CheckpointError::BadLength);
    }
    if index.buckets.len() as u64 != nbuckets {
        return Err(CheckpointError::GeometryChanged);
    }
    let mut dram_entry = false;
    for start in (0..nbuckets as usize).step_by(PIECE) {
        let n = PIECE.min(nbuckets as usize - start);
        let piece = &mut buf[..n * BUCKET_BYTES];
        f.read_exact(piece).map_err(|_| CheckpointError::Damaged)?;
        crc.update(piece);
        for (i, b) in index.buckets[start..start + n].iter_mut().enumerate() {
            for (w, e) in b.e.iter_mut().enumerate() {
                let at = i * BUCKET_BYTES + w * ENTRY_BYTES;
                *e = Entry {
                    w: [
                        u32_at(piece, at),
                        u32_at(piece, at + 4),
                        u32_at(piece, at + 8),
                    ],
                };
                if e.is_empty() {
                    continue;
                }
                if e.in_dram() {
                    dram_entry = true;
                    *e = Entry::default();
                    continue;
                }
                // Locations are read against `head`; entries already dead then are dropped, so
                // none is older than the flash size when the replay moves the head on.
                if matches!(e.loc(head), Loc::Flash(a) if a < tail) {
                    *e = Entry::default();
                }
            }
        }
    }
    let mut foot = [0u8; 12];
    f.read_exact(&mut foot)
        .map_err(|_| CheckpointError::Damaged)?;
    if &foot[4..] != END
        || u32::from_le_bytes([foot[0], foot[1], foot[2], foot[3]]) != crc.finalize()
    {
        return Err(CheckpointError::Damaged);
    }
    if dram_entry {
        return Err(CheckpointError::DramEntry);
    }
    Ok(Loaded {
        head,
        tail,
        cas,
        clock,
    })
}

/// What recovery rebuilt, for the store to take over: the index was filled in place; the store
/// then sets `tail`, opens chunk `open_no` for new writes, recounts the live entries (dropping
/// dead ones) and puts the item count in `report.items`.
pub struct Recovered {
    pub report: RecoveryReport,
    /// The highest cas seen (checkpoint and replayed records).
    pub cas: u64,
    /// The index's LRU clock after replay.
    pub clock: u32,
    /// Log addresses below this are reclaimed.
    pub tail: u64,
    /// The chunk new writes go to.
    pub open_no: u64,
}

/// Rebuilds `index` (empty, of `geo`'s size) from the checkpoint and the log.
pub fn recover(
    index: &mut Index,
    geo: Geometry,
    seal: Option<&SealHook>,
    flash: &FlashFile,
    ckpt: &Path,
) -> std::io::Result<Recovered> {
    let cs = geo.chunk_size;
    let mut report = RecoveryReport::default();
    let (mut cas, mut clock) = (0u64, 0u32);
    let loaded = load_checkpoint(ckpt, geo, index);
    if let Err(CheckpointError::GeometryChanged) = &loaded {
        // Sizes changed: the old log cannot be addressed; start empty.
        flash.wipe(cs * geo.nchunks)?;
        let _ = std::fs::remove_file(ckpt);
        report.checkpoint_note = "sizes changed since the last run: started empty".into();
        return Ok(Recovered {
            report,
            cas,
            clock,
            tail: 0,
            open_no: 0,
        });
    }
    // Chunk headers: which chunk number each slot of the file holds.
    let mut valid: Vec<u64> = Vec::new();
    let mut hdr = AlignedBuf::zeroed(ALIGN);
    for phys in 0..geo.nchunks {
        if flash.read_at(hdr.as_mut_slice(), phys * cs).is_err() {
            continue;
        }
        if let Some(no) = flash::read_chunk_header(hdr.as_slice(), cs) {
            if no % geo.nchunks == phys {
                valid.push(no);
            }
        }
    }
    valid.sort_unstable();
    let (run, start_off, mut tail) = match loaded {
        Ok(l) => {
            report.checkpoint_loaded = true;
            report.checkpoint_note = "loaded".into();
            cas = cas.max(l.cas);
            clock = l.clock;
            let start = l.head / cs;
            let mut run = Vec::new();
            for &no in valid.iter().filter(|&&n| n >= start) {
                match run.last() {
                    None => run.push(no),
                    Some(&p) if no == p + 1 => run.push(no),
                    _ => break,
                }
            }
            let mut tail = l.tail;
            let mut start_off = l.head;
            if run.first().is_some_and(|&f| f != start) {
                // The checkpoint's head chunk was overwritten: what it pointed at before the
                // first surviving chunk is gone.
                tail = tail.max(run[0] * cs);
                start_off = run[0] * cs;
            }
            if run.is_empty() {
                run.push(start);
                start_off = l.head;
            }
            (run, start_off, tail)
        }
        Err(reason) => {
            report.checkpoint_note = if matches!(reason, CheckpointError::Missing) {
                "no checkpoint: replayed the whole log".into()
            } else {
                format!("checkpoint skipped: {reason}; replayed the whole log")
            };
            // The freshest consecutive run of chunks.
            let mut run: Vec<u64> = Vec::new();
            for &no in valid.iter().rev() {
                match run.last() {
                    None => run.push(no),
                    Some(&p) if p == no + 1 => run.push(no),
                    _ => break,
                }
            }
            run.reverse();
            let first = run.first().copied().unwrap_or(0);
            (run, first * cs, first * cs)
        }
    };
    let mut buf = AlignedBuf::zeroed(cs as usize);
    let mut last_no = None;
    for &no in &run {
        let phys = (no % geo.nchunks) * cs;
        if flash.read_at(buf.as_mut_slice(), phys).is_err()
            || flash::read_chunk_header(buf.as_slice(), cs) != Some(no)
        {
            break;
        }
        last_no = Some(no);
        report.chunks_replayed += 1;
        let mut off = if no == start_off / cs {
            ((start_off % cs) as usize).max(CHUNK_HEADER)
        } else {
            CHUNK_HEADER
        };
        while off + REC_HEADER <= cs as usize {
            let Some(rec) = flash::decode_record(&buf.as_slice()[off..]) else {
                break;
            };
            if rec.addr != no * cs + off as u64 {
                break;
            }
            report.records_replayed += 1;
            cas = cas.max(rec.cas);
            let step = flash::record_len(rec.key.len(), rec.value.len());
            let Some((kind, key, _)) = flash::open_record(seal, &rec) else {
                // Sealed with another key, or not sealed as configured: skipped, never served.
                off += step;
                continue;
            };
            match kind {
                flash::KIND_SET | flash::KIND_SET_STALE => {
                    let kh = KeyHash::of(&key);
                    clock = clock.wrapping_add(1);
                    let (pos, alt) = match index.find(kh, key.len()) {
                        Some(p) => (p, index.get(p).alt()),
                        None => index.victim(kh, clock, |_| false),
                    };
                    *index.get_mut(pos) = Entry::new(
                        Loc::Flash(rec.addr),
                        key.len(),
                        kh.tag,
                        rec.value.len(),
                        clock,
                        alt,
                    );
                }
                flash::KIND_DELETE => {
                    let kh = KeyHash::of(&key);
                    if let Some(pos) = index.find(kh, key.len()) {
                        *index.get_mut(pos) = Entry::default();
                    }
                }
                _ => index.clear(),
            }
            off += step;
        }
    }
    let open_no = match last_no {
        Some(n) => n + 1,
        None => {
            if report.checkpoint_loaded {
                start_off / cs + 1
            } else {
                valid.last().map_or(0, |&n| n + 1)
            }
        }
    };
    if last_no.is_none() && !report.checkpoint_loaded {
        tail = open_no * cs;
    }
    // Chunks numbered at or past the new head are leftovers: make sure no later scan takes them.
    let zero = AlignedBuf::zeroed(ALIGN);
    for &no in valid.iter().filter(|&&n| n >= open_no) {
        flash.write_at(zero.as_slice(), (no % geo.nchunks) * cs)?;
    }
    Ok(Recovered {
        report,
        cas,
        clock,
        tail,
        open_no,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry {
            chunk_size: 1 << 20,
            nchunks: 8,
            nbuckets: 1024,
            dram_budget: 1 << 20,
        }
    }

    /// Each way a checkpoint is refused has its own error, and an intact one loads.
    #[test]
    fn checkpoint_refusals_are_typed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt");
        let load = |g: Geometry| load_checkpoint(&path, g, &mut Index::new(g.nbuckets as usize));
        assert!(matches!(load(geo()), Err(CheckpointError::Missing)));
        std::fs::write(&path, b"short").unwrap();
        assert!(matches!(load(geo()), Err(CheckpointError::NotACheckpoint)));
        let snap = Snapshot {
            buckets: vec![Bucket::default(); geo().nbuckets as usize],
            head: 4096,
            tail: 0,
            cas: 9,
            clock: 5,
            geo: geo(),
        };
        write_checkpoint(&path, &snap).unwrap();
        let l = load(geo()).unwrap();
        assert_eq!((l.head, l.cas, l.clock), (4096, 9, 5));
        // A header damaged into other sizes is a damaged checkpoint, not a reason to wipe.
        let mut data = std::fs::read(&path).unwrap();
        data[24] ^= 1;
        std::fs::write(&path, &data).unwrap();
        assert!(matches!(load(geo()), Err(CheckpointError::Damaged)));
        write_checkpoint(&path, &snap).unwrap();
        let other = Geometry {
            nchunks: 16,
            ..geo()
        };
        assert!(matches!(load(other), Err(CheckpointError::GeometryChanged)));
        let mut data = std::fs::read(&path).unwrap();
        data[100] ^= 1;
        std::fs::write(&path, &data).unwrap();
        assert!(matches!(load(geo()), Err(CheckpointError::Damaged)));
    }

    /// Entries come back as written, read against the checkpoint's head (also past a wrap of
    /// the stored location bits); entries already below its tail are dropped.
    #[test]
    fn checkpoint_entries_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt");
        let head = 5 * crate::index::LOG_WINDOW + 4096;
        let tail = head - (8 << 20);
        let mut buckets = vec![Bucket::default(); geo().nbuckets as usize];
        let live = [head - 64, tail, 5 * crate::index::LOG_WINDOW - 8];
        for (i, &a) in live.iter().enumerate() {
            buckets[i].e[WAYS - 1] = Entry::new(Loc::Flash(a), 250, 0xFFFF, 1000, 7 << 8, true);
        }
        buckets[9].e[0] = Entry::new(Loc::Flash(tail - 8), 3, 1, 10, 0, false);
        let snap = Snapshot {
            buckets,
            head,
            tail,
            cas: 1,
            clock: 9,
            geo: geo(),
        };
        write_checkpoint(&path, &snap).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            (HEADER + 1024 * 64 + 12) as u64
        );
        let mut l = Index::new(1024);
        load_checkpoint(&path, geo(), &mut l).unwrap();
        for (i, &a) in live.iter().enumerate() {
            assert_eq!(l.buckets[i].e[WAYS - 1], snap.buckets[i].e[WAYS - 1]);
            assert_eq!(l.buckets[i].e[WAYS - 1].loc(head), Loc::Flash(a));
        }
        assert!(
            l.buckets[9].e[0].is_empty(),
            "dead at the checkpoint: dropped"
        );
        let n = l
            .buckets
            .iter()
            .flat_map(|b| b.e.iter())
            .filter(|e| !e.is_empty())
            .count();
        assert_eq!(n, 3);
    }

    /// A checkpoint of format version 1 (four 16-byte entries per bucket, the same file length
    /// for the same bucket count) is refused by its version, never read as this format.
    #[test]
    fn version_1_checkpoint_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt");
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&5u32.to_le_bytes());
        for v in [1u64 << 20, 8, 1024, 4096, 0, 9] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for b in 0..1024u64 {
            // Version 1's entry: 48-bit location / 8, key length at bit 49, ...
            let w0 = ((4096 + 64 * b) / 8) | (10 << 49);
            let w1 = 3u64 | (1000 << 32);
            for _ in 0..4 {
                out.extend_from_slice(&w0.to_le_bytes());
                out.extend_from_slice(&w1.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(END);
        std::fs::write(&path, &out).unwrap();
        assert_eq!(
            out.len(),
            HEADER + 1024 * BUCKET_BYTES + 12,
            "same length as version 2"
        );
        assert!(matches!(
            load_checkpoint(&path, geo(), &mut Index::new(1024)),
            Err(CheckpointError::UnknownVersion)
        ));
    }
}

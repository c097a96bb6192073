//! The device's spill files: rows it cannot hold, written aside in buckets and read back one
//! bucket at a time. Each batch is one seal record of its Arrow IPC stream bytes, so damage
//! (and, sealed, any change) is found when it is read back; files live in a directory of
//! their own under the spill directory, removed when the query ends, fails or is cancelled.
//! The layout is in docs/FORMATS.md, "Device spill files".

use super::stats::Counters;
use arrow_array::RecordBatch;
use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig, Sealer, Unsealer};
use inpath_table::error::{Error, Result};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

/// Where a device spills and how it seals what it writes there.
#[derive(Clone, Debug)]
pub struct SpillTo {
    /// The directory (none: the system's temporary directory).
    pub dir: Option<PathBuf>,
    /// The tier of each record: the tables' codec, and AES-256-GCM under a key made for the
    /// query alone (held in memory, never written) when the tables are encrypted.
    pub seal: SealConfig,
}

impl Default for SpillTo {
    fn default() -> Self {
        SpillTo {
            dir: None,
            seal: SealConfig {
                compression: Compression::None,
                cipher: Cipher::None,
            },
        }
    }
}

impl SpillTo {
    /// Spills under `dir` sealed as the most protected of `tables` is: its codec, and
    /// AES-256-GCM (under a key of the query's own) when any table is encrypted.
    pub fn for_tables<'a>(
        dir: Option<PathBuf>,
        tables: impl IntoIterator<Item = &'a inpath_table::TableReader>,
    ) -> SpillTo {
        let mut seal = SpillTo::default().seal;
        for t in tables {
            let tier = &t.manifest().tier;
            if tier.cipher != "none" {
                seal.cipher = Cipher::Gcm;
            }
            if let (Compression::None, Ok(c)) =
                (seal.compression, Compression::parse(&tier.compression))
            {
                seal.compression = c;
            }
        }
        SpillTo { dir, seal }
    }
}

/// The key id spill records carry (a key of the query's own, not one of the key file's).
const SPILL_KEY_ID: u32 = 0x5350_494c;

/// A bucket's file, opened on its first write, and its records' (offset, length).
type Bucket = Option<(std::fs::File, Vec<(u64, u64)>)>;

/// One query's spill files: a file per bucket in a directory of the query's own.
pub(super) struct SpillFiles {
    dir: tempfile::TempDir,
    files: Vec<Bucket>,
    sealer: Sealer,
    unsealer: Unsealer,
    end: Vec<u64>,
}

impl SpillFiles {
    /// A directory for `buckets` buckets under `to`'s directory.
    pub(super) fn create(to: &SpillTo, buckets: usize) -> Result<SpillFiles> {
        let base = to.dir.clone().unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix(".inpath-spill-")
            .tempdir_in(&base)
            .map_err(|e| Error::io(&base, e))?;
        let seal_err = |e: inpath_seal::Error| Error::Offload {
            detail: format!("cannot seal the device's spill files: {e}"),
        };
        let mut ring = KeyRing::new();
        let sealer = match to.seal.cipher {
            Cipher::None => Sealer::new(to.seal, None).map_err(seal_err)?,
            _ => {
                let key = Key::generate(256).map_err(seal_err)?;
                let sealer = Sealer::new(
                    SealConfig {
                        compression: to.seal.compression,
                        cipher: Cipher::Gcm,
                    },
                    Some((SPILL_KEY_ID, &key)),
                )
                .map_err(seal_err)?;
                ring.insert(SPILL_KEY_ID, key);
                sealer
            }
        };
        Ok(SpillFiles {
            dir,
            files: (0..buckets).map(|_| None).collect(),
            sealer,
            unsealer: Unsealer::new(&ring),
            end: vec![0; buckets],
        })
    }

    fn path(&self, bucket: usize) -> PathBuf {
        self.dir.path().join(format!("bucket-{bucket}.spill"))
    }

    /// Appends `batch` to `bucket`'s file; the bytes written.
    pub(super) fn write(
        &mut self,
        bucket: usize,
        batch: &RecordBatch,
        counters: &Counters,
    ) -> Result<u64> {
        let path = self.path(bucket);
        let io = |e: std::io::Error| Error::io(&path, e);
        let mut bytes = Vec::new();
        {
            let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut bytes, &batch.schema())
                .map_err(|e| spill_error(&path, e))?;
            w.write(batch).map_err(|e| spill_error(&path, e))?;
            w.finish().map_err(|e| spill_error(&path, e))?;
        }
        let record = self.sealer.seal(&bytes).map_err(|e| Error::Offload {
            detail: format!("cannot seal a spill record: {e}"),
        })?;
        if self.files[bucket].is_none() {
            let file = std::fs::OpenOptions::new()
                .create_new(true)
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io)?;
            self.files[bucket] = Some((file, Vec::new()));
        }
        let Some((file, records)) = self.files[bucket].as_mut() else {
            return Err(Error::Offload {
                detail: "a spill bucket without its file".into(),
            });
        };
        let at = self.end[bucket];
        file.seek(SeekFrom::Start(at)).map_err(io)?;
        file.write_all(&record).map_err(io)?;
        records.push((at, record.len() as u64));
        self.end[bucket] += record.len() as u64;
        Counters::add(&counters.spill_bytes, record.len() as u64);
        Ok(record.len() as u64)
    }

    /// Every batch written to `bucket`, in order. A file deleted, shortened or changed since
    /// it was written is an error naming it.
    pub(super) fn read(&mut self, bucket: usize) -> Result<Vec<RecordBatch>> {
        let path = self.path(bucket);
        let Some((file, records)) = self.files[bucket].as_mut() else {
            return Ok(Vec::new());
        };
        let damaged = |why: String| Error::Offload {
            detail: format!(
                "the device's spill file {} was damaged or removed while the query ran: {why}",
                path.display()
            ),
        };
        if !path.exists() {
            return Err(damaged("it is gone".into()));
        }
        let mut batches = Vec::new();
        let mut record = Vec::new();
        for &(at, len) in records.iter() {
            record.resize(len as usize, 0);
            file.seek(SeekFrom::Start(at))
                .and_then(|_| file.read_exact(&mut record))
                .map_err(|e| damaged(e.to_string()))?;
            let bytes = self
                .unsealer
                .unseal(&record)
                .map_err(|e| damaged(e.to_string()))?;
            let reader =
                arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
                    .map_err(|e| damaged(e.to_string()))?;
            for b in reader {
                batches.push(b.map_err(|e| damaged(e.to_string()))?);
            }
        }
        Ok(batches)
    }

    /// The directory (tests look inside it).
    #[cfg(test)]
    pub(super) fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

fn spill_error(path: &std::path::Path, e: arrow_schema::ArrowError) -> Error {
    Error::Offload {
        detail: format!("cannot write the spill file {}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(0..n)),
                Arc::new(StringArray::from_iter(
                    (0..n).map(|i| (i % 3 != 0).then(|| format!("v{i}"))),
                )),
            ],
        )
        .unwrap()
    }

    /// Batches come back as written, bucket by bucket, plain and sealed (AES-256-GCM under
    /// the query's own key, LZ4); the files are gone once the spill is dropped.
    #[test]
    fn batches_round_trip_and_the_directory_goes_with_the_query() {
        let base = tempfile::tempdir().unwrap();
        for cipher in [Cipher::None, Cipher::Gcm] {
            let to = SpillTo {
                dir: Some(base.path().to_path_buf()),
                seal: SealConfig {
                    compression: Compression::Lz4,
                    cipher,
                },
            };
            let counters = Counters::default();
            let mut spill = SpillFiles::create(&to, 3).unwrap();
            let dir = spill.dir().to_path_buf();
            spill.write(0, &batch(10), &counters).unwrap();
            spill.write(2, &batch(1000), &counters).unwrap();
            spill.write(0, &batch(5), &counters).unwrap();
            assert_eq!(spill.read(0).unwrap(), vec![batch(10), batch(5)]);
            assert_eq!(spill.read(1).unwrap(), Vec::<RecordBatch>::new());
            assert_eq!(spill.read(2).unwrap(), vec![batch(1000)]);
            assert!(
                counters
                    .spill_bytes
                    .load(std::sync::atomic::Ordering::Relaxed)
                    > 0
            );
            // Sealed, no value is in the file as written.
            let bytes = std::fs::read(dir.join("bucket-2.spill")).unwrap();
            if cipher == Cipher::Gcm {
                let clear = memchr::memmem::find(&bytes, b"v999").is_some();
                assert!(!clear, "a sealed spill file holds a value in the clear");
            }
            drop(spill);
            assert!(!dir.exists(), "{} left behind", dir.display());
        }
        assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
    }

    /// A spill file changed or removed while the query runs fails the read with an error
    /// naming it; a sealed one detects a changed byte.
    #[test]
    fn a_damaged_or_removed_spill_file_is_an_error() {
        let base = tempfile::tempdir().unwrap();
        for cipher in [Cipher::None, Cipher::Gcm] {
            let to = SpillTo {
                dir: Some(base.path().to_path_buf()),
                seal: SealConfig {
                    compression: Compression::None,
                    cipher,
                },
            };
            let counters = Counters::default();
            let mut spill = SpillFiles::create(&to, 2).unwrap();
            spill.write(0, &batch(100), &counters).unwrap();
            spill.write(1, &batch(100), &counters).unwrap();
            let path = spill.dir().join("bucket-0.spill");
            let mut bytes = std::fs::read(&path).unwrap();
            let at = bytes.len() - 20;
            bytes[at] ^= 1;
            std::fs::write(&path, &bytes).unwrap();
            let e = spill.read(0).unwrap_err().to_string();
            assert!(e.contains("bucket-0.spill") && e.contains("damaged"), "{e}");
            std::fs::remove_file(spill.dir().join("bucket-1.spill")).unwrap();
            let e = spill.read(1).unwrap_err().to_string();
            assert!(e.contains("bucket-1.spill") && e.contains("gone"), "{e}");
        }
    }

    /// A spill directory that does not exist is an error naming it, not a panic.
    #[test]
    fn a_missing_spill_directory_is_named() {
        let to = SpillTo {
            dir: Some(PathBuf::from("/nonexistent/inpath-spill")),
            ..SpillTo::default()
        };
        let e = SpillFiles::create(&to, 1).err().unwrap().to_string();
        assert!(e.contains("/nonexistent/inpath-spill"), "{e}");
    }
}

//! The `crc` tap: bytes and CRC-32 (IEEE, as zlib's `crc32`) of each job.

use crate::contract::{JobId, Partial, Tap, TapFactory, TapOutput};
use crate::error::{not_mergeable, Result};
use serde_json::{json, Value};
use std::any::Any;

/// Makes [`CrcTap`]s: bytes and CRC-32 (IEEE) of each job. A second, simple tap: it proves
/// that several taps run on the same bytes and lets a test check that a tap saw exactly the
/// forwarded stream.
#[derive(Clone, Copy, Debug, Default)]
pub struct CrcTapFactory;

impl TapFactory for CrcTapFactory {
    fn name(&self) -> &str {
        "crc"
    }

    fn describe(&self) -> String {
        "crc".into()
    }

    fn make(&self) -> Result<Box<dyn Tap>> {
        Ok(Box::new(CrcTap::default()))
    }
}

/// Bytes and CRC-32 of a job.
#[derive(Default)]
pub struct CrcTap {
    hasher: crc32fast::Hasher,
    bytes: u64,
}

impl Tap for CrcTap {
    fn update(&mut self, chunk: &[u8]) -> std::result::Result<(), inpath_core::Error> {
        self.hasher.update(chunk);
        self.bytes += chunk.len() as u64;
        Ok(())
    }

    fn live_json(&self) -> Value {
        json!({"bytes": self.bytes, "crc32": self.hasher.clone().finalize()})
    }

    fn snapshot(&self) -> Box<dyn Partial> {
        Box::new(CrcPartial {
            bytes: self.bytes,
            jobs: 1,
            crc32: Some(self.hasher.clone().finalize()),
        })
    }

    fn finish(&mut self, _job: JobId, _error: Option<&str>) -> TapOutput {
        let hasher = std::mem::take(&mut self.hasher);
        let partial = CrcPartial {
            bytes: std::mem::take(&mut self.bytes),
            jobs: 1,
            crc32: Some(hasher.finalize()),
        };
        TapOutput {
            json: partial.to_json(),
            partial: Box::new(partial),
        }
    }
}

/// Bytes and jobs of merged `crc` results. The CRC of a single job is kept; merged results
/// have none (jobs from different connections have no order to checksum them in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrcPartial {
    /// Bytes seen.
    pub bytes: u64,
    /// Jobs merged.
    pub jobs: u64,
    /// CRC-32 of the job's bytes, for a single job.
    pub crc32: Option<u32>,
}

impl Partial for CrcPartial {
    fn to_json(&self) -> Value {
        match self.crc32 {
            Some(crc) => json!({"bytes": self.bytes, "crc32": crc}),
            None => json!({"bytes": self.bytes, "jobs": self.jobs}),
        }
    }

    fn merge_from(&mut self, other: &dyn Partial) -> Result<()> {
        let other = other
            .as_any()
            .downcast_ref::<CrcPartial>()
            .ok_or_else(|| not_mergeable("crc", "a crc result"))?;
        self.bytes += other.bytes;
        self.jobs += other.jobs;
        self.crc32 = None;
        Ok(())
    }

    fn clone_box(&self) -> Box<dyn Partial> {
        Box::new(*self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

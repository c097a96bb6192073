//! What every `inpath query` verb that opens a session shares: the offload and host-memory
//! flags, the session itself, the default thread count, the key hint on errors.

use crate::common::KeyFile;
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};

/// How a session offloads Table Tasks to the device (issue 14).
#[derive(Args, Clone)]
pub(crate) struct OffloadArgs {
    /// Run what the device can (aggregates over one table's or a join tree's filtered,
    /// computed rows) beside the pages, on the device's own lanes and memory; the host merges
    /// its partial results.
    #[arg(long)]
    pub(crate) offload: bool,
    /// The device's memory (such as 160MiB; default 16 MiB per TPC-H SF 1 of rows, AQUOMAN's
    /// 16 GB per TB, at least 40 MiB, and at least 128 bytes per row of a page and 1 MiB per
    /// lane). A group-by that outgrows it hands partial groups to the host early; joins and
    /// groups the device must hold that outgrow it run in key-range passes.
    #[arg(long, value_parser = crate::common::parse_size, requires = "offload")]
    pub(crate) device_memory: Option<u64>,
    /// Where the host's sorts, group-bys and joins spill beyond --memory-limit, and the device
    /// its groups merged across key-range passes beyond a quarter of its memory (default: the
    /// system's temporary directory). The device's spill files are sealed as the tables are
    /// (AES-256-GCM under a key of the query's own when they are encrypted); all are removed
    /// when the query ends.
    #[arg(long, value_parser = spill_dir)]
    pub(crate) spill_dir: Option<PathBuf>,
    /// The most memory the host's operators hold (such as 4GiB; default: half of the
    /// machine's memory): beyond it they spill, and without --offload, when a table is larger
    /// than a quarter of it, joins are sort-merge joins, which spill, instead of hash joins.
    #[arg(long, value_parser = crate::common::parse_size)]
    pub(crate) memory_limit: Option<u64>,
    /// Device lanes (default: --threads).
    #[arg(long, requires = "offload")]
    pub(crate) device_lanes: Option<usize>,
    /// Hardware limits tasks must fit: `lifted` (the software device's, default) or `thesis`
    /// (AQUOMAN's: 1024 group buckets, 16-byte group ids, 4 comparators, 4 PEs x 8
    /// instructions, one read port).
    #[arg(long, default_value = "lifted", value_parser = ["lifted", "thesis"], requires = "offload")]
    pub(crate) fidelity: String,
    /// Where the device runs: `local` (its lanes are threads of this process, default) or
    /// `process` (a process of its own, `inpath query serve-device`, over a pipe: the pages
    /// it reads, its build rows and group tables are held in that process's memory, not the
    /// host's, as on AQUOMAN's flash device).
    #[arg(long, default_value = "local", value_parser = ["local", "process"], requires = "offload")]
    pub(crate) device: String,
}

impl OffloadArgs {
    fn host(&self) -> inpath_query::sql::HostOptions {
        inpath_query::sql::HostOptions {
            memory_limit: self.memory_limit,
            spill_dir: self.spill_dir.clone(),
            sort_merge: None,
        }
    }

    fn options(
        &self,
        dir: &Path,
        keys: &KeyFile,
    ) -> anyhow::Result<Option<inpath_query::sql::OffloadOptions>> {
        if !self.offload {
            return Ok(None);
        }
        let mut device_command = if self.device == "process" {
            let exe = std::env::current_exe()
                .context("cannot find this program to start the device process")?;
            let mut argv: Vec<std::ffi::OsString> = vec![
                exe.into(),
                "query".into(),
                "serve-device".into(),
                dir.into(),
            ];
            if let Some(k) = &keys.key_file {
                argv.extend(["--key-file".into(), k.into()]);
            }
            if keys.allow_insecure_key_file {
                argv.push("--allow-insecure-key-file".into());
            }
            Some(argv)
        } else {
            None
        };
        if let (Some(dir), Some(argv)) = (&self.spill_dir, &mut device_command) {
            argv.extend(["--spill-dir".into(), dir.into()]);
        }
        Ok(Some(inpath_query::sql::OffloadOptions {
            memory: self.device_memory,
            spill_dir: self.spill_dir.clone(),
            lanes: self.device_lanes,
            limits: if self.fidelity == "thesis" {
                inpath_query::rule::Limits::THESIS
            } else {
                inpath_query::rule::Limits::LIFTED
            },
            device_command,
        }))
    }
}

/// A spill directory: one that exists and is a directory (the device writes a directory of
/// its own inside it per query).
pub(crate) fn spill_dir(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => Ok(path),
        Ok(_) => Err(format!("{text} is not a directory")),
        Err(e) => Err(format!("{text}: {e} (the spill directory must exist)")),
    }
}

/// The error, with a hint when a sealed manifest met no key file.
pub(crate) fn key_hint(keys: &KeyFile, e: inpath_query::Error) -> anyhow::Error {
    {
        let hint = match (&e, &keys.key_file) {
            (inpath_query::Error::ManifestSeal { .. }, None) => {
                " (the manifest is sealed: pass --key-file)"
            }
            _ => "",
        };
        anyhow::anyhow!("{e}{hint}")
    }
}

pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub(crate) fn open_session(
    dir: &Path,
    keys: &KeyFile,
    threads: usize,
    offload: &OffloadArgs,
) -> anyhow::Result<inpath_query::SqlSession> {
    let ring = keys.ring()?;
    inpath_query::SqlSession::open_host(
        dir,
        &ring,
        threads,
        offload.options(dir, keys)?,
        &offload.host(),
    )
    .map_err(|e| key_hint(keys, e))
}

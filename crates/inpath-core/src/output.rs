//! Writing outputs without ever losing a user's data.
//!
//! Every inpath writer goes through this module, which guarantees:
//!
//! - **The output is never one of the inputs.** Before anything is read or created, the output
//!   is compared with every input by device and inode (after following symbolic links, so hard
//!   links, symlinks and `./a` vs `a` are all caught; standard input counts when it is a
//!   redirected file). A match is refused with [`Error::SameFile`].
//! - **All or nothing.** A file output is written to a temporary file in the target's own
//!   directory (`.NAME.XXXXXXXX.inpath-tmp`,
//!   created with `O_EXCL`), flushed, `fsync`ed and renamed over the target only
//!   by [`OutputFile::commit`]; the directory is then `fsync`ed too. If anything fails first
//!   (bad input, full disk, a killed pipe, a panic that unwinds), the temporary file is removed
//!   when the [`OutputFile`] is dropped and the target keeps its old contents, or stays absent.
//! - **Links and modes are kept.** When the target is a symbolic link, the file it points to is
//!   replaced and the link stays. A replaced file keeps its permission bits; a new file gets
//!   `0666` less the umask, as `File::create` would (or the mode asked for, such as `0600` for
//!   key files).
//! - **Standard output (`-`) streams**, as users expect from pipes: bytes go out as they are
//!   made, and a failure part-way leaves what was already written.
//!
//! Only a process killed by a signal (Ctrl-C, SIGTERM, SIGKILL) or a power loss before the
//! rename can leave the hidden temporary file behind; the target is still intact.
//!
//! ```
//! use inpath_core::output::OutputFile;
//! use std::io::Write;
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("out.txt");
//! let mut out = OutputFile::create(&path, &[])?;
//! out.write_all(b"hello")?;
//! assert!(!path.exists()); // nothing is visible before the commit
//! out.commit()?;
//! assert_eq!(std::fs::read(&path)?, b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::{Error, Input, Result};
use std::fs::{File, Permissions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Identity of a file: (device, inode).
#[cfg(unix)]
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn identity(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// The path whose identity stands for an input: the file, or `/dev/stdin` for standard input
/// (on Linux it resolves to whatever standard input was redirected from).
fn input_path(input: &Input) -> &Path {
    match input {
        Input::Stdin => Path::new("/dev/stdin"),
        Input::File(p) => p,
    }
}

/// Refuses an output that is the same file as one of `inputs` (same device and inode, after
/// following links). An output that does not exist yet is never an input. Call it before
/// reading anything, so a refused command does no work.
pub fn check_distinct(output: &Path, inputs: &[Input]) -> Result<()> {
    let Some(out_id) = identity(output) else {
        return Ok(());
    };
    for input in inputs {
        if identity(input_path(input)).as_ref() == Some(&out_id) {
            return Err(Error::SameFile {
                output: output.to_path_buf(),
                input: match input {
                    Input::Stdin => PathBuf::from("standard input"),
                    Input::File(p) => p.clone(),
                },
            });
        }
    }
    Ok(())
}

/// Refuses to stream to standard output when standard output is a regular file that is also
/// an input (`inpath compress a >> a` would read its own output forever).
pub fn check_stdout_distinct(inputs: &[Input]) -> Result<()> {
    let stdout = Path::new("/dev/stdout");
    match std::fs::metadata(stdout) {
        Ok(m) if m.is_file() => check_distinct(stdout, inputs).map_err(|e| match e {
            Error::SameFile { input, .. } => Error::SameFile {
                output: PathBuf::from("standard output"),
                input,
            },
            other => other,
        }),
        _ => Ok(()),
    }
}

/// A file output written all-or-nothing: see the [module docs](self).
#[derive(Debug)]
pub struct OutputFile {
    /// The path as the user named it (for messages).
    shown: PathBuf,
    /// The file that is replaced on commit (the link's target when `shown` is a symlink).
    target: PathBuf,
    /// The temporary file, removed on drop unless committed.
    tmp: PathBuf,
    file: Option<BufWriter<File>>,
    committed: bool,
    /// Bytes handed to `file` so far.
    written: u64,
    /// Bytes whose writeback has been started ([`OutputFile::kick_writeback`]).
    kicked: u64,
}

impl OutputFile {
    /// Starts writing `path`, after checking that it is none of `inputs`. New files get mode
    /// `0666` less the umask; replaced files keep their mode.
    pub fn create(path: &Path, inputs: &[Input]) -> Result<OutputFile> {
        OutputFile::open(path, inputs, None)
    }

    /// Like [`OutputFile::create`], with the file's permission bits set to `mode` whether it is
    /// new or replaced (for example `0o600` for secrets). Ignored off Unix.
    pub fn create_with_mode(path: &Path, inputs: &[Input], mode: u32) -> Result<OutputFile> {
        OutputFile::open(path, inputs, Some(mode))
    }

    fn open(path: &Path, inputs: &[Input], mode: Option<u32>) -> Result<OutputFile> {
        let write_err = |source: std::io::Error| Error::Write {
            path: path.to_path_buf(),
            source,
        };
        if path.as_os_str().is_empty() {
            return Err(write_err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the output path is empty",
            )));
        }
        check_distinct(path, inputs)?;
        let existing = std::fs::metadata(path).ok();
        if existing.as_ref().is_some_and(|m| m.is_dir()) {
            return Err(write_err(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "is a directory; name a file inside it",
            )));
        }
        if existing.as_ref().is_some_and(|m| !m.is_file()) {
            return Err(write_err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "is not a regular file (a device or pipe cannot be replaced; use -o - and redirect)",
            )));
        }
        // Replace what a symlink points to, not the link itself.
        let target = match existing {
            Some(_) => std::fs::canonicalize(path).map_err(write_err)?,
            None => path.to_path_buf(),
        };
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "output".into());
        let (tmp, file) = create_temp(&dir, &name, mode.unwrap_or(0o666)).map_err(write_err)?;
        let mut out = OutputFile {
            shown: path.to_path_buf(),
            target,
            tmp,
            file: None,
            committed: false,
            written: 0,
            kicked: 0,
        };
        // Keep the mode of a file being replaced; set an asked-for mode exactly (open(2) applied
        // the umask to it).
        let keep = match (mode, &existing) {
            (Some(m), _) => Some(permissions(m)),
            (None, Some(meta)) => Some(meta.permissions()),
            (None, None) => None,
        };
        if let Some(p) = keep {
            file.set_permissions(p).map_err(write_err)?;
        }
        out.file = Some(BufWriter::with_capacity(1 << 20, file));
        Ok(out)
    }

    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Flushes, `fsync`s and renames the temporary file over the target, then `fsync`s the
    /// directory. Only after this does the output exist under its name.
    pub fn commit(mut self) -> Result<()> {
        let shown = self.shown.clone();
        let write_err = |source: std::io::Error| Error::Write {
            path: shown.clone(),
            source,
        };
        let file = self.file.take().expect("an OutputFile is committed once");
        let file = file.into_inner().map_err(|e| write_err(e.into_error()))?;
        file.sync_all().map_err(write_err)?;
        drop(file);
        std::fs::rename(&self.tmp, &self.target).map_err(write_err)?;
        self.committed = true;
        #[cfg(unix)]
        if let Some(dir) = self.target.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            // The rename is durable once the directory is; failing to sync it is not fatal
            // (some file systems refuse fsync on directories).
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if !self.committed {
            drop(self.file.take());
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Bytes written between two requests to start writing the file back to the disk.
const WRITEBACK_STEP: u64 = 8 << 20;

impl OutputFile {
    /// Starts the disk writes of what has reached the file since the last call, once there
    /// is a step's worth: the final fsync in [`OutputFile::commit`] then waits for the tail
    /// only, and the disk works while the data is still being made.
    fn kick_writeback(&mut self) {
        let Some(file) = self.file.as_ref() else {
            return;
        };
        let in_file = self.written - file.buffer().len() as u64;
        if in_file >= self.kicked + WRITEBACK_STEP {
            crate::os::start_writeback(file.get_ref(), self.kicked, in_file - self.kicked);
            self.kicked = in_file;
        }
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.as_mut().expect("not committed").write(buf)?;
        self.written += n as u64;
        self.kick_writeback();
        Ok(n)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.file.as_mut().expect("not committed").write_all(buf)?;
        self.written += buf.len() as u64;
        self.kick_writeback();
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().expect("not committed").flush()
    }
}

/// Creates `.NAME.XXXXXXXX.inpath-tmp` in `dir` with `create_new` (never an existing file),
/// mode `mode` less the umask.
fn create_temp(dir: &Path, name: &str, mode: u32) -> std::io::Result<(PathBuf, File)> {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut last = None;
    for _ in 0..64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u32(std::process::id());
        let tag = h.finish() & 0xffff_ffff;
        let tmp = dir.join(format!(".{name}.{tag:08x}.inpath-tmp"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(mode);
        }
        #[cfg(not(unix))]
        let _ = mode;
        match options.open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("at least one attempt"))
}

#[cfg(unix)]
fn permissions(mode: u32) -> Permissions {
    use std::os::unix::fs::PermissionsExt;
    Permissions::from_mode(mode)
}

#[cfg(not(unix))]
fn permissions(_mode: u32) -> Permissions {
    File::open(".")
        .and_then(|f| f.metadata())
        .map(|m| m.permissions())
        .expect("current directory metadata")
}

/// Writes `bytes` to `path` all-or-nothing, after checking that `path` is none of `inputs`.
pub fn write_file(path: &Path, bytes: &[u8], inputs: &[Input]) -> Result<()> {
    let mut out = OutputFile::create(path, inputs)?;
    out.write_all(bytes).map_err(|source| Error::Write {
        path: path.to_path_buf(),
        source,
    })?;
    out.commit()
}

/// A command's output: a file written all-or-nothing, or standard output (`-`), streamed.
pub enum Output {
    /// Standard output, buffered.
    Stdout(BufWriter<std::io::Stdout>),
    /// A file.
    File(OutputFile),
}

impl Output {
    /// Opens `arg` (`-` for standard output) after checking it against `inputs`.
    pub fn open(arg: &str, inputs: &[Input]) -> Result<Output> {
        if arg == "-" {
            check_stdout_distinct(inputs)?;
            Ok(Output::Stdout(BufWriter::with_capacity(
                1 << 20,
                std::io::stdout(),
            )))
        } else {
            Ok(Output::File(OutputFile::create(Path::new(arg), inputs)?))
        }
    }

    /// Whether this is standard output.
    pub fn is_stdout(&self) -> bool {
        matches!(self, Output::Stdout(_))
    }

    /// Finishes: flushes standard output, or commits the file.
    pub fn commit(self) -> Result<()> {
        match self {
            Output::Stdout(mut w) => w.flush().map_err(|source| Error::Write {
                path: PathBuf::from("-"),
                source,
            }),
            Output::File(f) => f.commit(),
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Output::Stdout(w) => w.write(buf),
            Output::File(f) => f.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Output::Stdout(w) => w.write_all(buf),
            Output::File(f) => f.write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(w) => w.flush(),
            Output::File(f) => f.flush(),
        }
    }
}

/// Writes batches of buffers to an [`Output`] on a thread of its own, in the order they are
/// sent, while the caller makes the next batch: a transform's lanes seal or compress batch
/// `n + 1` as batch `n` goes to the disk. At most two batches wait, so memory stays bounded;
/// written batches come back through [`WriteBehind::spare`] for reuse. It composes with the
/// safe-writer rules: [`WriteBehind::finish`] hands the output back for its commit, and a
/// [`WriteBehind`] dropped without finishing drops the output, which removes its temporary file.
pub struct WriteBehind {
    sender: Option<std::sync::mpsc::SyncSender<Vec<Vec<u8>>>>,
    spare: std::sync::mpsc::Receiver<Vec<Vec<u8>>>,
    thread: Option<std::thread::JoinHandle<(Output, std::io::Result<()>)>>,
    shown: PathBuf,
}

impl WriteBehind {
    /// Starts the writer thread for `out`; `shown` names the output in messages.
    pub fn new(mut out: Output, shown: &str) -> Result<WriteBehind> {
        let (sender, batches) = std::sync::mpsc::sync_channel::<Vec<Vec<u8>>>(2);
        let (spare_tx, spare) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("inpath-writer".into())
            .spawn(move || {
                for mut batch in batches {
                    for buf in &batch {
                        if let Err(e) = out.write_all(buf) {
                            return (out, Err(e));
                        }
                    }
                    batch.iter_mut().for_each(Vec::clear);
                    let _ = spare_tx.send(batch);
                }
                (out, Ok(()))
            })
            .map_err(|source| Error::Write {
                path: PathBuf::from(shown),
                source,
            })?;
        Ok(WriteBehind {
            sender: Some(sender),
            spare,
            thread: Some(thread),
            shown: PathBuf::from(shown),
        })
    }

    /// A written batch to fill again (its buffers emptied, their memory kept), or a new one.
    pub fn spare(&self) -> Vec<Vec<u8>> {
        self.spare.try_recv().unwrap_or_default()
    }

    /// Queues `batch` to be written after the batches before it; blocks while two are waiting.
    /// Fails with the write error when an earlier write failed.
    pub fn send(&mut self, batch: Vec<Vec<u8>>) -> Result<()> {
        let sent = match &self.sender {
            Some(sender) => sender.send(batch).is_ok(),
            None => false,
        };
        if sent {
            Ok(())
        } else {
            // The thread stopped: only a failed write does that.
            self.join().and_then(|_| {
                Err(Error::State(
                    "the output writer stopped before the end".to_string(),
                ))
            })
        }
    }

    /// Waits until everything sent is written and hands back the output, to be committed.
    pub fn finish(mut self) -> Result<Output> {
        self.join()
    }

    fn join(&mut self) -> Result<Output> {
        self.sender = None;
        let thread = self
            .thread
            .take()
            .ok_or_else(|| Error::State("the output writer has already finished".to_string()))?;
        let (out, result) = thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        result.map_err(|source| Error::Write {
            path: self.shown.clone(),
            source,
        })?;
        Ok(out)
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        // Let the thread finish and drop the output (removing an uncommitted temporary file)
        // before the caller goes on, for example to exit with an error.
        self.sender = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_temp_files(dir: &Path) -> bool {
        std::fs::read_dir(dir).unwrap().all(|e| {
            !e.unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".inpath-tmp")
        })
    }

    #[test]
    fn dropped_output_leaves_target_untouched_and_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        std::fs::write(&path, b"old").unwrap();
        {
            let mut out = OutputFile::create(&path, &[]).unwrap();
            out.write_all(b"new but never committed").unwrap();
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert!(no_temp_files(dir.path()));
        let fresh = dir.path().join("fresh.bin");
        drop(OutputFile::create(&fresh, &[]).unwrap());
        assert!(!fresh.exists());
        assert!(no_temp_files(dir.path()));
    }

    #[test]
    fn commit_replaces_and_keeps_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        std::fs::write(&path, b"old").unwrap();
        std::fs::set_permissions(&path, Permissions::from_mode(0o640)).unwrap();
        let mut out = OutputFile::create(&path, &[]).unwrap();
        out.write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let secret = dir.path().join("k");
        let out = OutputFile::create_with_mode(&secret, &[], 0o600).unwrap();
        out.commit().unwrap();
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(no_temp_files(dir.path()));
    }

    #[test]
    fn same_file_is_refused_through_hard_and_symbolic_links() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.csv");
        std::fs::write(&input, b"a,b\n1,2\n").unwrap();
        let hard = dir.path().join("hard.csv");
        std::fs::hard_link(&input, &hard).unwrap();
        let soft = dir.path().join("soft.csv");
        std::os::unix::fs::symlink(&input, &soft).unwrap();
        let dotted = dir.path().join(".").join("in.csv");
        let inputs = [Input::File(input.clone())];
        for out in [&input, &hard, &soft, &dotted] {
            let err = OutputFile::create(out, &inputs).unwrap_err();
            assert!(matches!(err, Error::SameFile { .. }), "{out:?}: {err}");
            assert!(err.to_string().contains("same file as the input"), "{err}");
        }
        // Also when the input is named through the link and the output directly.
        let err = check_distinct(&input, &[Input::File(soft.clone())]).unwrap_err();
        assert!(matches!(err, Error::SameFile { .. }));
        assert_eq!(std::fs::read(&input).unwrap(), b"a,b\n1,2\n");
        check_distinct(&dir.path().join("other"), &inputs).unwrap();
    }

    #[test]
    fn symlinked_target_is_replaced_through_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.txt");
        std::fs::write(&real, b"old").unwrap();
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_file(&link, b"new", &[]).unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
    }

    #[test]
    fn directories_and_missing_parents_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let err = OutputFile::create(dir.path(), &[]).unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
        let err = OutputFile::create(&dir.path().join("no/such/dir/x"), &[]).unwrap_err();
        assert!(err.to_string().starts_with("cannot write"), "{err}");
        assert!(no_temp_files(dir.path()));
    }

    #[test]
    fn write_behind_writes_batches_in_order_and_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let out = Output::open(path.to_str().unwrap(), &[]).unwrap();
        let mut writer = WriteBehind::new(out, "out.bin").unwrap();
        let mut expected = Vec::new();
        for i in 0..100u32 {
            let mut batch = writer.spare();
            assert!(
                batch.iter().all(|b| b.is_empty()),
                "spare buffers come back empty"
            );
            batch.resize_with(3, Vec::new);
            for (j, buf) in batch.iter_mut().enumerate() {
                buf.extend_from_slice(format!("{i}.{j};").as_bytes());
                expected.extend_from_slice(buf);
            }
            writer.send(batch).unwrap();
        }
        assert!(!path.exists(), "nothing is visible before the commit");
        writer.finish().unwrap().commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
    }

    #[test]
    fn write_behind_dropped_without_finishing_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let out = Output::open(path.to_str().unwrap(), &[]).unwrap();
        let mut writer = WriteBehind::new(out, "out.bin").unwrap();
        writer.send(vec![b"partial".to_vec()]).unwrap();
        drop(writer);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn write_behind_reports_a_failed_write() {
        // /dev/full fails every write with ENOSPC.
        let file = OutputFile {
            shown: PathBuf::from("/dev/full"),
            target: PathBuf::from("/dev/full"),
            tmp: PathBuf::from("/dev/full"),
            file: Some(BufWriter::with_capacity(
                16,
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )),
            committed: true,
            written: 0,
            kicked: 0,
        };
        let mut writer = WriteBehind::new(Output::File(file), "/dev/full").unwrap();
        let mut failed = None;
        for _ in 0..10 {
            if let Err(e) = writer.send(vec![vec![1u8; 1 << 16]]) {
                failed = Some(e);
                break;
            }
        }
        let err = match failed {
            Some(e) => e,
            None => writer.finish().err().expect("writing to /dev/full fails"),
        };
        assert!(err.to_string().contains("/dev/full"), "{err}");
    }
}

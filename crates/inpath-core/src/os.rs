//! The few operating-system calls std lacks, kept in one place because they need `unsafe`:
//! memory-mapping an input file, the SIGBUS guard that makes a mapped file truncated under us
//! an error instead of a crash, and the capacity of a pipe on standard input.
//!
//! # Why a SIGBUS guard
//! A mapped file that another process truncates makes every access past the new end raise
//! SIGBUS, which kills the process. The guard keeps a fixed table of the mapped inputs; its
//! handler, on a fault inside one of them, maps anonymous zero pages over the rest of that
//! region (so the faulting access completes) and marks the region as damaged. The reader then
//! finishes its pass over zeros and [`Mapping::check_unchanged`] reports the truncation; the
//! zeros are never returned as a result. Faults anywhere else go to the handler that was
//! installed before ours (Rust's stack-overflow handler, or the default action).
#![allow(unsafe_code)]

use crate::{Error, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

/// A regular file mapped read-only, with its length at the time it was opened.
///
/// Dropping it unregisters it from the SIGBUS guard before the pages are unmapped.
pub struct Mapping {
    // Field order matters: the guard slot is released before the map is unmapped.
    guard: guard::Slot,
    map: memmap2::Mmap,
    file: File,
    path: PathBuf,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("path", &self.path)
            .field("len", &self.map.len())
            .finish()
    }
}

impl Mapping {
    /// Maps `file` (a non-empty regular file at `path`) for reading, advising the kernel that
    /// it will be read sequentially and may be cached in huge pages. `None` when the file cannot be mapped (too large for the
    /// address space, a filesystem without mmap, the guard table full): the caller then streams
    /// it with read(2) instead.
    pub fn map(file: File, path: &Path) -> Option<Mapping> {
        Mapping::map_with(file, path, Some(memmap2::Advice::Sequential))
    }

    /// As [`Mapping::map`] for a file read many times at any offset (a column file whose
    /// pages are read one by one, query after query): no access pattern is advised, so pages
    /// stay mapped once touched.
    pub fn map_for_reads(file: File, path: &Path) -> Option<Mapping> {
        Mapping::map_with(file, path, None)
    }

    fn map_with(file: File, path: &Path, advice: Option<memmap2::Advice>) -> Option<Mapping> {
        guard::install();
        // SAFETY: the mapping is read-only and private to this process. The one way another
        // process can invalidate it, truncating the file, raises SIGBUS on access; the guard
        // registered below turns that into zero pages plus a flag that `check_unchanged`
        // reports, so no access through the slice is ever undefined. (Bytes rewritten in place
        // by another process are seen or not, as with read(2); they are plain data.)
        let map = unsafe { memmap2::MmapOptions::new().map(&file) }.ok()?;
        if map.is_empty() {
            return None;
        }
        let guard = guard::Slot::register(map.as_ptr() as usize, map.len())?;
        if let Some(advice) = advice {
            let _ = map.advise(advice);
            // Pages the kernel reads for this mapping come in 2 MiB folios, mapped a folio at a
            // time. A 128 MB file read cold that way maps again in ~130 faults instead of
            // ~2,000 (0.6 instead of 2.6-4.4 ms on a 2-core Zen 4 guest) and unmaps in 0.03
            // instead of 0.5-2 ms, on this run and every later one while it stays cached
            // (docs/PERFORMANCE.md, "I/O path"). Refused where transparent huge pages are off.
            #[cfg(target_os = "linux")]
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        Some(Mapping {
            guard,
            map,
            file,
            path: path.to_path_buf(),
        })
    }

    /// Whether most of the file is in the page cache: `mincore` on 64 pages spread evenly
    /// over it (true where that cannot be asked).
    pub fn mostly_cached(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            let page = page_size();
            let base = self.map.as_ptr() as usize;
            let len = self.map.len();
            let samples = 64usize;
            let mut resident = 0;
            for i in 0..samples {
                let at = (len / samples * i) & !(page - 1);
                let mut flag = 0u8;
                // SAFETY: [base + at, base + at + 1 page) lies inside this live mapping (at is
                // below len and page aligned; the mapping starts page aligned and spans whole
                // pages); mincore writes one byte per page into `flag`.
                let ok = unsafe {
                    libc::mincore(
                        (base + at) as *mut libc::c_void,
                        page.min(len - at),
                        &mut flag,
                    )
                } == 0;
                if !ok {
                    return true;
                }
                resident += usize::from(flag & 1 == 1);
            }
            resident * 2 >= samples
        }
        #[cfg(not(target_os = "linux"))]
        true
    }

    /// Gives the mapping up and returns the file, positioned at its start, to be streamed.
    pub fn into_file(self) -> File {
        let Mapping {
            guard, map, file, ..
        } = self;
        drop(guard);
        drop(map);
        file
    }

    /// The file's bytes as they were mapped.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Call after reading [`Mapping::bytes`]: an error if the file was truncated while it was
    /// mapped (a SIGBUS was caught, or the file is now shorter than what was read), because
    /// then part of what was read was zeros, not the file.
    pub fn check_unchanged(&self) -> Result<()> {
        let now = self.file.metadata().map(|m| m.len()).ok();
        let mapped = self.map.len() as u64;
        let shrunk = now.is_some_and(|len| len < mapped);
        if self.guard.faulted() || shrunk {
            let now = now.map_or("unknown".to_string(), |n| format!("{n} bytes"));
            return Err(Error::io(
                &self.path,
                std::io::Error::other(format!(
                    "the file was truncated while it was read ({mapped} bytes when opened, \
                     {now} now); the results would be wrong, so none are given"
                )),
            ));
        }
        Ok(())
    }
}

/// User and system CPU seconds this process has used so far (`getrusage`; zeros where it
/// cannot be asked).
pub fn cpu_times() -> (f64, f64) {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return (0.0, 0.0);
        }
        ru
    };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// CPU seconds (user + system) the calling thread has used so far: an engine that runs on its
/// own threads (the query offload device) reports its CPU apart from the host's. Zero where the
/// OS cannot be asked per thread.
pub fn thread_cpu_seconds() -> f64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_THREAD is valid on
        // Linux.
        let ru = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            if libc::getrusage(libc::RUSAGE_THREAD, &mut ru) != 0 {
                return 0.0;
            }
            ru
        };
        let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        secs(ru.ru_utime) + secs(ru.ru_stime)
    }
    #[cfg(not(target_os = "linux"))]
    {
        0.0
    }
}

/// Keeps buffers of up to 64 MiB on the heap instead of mapping and unmapping each: engines
/// that decode a page into fresh megabyte arrays, many times a second on several threads,
/// otherwise spend most of their time in page faults zeroing new mappings (TPC-H Q1 with
/// offload took almost twice as long). glibc only; a no-op elsewhere. Call once, early.
pub fn keep_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; both values are in their valid ranges.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

/// The size of a memory page.
#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions (glibc answers _SC_PAGESIZE from memory).
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => 4096,
    }
}

/// Asks for a larger pipe buffer on `file` when it is a pipe, so that a writer such as `cat`
/// hands over 1 MiB per wake-up instead of 64 KiB. Best effort: failure changes nothing.
#[cfg(target_os = "linux")]
pub fn widen_pipe(file: &impl std::os::fd::AsRawFd) {
    // SAFETY: fcntl with F_SETPIPE_SZ on a valid descriptor only changes the pipe's capacity;
    // on anything that is not a pipe it fails with EBADF/EINVAL, which is ignored.
    unsafe {
        libc::fcntl(file.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20);
    }
}

/// Starts writing `len` bytes of `file` from `offset` back to the disk, without waiting
/// (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`). Best effort: durability still comes from
/// the fsync at commit; this only lets the disk start earlier.
#[cfg(target_os = "linux")]
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: sync_file_range only schedules I/O on a valid descriptor that this process owns;
    // an unsupported file (a pipe, a special file) fails with an error that is ignored.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Elsewhere the disk starts when the kernel decides; the fsync at commit still waits for it.
#[cfg(not(target_os = "linux"))]
pub fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

/// Pipes keep their default capacity where F_SETPIPE_SZ does not exist.
#[cfg(not(target_os = "linux"))]
pub fn widen_pipe<T>(_file: &T) {}

#[cfg(unix)]
mod guard {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Once, OnceLock};

    /// How many files may be mapped at once; a further one is streamed instead. (A query
    /// session maps its tables' column files: TPC-H has 61.)
    const SLOTS: usize = 256;

    struct Entry {
        start: AtomicUsize,
        /// 0 when the slot is free. Written last on registration and first on release, so
        /// the handler never sees a half-written slot as live.
        len: AtomicUsize,
        taken: AtomicBool,
        faulted: AtomicBool,
    }

    #[allow(clippy::declare_interior_mutable_const)]
    const FREE: Entry = Entry {
        start: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        taken: AtomicBool::new(false),
        faulted: AtomicBool::new(false),
    };
    static TABLE: [Entry; SLOTS] = [FREE; SLOTS];
    static PAGE: AtomicUsize = AtomicUsize::new(4096);
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
    static INSTALL: Once = Once::new();

    /// A registered mapped region; released on drop.
    pub struct Slot(usize);

    impl Slot {
        pub fn register(start: usize, len: usize) -> Option<Slot> {
            for (i, entry) in TABLE.iter().enumerate() {
                if entry
                    .taken
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    entry.faulted.store(false, Ordering::Relaxed);
                    entry.start.store(start, Ordering::Relaxed);
                    entry.len.store(len, Ordering::Release);
                    return Some(Slot(i));
                }
            }
            None
        }

        pub fn faulted(&self) -> bool {
            TABLE[self.0].faulted.load(Ordering::Acquire)
        }
    }

    impl Drop for Slot {
        fn drop(&mut self) {
            let entry = &TABLE[self.0];
            entry.len.store(0, Ordering::Release);
            entry.taken.store(false, Ordering::Release);
        }
    }

    /// Installs the handler once per process, remembering the one it replaces.
    pub fn install() {
        INSTALL.call_once(|| {
            // SAFETY: sysconf has no preconditions. sigaction is given a fully initialised
            // struct (zeroed, then the handler, flags and an empty mask) and a valid out
            // pointer for the previous action.
            unsafe {
                let page = libc::sysconf(libc::_SC_PAGESIZE);
                if page > 0 {
                    PAGE.store(page as usize, Ordering::Relaxed);
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_sigbus as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                let mut previous: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, &action, &mut previous) == 0 {
                    let _ = PREVIOUS.set(previous);
                }
            }
        });
    }

    /// The SIGBUS handler. Only async-signal-safe work: atomic loads and stores, mmap(2) and
    /// sigaction(2).
    extern "C" fn on_sigbus(
        signal: libc::c_int,
        info: *mut libc::siginfo_t,
        context: *mut libc::c_void,
    ) {
        // SAFETY: the kernel passes a valid siginfo_t for a handler installed with SA_SIGINFO.
        let addr = unsafe { (*info).si_addr() } as usize;
        let page = PAGE.load(Ordering::Relaxed);
        for entry in TABLE.iter() {
            let len = entry.len.load(Ordering::Acquire);
            if len == 0 {
                continue;
            }
            let start = entry.start.load(Ordering::Relaxed);
            if addr < start || addr - start >= len {
                continue;
            }
            let from = addr & !(page - 1);
            let end = (start + len).div_ceil(page) * page;
            // SAFETY: [from, end) lies inside a mapping this process made and still owns (the
            // slot is live); replacing it with anonymous read-only zero pages (MAP_FIXED) lets
            // the faulting load complete. The region is unmapped as a whole when the Mapping
            // drops, which covers these pages too.
            let replaced = unsafe {
                libc::mmap(
                    from as *mut libc::c_void,
                    end - from,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if replaced != libc::MAP_FAILED {
                entry.faulted.store(true, Ordering::Release);
                return;
            }
        }
        // Not one of our mapped inputs: a real fault. Hand it to the previous handler, or
        // restore the default action so that returning re-raises it and ends the process.
        match PREVIOUS.get() {
            Some(previous)
                if previous.sa_sigaction != libc::SIG_DFL
                    && previous.sa_sigaction != libc::SIG_IGN =>
            {
                if previous.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: the previous action was installed with SA_SIGINFO, so its handler
                    // has this signature.
                    let handler: extern "C" fn(
                        libc::c_int,
                        *mut libc::siginfo_t,
                        *mut libc::c_void,
                    ) = unsafe { std::mem::transmute(previous.sa_sigaction) };
                    handler(signal, info, context);
                } else {
                    // SAFETY: without SA_SIGINFO the handler takes only the signal number.
                    let handler: extern "C" fn(libc::c_int) =
                        unsafe { std::mem::transmute(previous.sa_sigaction) };
                    handler(signal);
                }
            }
            _ => {
                // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask and no flags.
                unsafe {
                    let default: libc::sigaction = std::mem::zeroed();
                    libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
                }
            }
        }
    }
}

/// Without POSIX signals there is no guard, so files are never mapped there.
#[cfg(not(unix))]
mod guard {
    pub struct Slot;
    impl Slot {
        pub fn register(_start: usize, _len: usize) -> Option<Slot> {
            None
        }
        pub fn faulted(&self) -> bool {
            false
        }
    }
    pub fn install() {}
}

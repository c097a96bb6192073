//! The one module with `unsafe` code: [`AlignedBuf`], a zeroed heap buffer aligned for
//! O_DIRECT (`std::alloc` with an explicit alignment, which `Vec<u8>` cannot promise), and
//! [`one_malloc_arena`]. The crate root denies `unsafe_code` everywhere else; the flash module
//! re-exports these items.

/// Gives the allocator's free pages back to the system (glibc's `malloc_trim`, which also
/// releases whole free pages inside the heap, not only at its top). Other allocators: nothing.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of the allocator to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Asks glibc's malloc for a single arena. The store's values are allocated and freed under
/// its one lock by whichever thread serves the request, so per-thread arenas bring no
/// parallelism, only memory: each keeps the free room of the values its thread once held (at
/// `-m 64` with flash hits, 169 MiB of anonymous memory with glibc's default of up to 8 arenas a
/// core, 113 MiB with 2; PERFORMANCE.md, "cache at scale"). Other allocators: nothing.
pub fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tuning parameter of the allocator; M_ARENA_MAX with 1 is a
    // documented value, and glibc ignores a setting it cannot apply.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Alignment of every flash I/O (offset, length and buffer address): what O_DIRECT asks for.
pub const ALIGN: usize = 4096;

/// A zeroed heap buffer aligned to [`ALIGN`], as O_DIRECT needs.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Vec<u8>); sharing `&AlignedBuf` only
// gives out `&[u8]`.
unsafe impl Send for AlignedBuf {}
// SAFETY: see above: shared references only read.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (rounded up to [`ALIGN`]).
    pub fn zeroed(len: usize) -> AlignedBuf {
        let len = round_up(len.max(1), ALIGN);
        let layout = std::alloc::Layout::from_size_align(len, ALIGN).expect("valid layout");
        // SAFETY: the layout has a non-zero size; a null result is handled below.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = match std::ptr::NonNull::new(raw) {
            Some(ptr) => ptr,
            None => std::alloc::handle_alloc_error(layout),
        };
        AlignedBuf { ptr, len }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to `len` initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, ALIGN).expect("valid layout");
        // SAFETY: allocated in `zeroed` with this same layout and not freed before.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

/// `n` rounded up to a multiple of `to`.
pub fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

//! The one module with `unsafe` code: [`AlignedBuf`], a zeroed heap buffer aligned for
//! O_DIRECT (`std::alloc` with an explicit alignment, which `Vec<u8>` cannot promise). The crate
//! root denies `unsafe_code` everywhere else; the flash module re-exports these items.

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

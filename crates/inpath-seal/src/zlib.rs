//! The yardstick for DEFLATE levels: what zlib itself (the C library, built from source by the
//! `libz-sys` crate) makes of a page at a given level. The page codec promises that its level
//! N is at least as small as zlib's level N (docs/seal.md, "DEFLATE levels"); the tests hold it
//! to that and the demo prints both ratios side by side. Not used to seal anything.
#![allow(unsafe_code)]

use crate::error::{Error, Result};

/// The size of `page` compressed by zlib as raw DEFLATE (window bits 15, memory level 8,
/// default strategy: what `zlib.compressobj(level, DEFLATED, -15)` and `gzip -N` use) at
/// `level` (0 to 9), in one call, as the page codec compresses a page.
pub fn deflate_size(page: &[u8], level: u8) -> Result<usize> {
    if level > 9 {
        return Err(Error::parameter("deflate level", level, "0 to 9"));
    }
    let internal = |detail: String| Error::Internal {
        what: "zlib",
        detail,
    };
    let avail_in = u32::try_from(page.len()).map_err(|_| internal("page over 4 GiB".into()))?;
    // deflateBound is never exceeded for a single Z_FINISH call.
    let mut out = vec![0u8; page.len() + page.len() / 1000 + 64 + 5 * (page.len() / 16383 + 1)];
    let mut stream = std::mem::MaybeUninit::<libz_sys::z_stream>::zeroed();
    let p = stream.as_mut_ptr();
    // SAFETY: `p` points to a zeroed z_stream (zalloc/zfree/opaque null = zlib's default
    // allocator), which deflateInit2_ initialises; the version and struct size are the ones
    // libz-sys was built with. next_in/next_out point into `page` and `out`, which outlive the
    // stream, with their true lengths. deflateEnd frees zlib's state on every path after a
    // successful init.
    unsafe {
        let init = libz_sys::deflateInit2_(
            p,
            i32::from(level),
            libz_sys::Z_DEFLATED,
            -15,
            8,
            libz_sys::Z_DEFAULT_STRATEGY,
            libz_sys::zlibVersion(),
            std::mem::size_of::<libz_sys::z_stream>() as i32,
        );
        if init != libz_sys::Z_OK {
            return Err(internal(format!("deflateInit2 returned {init}")));
        }
        (*p).next_in = page.as_ptr() as *mut u8;
        (*p).avail_in = avail_in;
        (*p).next_out = out.as_mut_ptr();
        (*p).avail_out = out.len() as u32;
        let status = libz_sys::deflate(p, libz_sys::Z_FINISH);
        let total = (*p).total_out as usize;
        libz_sys::deflateEnd(p);
        if status != libz_sys::Z_STREAM_END {
            return Err(internal(format!("deflate returned {status}")));
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zlib_output_size_is_plausible_and_levels_are_checked() {
        let text = b"the quick brown fox jumps over the lazy dog; ".repeat(2000);
        let one = deflate_size(&text, 1).unwrap();
        let nine = deflate_size(&text, 9).unwrap();
        assert!(one < text.len() / 10 && nine <= one, "{one} {nine}");
        // Level 0 stores: a little over the input.
        let zero = deflate_size(&text, 0).unwrap();
        assert!(zero > text.len() && zero < text.len() + 100, "{zero}");
        assert!(deflate_size(&[], 6).unwrap() > 0);
        assert!(deflate_size(&text, 10).is_err());
    }
}

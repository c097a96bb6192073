//! Any bytes given to any decompressor, in two chunks, give an error or bounded output.
#![no_main]
use inpath_seal::codec::{Decompressor, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let format = Format::ALL[data[0] as usize % Format::ALL.len()];
    let cut = data.get(1).map_or(0, |&b| b as usize).min(data.len() - 1);
    let body = &data[1..];
    let cut = cut.min(body.len());
    let mut d = Decompressor::new(format).with_limit(1 << 22);
    let mut out = Vec::new();
    let _ = d.push(&body[..cut], &mut out).and_then(|()| d.push(&body[cut..], &mut out)).and_then(|()| d.finish(&mut out));
    assert!(out.len() <= 1 << 22);
});

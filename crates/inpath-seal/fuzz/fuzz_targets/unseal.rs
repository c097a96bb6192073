//! Any bytes given to `unseal` give an error or a page; never a panic or a huge allocation.
#![no_main]
use inpath_seal::{Key, KeyRing, Unsealer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut ring = KeyRing::new();
    for (id, len) in [(1u32, 16usize), (2, 24), (3, 32)] {
        ring.insert(id, Key::new(&vec![id as u8; len]).unwrap());
    }
    let unsealer = Unsealer::new(&ring).with_max_page(1 << 20);
    if let Ok(page) = unsealer.unseal(data) {
        assert!(page.len() <= 1 << 20);
    }
});

//! AES-128/192/256 in ECB, CBC, CTR, CFB-128 and OFB: keys that wipe themselves, one-shot page
//! operations for the page codec, and a chunked [`CipherStream`] in which any split of the input
//! gives the same bytes as one call (the Vitis security library's chunk API).
//!
//! On x86-64 CPUs the block work runs on hand-written kernels (the private `arch` module: VAES
//! on 512- or 256-bit registers, or AES-NI), whichever `kernel::aes_kernel` picks for
//! the CPU under the `INPATH_ISA` cap (see `docs/seal.md`); elsewhere, and with
//! `INPATH_ISA=portable` or `INPATH_AES=library`, on RustCrypto's crates (`aes`, `cbc`, `ctr`, `cfb-mode`, `ofb`, `aes-gcm`; `aes` picks AES-NI
//! at run time), which are also the reference the kernels are tested against
//! ([`AnyAes::library`], [`Gcm::library`]). This module adds key handling, the modes' chaining
//! state and partial blocks for streaming, PKCS#7 padding for ECB/CBC, and AES-256-GCM
//! ([`Gcm`]); the multi-page CBC encryption is in `kernel`.
//!
//! Conventions (the same as OpenSSL's and NIST SP 800-38A's):
//! - CTR: the 16-byte IV is the initial counter block, incremented as a 128-bit big-endian
//!   integer per block (`openssl enc -aes-256-ctr -iv`).
//! - CFB: CFB-128 (full-block feedback), `openssl enc -aes-256-cfb`.
//! - ECB/CBC: input in whole 16-byte blocks, or PKCS#7 padding ([`Padding::Pkcs7`], what
//!   `openssl enc` does by default).

use crate::arch::{self, AesKernel};
use crate::error::{Error, Result};
use aes::cipher::array::Array;
use aes::cipher::consts::U16;
use aes::cipher::{
    BlockCipherDecrypt, BlockCipherEncrypt, BlockModeDecrypt, BlockModeEncrypt, InnerIvInit,
    KeyInit, StreamCipher,
};
use std::collections::BTreeMap;
use std::fmt;
use zeroize::{Zeroize, Zeroizing};

/// One AES block.
pub type Block = Array<u8, U16>;

/// A secret AES key of 16, 24 or 32 bytes. The bytes are wiped from memory when the key is
/// dropped; `Debug` shows only the length.
#[derive(Clone)]
pub struct Key {
    bytes: Zeroizing<Vec<u8>>,
}

impl Key {
    /// A key from its bytes (16, 24 or 32 of them).
    pub fn new(bytes: &[u8]) -> Result<Key> {
        match bytes.len() {
            16 | 24 | 32 => Ok(Key {
                bytes: Zeroizing::new(bytes.to_vec()),
            }),
            n => Err(Error::parameter(
                "key length",
                format!("{n} bytes"),
                "16, 24 or 32 bytes (AES-128/192/256)",
            )),
        }
    }

    /// A fresh key of `bits` (128, 192 or 256) from the operating system's random source.
    pub fn generate(bits: u32) -> Result<Key> {
        let len = match bits {
            128 => 16,
            192 => 24,
            256 => 32,
            other => return Err(Error::parameter("key bits", other, "128, 192 or 256")),
        };
        let mut bytes = Zeroizing::new(vec![0u8; len]);
        getrandom::fill(&mut bytes).map_err(|e| Error::Internal {
            what: "reading OS randomness",
            detail: e.to_string(),
        })?;
        Ok(Key { bytes })
    }

    /// Key length in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Key length in bits.
    pub fn bits(&self) -> u32 {
        self.bytes.len() as u32 * 8
    }

    /// The secret bytes. Only for handing the key to a cipher or writing a key file.
    pub fn expose_secret(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key(AES-{}, redacted)", self.bits())
    }
}

/// Keys by key id, as a database keeps them: the page codec asks for the key a record names.
#[derive(Clone, Default, Debug)]
pub struct KeyRing {
    keys: BTreeMap<u32, Key>,
}

impl KeyRing {
    /// An empty key ring.
    pub fn new() -> KeyRing {
        KeyRing::default()
    }

    /// Adds or replaces the key with id `id`.
    pub fn insert(&mut self, id: u32, key: Key) {
        self.keys.insert(id, key);
    }

    /// The key with id `id`, or [`Error::UnknownKeyId`].
    pub fn get(&self, id: u32) -> Result<&Key> {
        self.keys.get(&id).ok_or_else(|| Error::UnknownKeyId {
            id,
            available: self.describe_ids(),
        })
    }

    /// The ids held, in increasing order.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.keys.keys().copied()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the ring holds no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn describe_ids(&self) -> String {
        if self.keys.is_empty() {
            "no keys".to_string()
        } else {
            let ids: Vec<String> = self.keys.keys().map(|id| id.to_string()).collect();
            format!("id(s) {}", ids.join(", "))
        }
    }
}

/// An expanded AES key of any size: the `aes` crate's cipher and, where a hand-written kernel
/// runs (`kernel::aes_kernel`), its round keys (the private `arch` module), which then
/// do the bulk work. Both are wiped on drop.
#[derive(Clone)]
pub struct AnyAes {
    pub(crate) lib: LibAes,
    fast: Option<arch::Keys>,
}

/// The `aes` crate's cipher for one key size.
#[derive(Clone)]
pub(crate) enum LibAes {
    /// AES-128.
    A128(aes::Aes128),
    /// AES-192.
    A192(aes::Aes192),
    /// AES-256.
    A256(aes::Aes256),
}

/// Runs `$body` with `$c` bound to the concrete `aes` crate type inside an [`AnyAes`].
macro_rules! with_aes {
    ($aes:expr, $c:ident => $body:expr) => {
        match &$aes.lib {
            $crate::aes::LibAes::A128($c) => $body,
            $crate::aes::LibAes::A192($c) => $body,
            $crate::aes::LibAes::A256($c) => $body,
        }
    };
}
pub(crate) use with_aes;

impl AnyAes {
    /// Expands `key` for the kernel `kernel::aes_kernel` picks.
    pub fn new(key: &Key) -> AnyAes {
        AnyAes::with_kernel(key, arch::aes_kernel()).unwrap_or_else(|| AnyAes::library(key))
    }

    /// Expands `key` for one particular kernel, or `None` when that kernel may not run here
    /// ([`AesKernel::allowed`]): for tests and benchmarks that compare kernels.
    pub fn with_kernel(key: &Key, kernel: AesKernel) -> Option<AnyAes> {
        if !kernel.allowed() {
            return None;
        }
        let mut aes = AnyAes::library(key);
        if kernel != AesKernel::Library {
            aes.fast = Some(arch::Keys::new(key.expose_secret(), kernel)?);
        }
        Some(aes)
    }

    /// Expands `key` for the `aes` crate only (no hand-written kernels): the reference the
    /// kernels are tested against, and the path on CPUs without VAES.
    pub fn library(key: &Key) -> AnyAes {
        let bytes = key.expose_secret();
        // The lengths are guaranteed by `Key::new`.
        let lib = match bytes.len() {
            16 => LibAes::A128(aes::Aes128::new(bytes.try_into().expect("16-byte key"))),
            24 => LibAes::A192(aes::Aes192::new(bytes.try_into().expect("24-byte key"))),
            _ => LibAes::A256(aes::Aes256::new(bytes.try_into().expect("32-byte key"))),
        };
        AnyAes { lib, fast: None }
    }

    /// Whether a hand-written kernel (not the library) does the work for this key.
    pub fn accelerated(&self) -> bool {
        self.fast().is_some()
    }

    /// The kernel that does the work for this key.
    pub fn kernel(&self) -> AesKernel {
        self.fast().map_or(AesKernel::Library, arch::Keys::kernel)
    }

    /// The hand-written kernel's round keys, if one does the work.
    pub(crate) fn fast(&self) -> Option<&arch::Keys> {
        self.fast.as_ref()
    }

    /// Key size in bits.
    pub fn bits(&self) -> u32 {
        match self.lib {
            LibAes::A128(_) => 128,
            LibAes::A192(_) => 192,
            LibAes::A256(_) => 256,
        }
    }

    /// Encrypts whole blocks in place (ECB).
    pub fn encrypt_blocks(&self, blocks: &mut [Block]) {
        match self.fast() {
            Some(k) => k.ecb_encrypt(Block::slice_as_flattened_mut(blocks)),
            None => with_aes!(self, c => c.encrypt_blocks(blocks)),
        }
    }

    /// Decrypts whole blocks in place (ECB).
    pub fn decrypt_blocks(&self, blocks: &mut [Block]) {
        match self.fast() {
            Some(k) => k.ecb_decrypt(Block::slice_as_flattened_mut(blocks)),
            None => with_aes!(self, c => c.decrypt_blocks(blocks)),
        }
    }

    /// Encrypts one block in place.
    pub(crate) fn encrypt_block(&self, block: &mut [u8; 16]) {
        match self.fast() {
            Some(k) => k.encrypt_block(block),
            None => {
                let mut b = Block::from(*block);
                with_aes!(self, c => c.encrypt_block(&mut b));
                *block = b.into();
                b.zeroize();
            }
        }
    }
}

impl fmt::Debug for AnyAes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AnyAes(AES-{}, redacted)", self.bits())
    }
}

/// AES-256-GCM with 96-bit nonces and 16-byte tags (NIST SP 800-38D), in place with a
/// detached tag: the hand-written kernel `kernel::aes_kernel` picks (VAES with
/// VPCLMULQDQ on 512- or 256-bit registers, or AES-NI with PCLMULQDQ), else the `aes-gcm`
/// crate (the reference the kernels are tested against). Keys are wiped on drop.
#[derive(Clone)]
pub struct Gcm {
    lib: Box<aes_gcm::Aes256Gcm>,
    fast: Option<arch::GcmKeys>,
}

impl Gcm {
    /// A GCM key from a 32-byte [`Key`].
    pub fn new(key: &Key) -> Result<Gcm> {
        match Gcm::with_kernel(key, arch::aes_kernel())? {
            Some(gcm) => Ok(gcm),
            None => Gcm::library(key),
        }
    }

    /// As [`Gcm::new`] for one particular kernel; `Ok(None)` when that kernel may not run
    /// here ([`AesKernel::allowed`]).
    pub fn with_kernel(key: &Key, kernel: AesKernel) -> Result<Option<Gcm>> {
        let mut gcm = Gcm::library(key)?;
        if !kernel.allowed() {
            return Ok(None);
        }
        if kernel == AesKernel::Library {
            return Ok(Some(gcm));
        }
        gcm.fast = arch::GcmKeys::new(key.expose_secret(), kernel);
        Ok(gcm.fast.is_some().then_some(gcm))
    }

    /// The kernel that does the work.
    pub fn kernel(&self) -> AesKernel {
        self.fast
            .as_ref()
            .map_or(AesKernel::Library, arch::GcmKeys::kernel)
    }

    /// As [`Gcm::new`] with the `aes-gcm` crate only.
    pub fn library(key: &Key) -> Result<Gcm> {
        use aes_gcm::KeyInit as _;
        if key.len() != 32 {
            return Err(Error::parameter(
                "gcm key length",
                format!("{} bytes", key.len()),
                "32 bytes (AES-256-GCM)",
            ));
        }
        let lib = aes_gcm::Aes256Gcm::new_from_slice(key.expose_secret()).map_err(|e| {
            Error::Internal {
                what: "aes-gcm key",
                detail: e.to_string(),
            }
        })?;
        Ok(Gcm {
            lib: Box::new(lib),
            fast: None,
        })
    }

    /// Whether a hand-written kernel does the work.
    pub fn accelerated(&self) -> bool {
        self.fast.is_some()
    }

    /// Encrypts `data` in place and returns the tag over `aad` and the ciphertext. At most
    /// 2^36 - 32 bytes (the GCM limit).
    pub fn encrypt(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8]) -> Result<[u8; 16]> {
        if data.len() as u64 > arch::GCM_MAX {
            return Err(Error::parameter(
                "gcm message length",
                data.len(),
                "at most 2^36 - 32 bytes",
            ));
        }
        if let Some(k) = &self.fast {
            return Ok(k.encrypt(nonce, aad, data));
        }
        use aes_gcm::aead::AeadInOut as _;
        let tag = self
            .lib
            .encrypt_inout_detached(&(*nonce).into(), aad, data.into())
            .map_err(|_| Error::Internal {
                what: "aes-gcm",
                detail: "encryption failed".into(),
            })?;
        Ok(tag.into())
    }

    /// As [`Gcm::decrypt`], reading the ciphertext from `src` and writing the plaintext into
    /// `dst` (the same length): one pass over memory instead of a copy and then two. When the
    /// tag does not match, `dst` is zeroed.
    ///
    /// # Panics
    /// When `src` and `dst` differ in length.
    #[must_use]
    pub fn decrypt_to(
        &self,
        nonce: &[u8; 12],
        aad: &[u8],
        src: &[u8],
        dst: &mut [u8],
        tag: &[u8; 16],
    ) -> bool {
        assert_eq!(src.len(), dst.len(), "GCM output length");
        let ok = if src.len() as u64 > arch::GCM_MAX {
            false
        } else if let Some(k) = &self.fast {
            k.decrypt_to(nonce, aad, src, dst, tag)
        } else {
            dst.copy_from_slice(src);
            self.decrypt(nonce, aad, dst, tag)
        };
        if !ok {
            // No unauthenticated plaintext is left behind, whichever kernel ran.
            dst.zeroize();
        }
        ok
    }

    /// Checks `tag` over `aad` and the ciphertext `data` and decrypts `data` in place. Returns
    /// `false` (authentication failed) when the tag does not match; `data` must then be
    /// discarded.
    #[must_use]
    pub fn decrypt(&self, nonce: &[u8; 12], aad: &[u8], data: &mut [u8], tag: &[u8; 16]) -> bool {
        if let Some(k) = &self.fast {
            return k.decrypt(nonce, aad, data, tag);
        }
        use aes_gcm::aead::AeadInOut as _;
        self.lib
            .decrypt_inout_detached(&(*nonce).into(), aad, data.into(), &(*tag).into())
            .is_ok()
    }
}

impl fmt::Debug for Gcm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gcm(AES-256, redacted)")
    }
}

/// Views a byte slice whose length is a multiple of 16 as blocks.
pub(crate) fn as_blocks(data: &mut [u8]) -> &mut [Block] {
    let (blocks, rest) = Block::slice_as_chunks_mut(data);
    debug_assert!(rest.is_empty(), "caller passes whole blocks");
    blocks
}

/// A block cipher mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Electronic codebook: each block on its own; equal blocks give equal ciphertext.
    Ecb,
    /// Cipher block chaining.
    Cbc,
    /// Counter mode (128-bit big-endian counter).
    Ctr,
    /// Cipher feedback, 128-bit segments.
    Cfb,
    /// Output feedback.
    Ofb,
}

impl Mode {
    /// All modes.
    pub const ALL: [Mode; 5] = [Mode::Ecb, Mode::Cbc, Mode::Ctr, Mode::Cfb, Mode::Ofb];

    /// Lower-case name (`ecb`, `cbc`, `ctr`, `cfb`, `ofb`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ecb => "ecb",
            Mode::Cbc => "cbc",
            Mode::Ctr => "ctr",
            Mode::Cfb => "cfb",
            Mode::Ofb => "ofb",
        }
    }

    /// Parses a name as [`Mode::name`] writes it (`cfb128` is accepted for CFB).
    pub fn parse(name: &str) -> Result<Mode> {
        match name.to_ascii_lowercase().as_str() {
            "ecb" => Ok(Mode::Ecb),
            "cbc" => Ok(Mode::Cbc),
            "ctr" => Ok(Mode::Ctr),
            "cfb" | "cfb128" => Ok(Mode::Cfb),
            "ofb" => Ok(Mode::Ofb),
            other => Err(Error::parameter("mode", other, "ecb, cbc, ctr, cfb or ofb")),
        }
    }

    /// Whether the mode works on whole blocks (ECB, CBC) rather than as a stream cipher.
    pub fn is_block_mode(self) -> bool {
        matches!(self, Mode::Ecb | Mode::Cbc)
    }

    /// Whether the mode takes an IV (all but ECB).
    pub fn needs_iv(self) -> bool {
        self != Mode::Ecb
    }
}

/// Encrypt or decrypt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Plaintext to ciphertext.
    Encrypt,
    /// Ciphertext to plaintext.
    Decrypt,
}

/// Padding for the block modes (ECB, CBC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding {
    /// No padding: the input must be a whole number of blocks.
    None,
    /// PKCS#7 (RFC 5652 §6.3): 1 to 16 bytes, each holding the pad length; always added.
    Pkcs7,
}

// ---------------------------------------------------------------------------------------------
// One-shot page operations (in place), used by the page codec.

/// AES-CTR over `data` in place with a 128-bit big-endian counter starting at `iv`: the same
/// bytes as `ctr::Ctr128BE` ([`ctr_apply_library`]). On the hand-written kernel where one runs;
/// on the library, the counter blocks are written 512 at a time and encrypted in one call, then
/// XORed into the data as 128-bit words: faster than the `ctr` crate, and well below ECB on the
/// same core, so the counter fill and XOR passes, not the AES rounds, are the limit
/// (`bench/seal.py`; docs/PERFORMANCE.md).
pub fn ctr_apply(aes: &AnyAes, iv: &[u8; 16], data: &mut [u8]) {
    match aes.fast() {
        Some(k) => k.ctr_apply(iv, data),
        None => with_aes!(aes, c => arch::portable::ctr_apply(c, iv, data)),
    }
}

/// As [`ctr_apply`], reading `src` and writing `dst` (of the same length): one pass instead of a
/// copy and an in-place pass (the hand-written kernels; on the library, a copy, then
/// [`ctr_apply`]).
///
/// # Panics
/// When `src` and `dst` differ in length.
pub fn ctr_apply_to(aes: &AnyAes, iv: &[u8; 16], src: &[u8], dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "ctr_apply_to: lengths differ");
    match aes.fast() {
        Some(k) => k.ctr_apply_to(iv, src, dst),
        None => {
            dst.copy_from_slice(src);
            ctr_apply(aes, iv, dst);
        }
    }
}

/// CTR through the plain `ctr` crate: the reference the kernels are tested against.
pub fn ctr_apply_library(aes: &AnyAes, iv: &[u8; 16], data: &mut [u8]) {
    with_aes!(aes, c => {
        let mut mode = ctr::Ctr128BE::from_core(ctr::CtrCore::inner_iv_init(c.clone(), iv.into()));
        mode.apply_keystream(data);
    })
}

/// ECB encryption of whole blocks in place.
pub fn ecb_encrypt(aes: &AnyAes, data: &mut [u8]) {
    aes.encrypt_blocks(as_blocks(data));
}

/// ECB decryption of whole blocks in place.
pub fn ecb_decrypt(aes: &AnyAes, data: &mut [u8]) {
    aes.decrypt_blocks(as_blocks(data));
}

/// CBC encryption of whole blocks in place (one chain: sequential).
pub fn cbc_encrypt(aes: &AnyAes, iv: &[u8; 16], data: &mut [u8]) {
    let mut iv = *iv;
    cbc_encrypt_chained(aes, &mut iv, data);
}

/// CBC encryption of whole blocks in place; `iv` becomes the last ciphertext block.
fn cbc_encrypt_chained(aes: &AnyAes, iv: &mut [u8; 16], data: &mut [u8]) {
    match aes.fast() {
        Some(k) => k.cbc_encrypt(iv, data),
        None => with_aes!(aes, c => {
            let mut mode = cbc::Encryptor::inner_iv_init(c.clone(), (&*iv).into());
            mode.encrypt_blocks(as_blocks(data));
            if let Some(last) = data.len().checked_sub(16) {
                iv.copy_from_slice(&data[last..]);
            }
        }),
    }
}

/// CBC decryption of whole blocks in place (parallel across blocks).
pub fn cbc_decrypt(aes: &AnyAes, iv: &[u8; 16], data: &mut [u8]) {
    let mut iv = *iv;
    cbc_decrypt_chained(aes, &mut iv, data);
}

/// CBC decryption of whole blocks in place; `iv` becomes the last ciphertext block.
fn cbc_decrypt_chained(aes: &AnyAes, iv: &mut [u8; 16], data: &mut [u8]) {
    match aes.fast() {
        Some(k) => k.cbc_decrypt(iv, data),
        None => {
            let last: Option<[u8; 16]> = data
                .len()
                .checked_sub(16)
                .map(|at| data[at..].try_into().expect("16 bytes"));
            with_aes!(aes, c => {
                let mut mode = cbc::Decryptor::inner_iv_init(c.clone(), (&*iv).into());
                mode.decrypt_blocks(as_blocks(data));
            });
            if let Some(last) = last {
                *iv = last;
            }
        }
    }
}

/// CFB-128 over whole blocks in place; `iv` becomes the last ciphertext block.
fn cfb_chained(aes: &AnyAes, direction: Direction, iv: &mut [u8; 16], data: &mut [u8]) {
    let Some(at) = data.len().checked_sub(16) else {
        return;
    };
    match (aes.fast(), direction) {
        (Some(k), Direction::Encrypt) => k.cfb_encrypt(iv, data),
        (Some(k), Direction::Decrypt) => k.cfb_decrypt(iv, data),
        (None, Direction::Encrypt) => {
            with_aes!(aes, c => cfb_mode::Encryptor::inner_iv_init(c.clone(), (&*iv).into())
                .encrypt_blocks(as_blocks(data)));
            iv.copy_from_slice(&data[at..]);
        }
        (None, Direction::Decrypt) => {
            let last: [u8; 16] = data[at..].try_into().expect("16 bytes");
            with_aes!(aes, c => cfb_mode::Decryptor::inner_iv_init(c.clone(), (&*iv).into())
                .decrypt_blocks(as_blocks(data)));
            *iv = last;
        }
    }
}

/// OFB over whole blocks in place; `iv` becomes the last keystream block.
fn ofb_chained(aes: &AnyAes, iv: &mut [u8; 16], data: &mut [u8]) {
    let Some(at) = data.len().checked_sub(16) else {
        return;
    };
    match aes.fast() {
        Some(k) => k.ofb_apply(iv, data),
        None => {
            let mut last: [u8; 16] = data[at..].try_into().expect("16 bytes");
            with_aes!(aes, c => ofb::OfbCore::inner_iv_init(c.clone(), (&*iv).into())
                .encrypt_blocks(as_blocks(data)));
            for (l, d) in last.iter_mut().zip(&data[at..]) {
                *l ^= d;
            }
            *iv = last;
            last.zeroize();
        }
    }
}

/// Appends PKCS#7 padding to `data` (1 to 16 bytes).
pub fn pkcs7_pad(data: &mut Vec<u8>) {
    let pad = 16 - data.len() % 16;
    data.resize(data.len() + pad, pad as u8);
}

/// The unpadded length of PKCS#7-padded `data`, or `None` if the padding is not valid.
pub fn pkcs7_unpadded_len(data: &[u8]) -> Option<usize> {
    let last = *data.last()? as usize;
    if last == 0 || last > 16 || last > data.len() || !data.len().is_multiple_of(16) {
        return None;
    }
    // Constant-time over the last block is not needed here: the page codec checks padding only
    // after the payload checksum, and the streaming API reports errors to the caller anyway.
    data[data.len() - last..]
        .iter()
        .all(|&b| b as usize == last)
        .then_some(data.len() - last)
}

// ---------------------------------------------------------------------------------------------
// Chunked streaming.

/// The mode state behind a [`CipherStream`]: applies the mode to the bytes it is given
/// (whole blocks for ECB and CBC, any length for the stream modes) and keeps its chaining state
/// (wiped on drop).
struct ModeState {
    aes: AnyAes,
    mode: Mode,
    direction: Direction,
    /// CBC/CFB: the last ciphertext block; OFB: the last keystream block; CTR: the next counter
    /// block.
    reg: [u8; 16],
    /// Stream modes: the keystream of a block begun by an earlier call...
    ks: [u8; 16],
    /// ...of which this many bytes are used (16: none pending).
    used: usize,
    /// CFB: the ciphertext bytes of the begun block.
    fb: [u8; 16],
}

impl Drop for ModeState {
    fn drop(&mut self) {
        self.reg.zeroize();
        self.ks.zeroize();
        self.fb.zeroize();
    }
}

impl ModeState {
    fn new(aes: AnyAes, mode: Mode, direction: Direction, iv: &[u8; 16]) -> ModeState {
        ModeState {
            aes,
            mode,
            direction,
            reg: *iv,
            ks: [0; 16],
            used: 16,
            fb: [0; 16],
        }
    }

    fn apply(&mut self, data: &mut [u8]) {
        let decrypt = self.direction == Direction::Decrypt;
        match self.mode {
            Mode::Ecb if decrypt => ecb_decrypt(&self.aes, data),
            Mode::Ecb => ecb_encrypt(&self.aes, data),
            Mode::Cbc if decrypt => cbc_decrypt_chained(&self.aes, &mut self.reg, data),
            Mode::Cbc => cbc_encrypt_chained(&self.aes, &mut self.reg, data),
            Mode::Ctr | Mode::Cfb | Mode::Ofb => {
                // 1. The rest of a block begun by the previous call.
                let n = self.take_keystream(data);
                let data = &mut data[n..];
                // 2. Whole blocks through the kernels.
                let whole = data.len() / 16 * 16;
                let (bulk, tail) = data.split_at_mut(whole);
                match self.mode {
                    Mode::Ctr => {
                        ctr_apply(&self.aes, &self.reg, bulk);
                        let next = u128::from_be_bytes(self.reg).wrapping_add((whole / 16) as u128);
                        self.reg = next.to_be_bytes();
                    }
                    Mode::Cfb => cfb_chained(&self.aes, self.direction, &mut self.reg, bulk),
                    _ => ofb_chained(&self.aes, &mut self.reg, bulk),
                }
                // 3. A partial last block: make its keystream and keep the rest for later.
                if !tail.is_empty() {
                    self.ks = self.reg;
                    self.aes.encrypt_block(&mut self.ks);
                    match self.mode {
                        Mode::Ctr => {
                            self.reg = u128::from_be_bytes(self.reg).wrapping_add(1).to_be_bytes()
                        }
                        Mode::Ofb => self.reg = self.ks,
                        _ => {}
                    }
                    self.used = 0;
                    self.take_keystream(tail);
                }
            }
        }
    }

    /// XORs the pending keystream bytes into the start of `data`; returns how many were used.
    fn take_keystream(&mut self, data: &mut [u8]) -> usize {
        let n = (16 - self.used).min(data.len());
        let cfb = self.mode == Mode::Cfb;
        let decrypt = self.direction == Direction::Decrypt;
        for (i, byte) in data[..n].iter_mut().enumerate() {
            let at = self.used + i;
            let input = *byte;
            *byte ^= self.ks[at];
            if cfb {
                self.fb[at] = if decrypt { input } else { *byte };
            }
        }
        self.used += n;
        if n > 0 && self.used == 16 && cfb {
            self.reg = self.fb;
        }
        n
    }
}

/// Chunked AES encryption or decryption in one mode.
///
/// Feed the input with [`CipherStream::push`] in chunks of any size; the output is the same as
/// for one call on the whole input. [`CipherStream::finish`] ends the message (adds or checks
/// PKCS#7 padding, reports a partial block) and leaves the stream waiting for
/// [`CipherStream::restart`] with a new IV: a stream never reuses an IV by itself.
///
/// ```
/// use inpath_seal::aes::{CipherStream, Direction, Key, Mode, Padding};
/// let key = Key::new(&[7u8; 32])?;
/// let iv = [1u8; 16];
/// let mut enc = CipherStream::new(&key, Mode::Cbc, Direction::Encrypt, Some(iv), Padding::Pkcs7)?;
/// let mut ct = Vec::new();
/// enc.push(b"attack at ", &mut ct)?;
/// enc.push(b"dawn", &mut ct)?;
/// enc.finish(&mut ct)?;
/// assert_eq!(ct.len(), 16);
/// let mut dec = CipherStream::new(&key, Mode::Cbc, Direction::Decrypt, Some(iv), Padding::Pkcs7)?;
/// let mut pt = Vec::new();
/// dec.push(&ct, &mut pt)?;
/// dec.finish(&mut pt)?;
/// assert_eq!(pt, b"attack at dawn");
/// # Ok::<(), inpath_seal::Error>(())
/// ```
pub struct CipherStream {
    aes: AnyAes,
    mode: Mode,
    direction: Direction,
    padding: Padding,
    state: Option<ModeState>,
    /// Bytes of an incomplete block (ECB/CBC), or the held-back last block when decrypting
    /// with padding.
    pending: Vec<u8>,
    total: u64,
}

impl CipherStream {
    /// A stream for `mode` and `direction` under `key`. `iv` is required for every mode but ECB
    /// and must be `None` for ECB; `padding` must be [`Padding::None`] for CTR, CFB and OFB.
    pub fn new(
        key: &Key,
        mode: Mode,
        direction: Direction,
        iv: Option<[u8; 16]>,
        padding: Padding,
    ) -> Result<CipherStream> {
        CipherStream::with_aes(AnyAes::new(key), mode, direction, iv, padding)
    }

    /// As [`CipherStream::new`] on one particular kernel (for tests and benchmarks that compare
    /// kernels); an error when that kernel may not run here.
    pub fn with_kernel(
        key: &Key,
        kernel: AesKernel,
        mode: Mode,
        direction: Direction,
        iv: Option<[u8; 16]>,
        padding: Padding,
    ) -> Result<CipherStream> {
        let aes = AnyAes::with_kernel(key, kernel).ok_or_else(|| {
            Error::parameter(
                "aes kernel",
                kernel.name(),
                "a kernel this CPU has within INPATH_ISA",
            )
        })?;
        CipherStream::with_aes(aes, mode, direction, iv, padding)
    }

    fn with_aes(
        aes: AnyAes,
        mode: Mode,
        direction: Direction,
        iv: Option<[u8; 16]>,
        padding: Padding,
    ) -> Result<CipherStream> {
        if !mode.is_block_mode() && padding != Padding::None {
            return Err(Error::parameter(
                "padding",
                "pkcs7",
                format!("none for {} (a stream mode)", mode.name()),
            ));
        }
        let mut stream = CipherStream {
            aes,
            mode,
            direction,
            padding,
            state: None,
            pending: Vec::with_capacity(32),
            total: 0,
        };
        stream.restart(iv)?;
        Ok(stream)
    }

    /// Starts a new message with `iv` (`None` for ECB), dropping any unfinished one.
    pub fn restart(&mut self, iv: Option<[u8; 16]>) -> Result<()> {
        let iv = match (self.mode.needs_iv(), iv) {
            (true, Some(iv)) => iv,
            (false, None) => [0u8; 16],
            (true, None) => {
                return Err(Error::parameter(
                    "iv",
                    "none",
                    format!("a 16-byte IV for {}", self.mode.name()),
                ))
            }
            (false, Some(_)) => return Err(Error::parameter("iv", "given", "no IV for ecb")),
        };
        self.pending.zeroize();
        self.pending.clear();
        self.total = 0;
        self.state = Some(ModeState::new(
            self.aes.clone(),
            self.mode,
            self.direction,
            &iv,
        ));
        Ok(())
    }

    fn state(&mut self) -> Result<&mut ModeState> {
        self.state.as_mut().ok_or_else(|| {
            Error::State("cipher stream finished: call restart with a new IV first".into())
        })
    }

    /// Whether decryption must hold the last full block back for the padding check.
    fn holds_back(&self) -> bool {
        self.padding == Padding::Pkcs7 && self.direction == Direction::Decrypt
    }

    /// Processes the next chunk, appending the output that is ready to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.state()?;
        self.total += input.len() as u64;
        if !self.mode.is_block_mode() {
            let start = out.len();
            out.extend_from_slice(input);
            self.state()?.apply(&mut out[start..]);
            return Ok(());
        }
        // Process every whole block of pending + input, except (when decrypting with padding)
        // the last whole block, which finish needs for the padding check.
        let available = self.pending.len() + input.len();
        let mut n = available / 16 * 16;
        if self.holds_back() && n == available && n > 0 {
            n -= 16;
        }
        if n == 0 {
            self.pending.extend_from_slice(input);
            return Ok(());
        }
        let from_input = n - self.pending.len();
        let start = out.len();
        out.extend_from_slice(&self.pending);
        out.extend_from_slice(&input[..from_input]);
        self.pending.zeroize();
        self.pending.clear();
        self.pending.extend_from_slice(&input[from_input..]);
        self.state()?.apply(&mut out[start..]);
        Ok(())
    }

    /// Ends the message: pads (encryption) or checks and strips the padding (decryption), and
    /// reports a partial block when there is no padding. Afterwards call [`Self::restart`].
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<()> {
        let result = self.finish_inner(out);
        self.pending.zeroize();
        self.pending.clear();
        self.state = None;
        result
    }

    fn finish_inner(&mut self, out: &mut Vec<u8>) -> Result<()> {
        self.state()?;
        if !self.mode.is_block_mode() {
            return Ok(());
        }
        let mode = if self.mode == Mode::Ecb {
            "aes-ecb"
        } else {
            "aes-cbc"
        };
        match (self.padding, self.direction) {
            (Padding::None, _) => {
                if !self.pending.is_empty() {
                    return Err(Error::PartialBlock {
                        mode,
                        len: self.total,
                        rest: self.pending.len(),
                    });
                }
                Ok(())
            }
            (Padding::Pkcs7, Direction::Encrypt) => {
                let mut last = std::mem::take(&mut self.pending);
                pkcs7_pad(&mut last);
                let start = out.len();
                out.extend_from_slice(&last);
                last.zeroize();
                self.state()?.apply(&mut out[start..]);
                Ok(())
            }
            (Padding::Pkcs7, Direction::Decrypt) => {
                if self.total == 0 {
                    return Err(Error::corrupt(
                        mode,
                        "empty input: PKCS#7 needs at least one block",
                    ));
                }
                if self.pending.len() != 16 {
                    return Err(Error::PartialBlock {
                        mode,
                        len: self.total,
                        rest: self.pending.len() % 16,
                    });
                }
                let mut last = std::mem::take(&mut self.pending);
                self.state()?.apply(&mut last);
                let result = match pkcs7_unpadded_len(&last) {
                    Some(n) => {
                        out.extend_from_slice(&last[..n]);
                        Ok(())
                    }
                    None => Err(Error::BadPadding { mode }),
                };
                last.zeroize();
                result
            }
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }
}

impl inpath_core::Transform for CipherStream {
    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> inpath_core::Result<()> {
        CipherStream::push(self, input, out).map_err(Into::into)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> inpath_core::Result<()> {
        CipherStream::finish(self, out).map_err(Into::into)
    }
}

/// One-shot helper: the whole of `data` through a fresh [`CipherStream`].
pub fn apply(
    key: &Key,
    mode: Mode,
    direction: Direction,
    iv: Option<[u8; 16]>,
    padding: Padding,
    data: &[u8],
) -> Result<Vec<u8>> {
    let mut stream = CipherStream::new(key, mode, direction, iv, padding)?;
    let mut out = Vec::with_capacity(data.len() + 16);
    stream.push(data, &mut out)?;
    stream.finish(&mut out)?;
    Ok(out)
}

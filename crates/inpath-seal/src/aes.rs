//! AES-128/192/256 in ECB, CBC, CTR, CFB-128 and OFB: keys that wipe themselves, one-shot page
//! operations for the page codec, and a chunked [`CipherStream`] in which any split of the input
//! gives the same bytes as one call (the Vitis security library's chunk API).
//!
//! The block cipher and the modes are RustCrypto's (`aes`, `cbc`, `ctr`, `cfb-mode`, `ofb`);
//! `aes` picks AES-NI, VAES-256 or VAES-512 at run time. This module adds key handling, chunk
//! buffering, PKCS#7 padding for ECB/CBC, and the multi-page CBC encryption in
//! [`crate::kernel`].
//!
//! Conventions (the same as OpenSSL's and NIST SP 800-38A's):
//! - CTR: the 16-byte IV is the initial counter block, incremented as a 128-bit big-endian
//!   integer per block (`openssl enc -aes-256-ctr -iv`).
//! - CFB: CFB-128 (full-block feedback), `openssl enc -aes-256-cfb`.
//! - ECB/CBC: input in whole 16-byte blocks, or PKCS#7 padding ([`Padding::Pkcs7`], what
//!   `openssl enc` does by default).

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

/// An expanded AES key of any size (round keys wiped on drop by the `aes` crate).
#[derive(Clone)]
pub enum AnyAes {
    /// AES-128.
    A128(aes::Aes128),
    /// AES-192.
    A192(aes::Aes192),
    /// AES-256.
    A256(aes::Aes256),
}

/// Runs `$body` with `$c` bound to the concrete AES type inside an [`AnyAes`].
macro_rules! with_aes {
    ($aes:expr, $c:ident => $body:expr) => {
        match $aes {
            $crate::aes::AnyAes::A128($c) => $body,
            $crate::aes::AnyAes::A192($c) => $body,
            $crate::aes::AnyAes::A256($c) => $body,
        }
    };
}
pub(crate) use with_aes;

impl AnyAes {
    /// Expands `key`.
    pub fn new(key: &Key) -> AnyAes {
        let bytes = key.expose_secret();
        // The lengths are guaranteed by `Key::new`.
        match bytes.len() {
            16 => AnyAes::A128(aes::Aes128::new(bytes.try_into().expect("16-byte key"))),
            24 => AnyAes::A192(aes::Aes192::new(bytes.try_into().expect("24-byte key"))),
            _ => AnyAes::A256(aes::Aes256::new(bytes.try_into().expect("32-byte key"))),
        }
    }

    /// Key size in bits.
    pub fn bits(&self) -> u32 {
        match self {
            AnyAes::A128(_) => 128,
            AnyAes::A192(_) => 192,
            AnyAes::A256(_) => 256,
        }
    }

    /// Encrypts whole blocks in place (ECB).
    pub fn encrypt_blocks(&self, blocks: &mut [Block]) {
        with_aes!(self, c => c.encrypt_blocks(blocks))
    }

    /// Decrypts whole blocks in place (ECB).
    pub fn decrypt_blocks(&self, blocks: &mut [Block]) {
        with_aes!(self, c => c.decrypt_blocks(blocks))
    }
}

impl fmt::Debug for AnyAes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AnyAes(AES-{}, redacted)", self.bits())
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

/// CTR keystream XOR over `data` in place, counter starting at `iv` (the batched kernel,
/// [`crate::kernel::ctr_apply`]).
pub fn ctr_apply(aes: &AnyAes, iv: &[u8; 16], data: &mut [u8]) {
    crate::kernel::ctr_apply(aes, iv, data);
}

/// CTR through the plain `ctr` crate: the reference the kernel is tested against.
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

/// CBC encryption of whole blocks in place (the plain library path, one chain).
pub fn cbc_encrypt(aes: &AnyAes, iv: &[u8; 16], data: &mut [u8]) {
    with_aes!(aes, c => {
        let mut mode = cbc::Encryptor::inner_iv_init(c.clone(), iv.into());
        mode.encrypt_blocks(as_blocks(data));
    })
}

/// CBC decryption of whole blocks in place (parallel across blocks inside the library).
pub fn cbc_decrypt(aes: &AnyAes, iv: &[u8; 16], data: &mut [u8]) {
    with_aes!(aes, c => {
        let mut mode = cbc::Decryptor::inner_iv_init(c.clone(), iv.into());
        mode.decrypt_blocks(as_blocks(data));
    })
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
/// (whole blocks for ECB and CBC, any length for the stream modes) and keeps its chaining state.
trait ModeState: Send {
    fn apply(&mut self, data: &mut [u8]);
}

struct EcbEnc<C>(C);
struct EcbDec<C>(C);
struct CbcEnc<C: BlockCipherEncrypt<BlockSize = U16>>(cbc::Encryptor<C>);
struct CbcDec<C: BlockCipherDecrypt<BlockSize = U16>>(cbc::Decryptor<C>);
struct Ctr<C: BlockCipherEncrypt<BlockSize = U16>>(ctr::Ctr128BE<C>);
struct CfbEnc<C: BlockCipherEncrypt<BlockSize = U16>>(cfb_mode::BufEncryptor<C>);
struct CfbDec<C: BlockCipherEncrypt<BlockSize = U16>>(cfb_mode::BufDecryptor<C>);
struct Ofb<C: BlockCipherEncrypt<BlockSize = U16>>(ofb::Ofb<C>);

impl<C: BlockCipherEncrypt<BlockSize = U16> + Send> ModeState for EcbEnc<C> {
    fn apply(&mut self, data: &mut [u8]) {
        self.0.encrypt_blocks(as_blocks(data));
    }
}
impl<C: BlockCipherDecrypt<BlockSize = U16> + Send> ModeState for EcbDec<C> {
    fn apply(&mut self, data: &mut [u8]) {
        self.0.decrypt_blocks(as_blocks(data));
    }
}
impl<C: BlockCipherEncrypt<BlockSize = U16> + Send> ModeState for CbcEnc<C> {
    fn apply(&mut self, data: &mut [u8]) {
        self.0.encrypt_blocks(as_blocks(data));
    }
}
impl<C: BlockCipherDecrypt<BlockSize = U16> + Send> ModeState for CbcDec<C> {
    fn apply(&mut self, data: &mut [u8]) {
        self.0.decrypt_blocks(as_blocks(data));
    }
}
impl<C: BlockCipherEncrypt<BlockSize = U16> + Send> ModeState for Ctr<C> {
    fn apply(&mut self, data: &mut [u8]) {
        self.0.apply_keystream(data);
    }
}
impl<C: BlockCipherEncrypt<BlockSize = U16> + Send> ModeState for CfbEnc<C> {
    fn apply(&mut self, data: &mut [u8]) {
        self.0.encrypt(data);
    }
}
impl<C: BlockCipherEncrypt<BlockSize = U16> + Send> ModeState for CfbDec<C> {
    fn apply(&mut self, data: &mut [u8]) {
        self.0.decrypt(data);
    }
}
impl<C: BlockCipherEncrypt<BlockSize = U16> + Send> ModeState for Ofb<C> {
    fn apply(&mut self, data: &mut [u8]) {
        self.0.apply_keystream(data);
    }
}

fn mode_state<C>(cipher: C, mode: Mode, direction: Direction, iv: &[u8; 16]) -> Box<dyn ModeState>
where
    C: BlockCipherEncrypt<BlockSize = U16>
        + BlockCipherDecrypt<BlockSize = U16>
        + Clone
        + Send
        + 'static,
{
    let iv = iv.into();
    match (mode, direction) {
        (Mode::Ecb, Direction::Encrypt) => Box::new(EcbEnc(cipher)),
        (Mode::Ecb, Direction::Decrypt) => Box::new(EcbDec(cipher)),
        (Mode::Cbc, Direction::Encrypt) => {
            Box::new(CbcEnc(cbc::Encryptor::inner_iv_init(cipher, iv)))
        }
        (Mode::Cbc, Direction::Decrypt) => {
            Box::new(CbcDec(cbc::Decryptor::inner_iv_init(cipher, iv)))
        }
        (Mode::Ctr, _) => Box::new(Ctr(ctr::Ctr128BE::from_core(ctr::CtrCore::inner_iv_init(
            cipher, iv,
        )))),
        (Mode::Cfb, Direction::Encrypt) => {
            Box::new(CfbEnc(cfb_mode::BufEncryptor::inner_iv_init(cipher, iv)))
        }
        (Mode::Cfb, Direction::Decrypt) => {
            Box::new(CfbDec(cfb_mode::BufDecryptor::inner_iv_init(cipher, iv)))
        }
        (Mode::Ofb, _) => Box::new(Ofb(ofb::Ofb::from_core(ofb::OfbCore::inner_iv_init(
            cipher, iv,
        )))),
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
    state: Option<Box<dyn ModeState>>,
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
        if !mode.is_block_mode() && padding != Padding::None {
            return Err(Error::parameter(
                "padding",
                "pkcs7",
                format!("none for {} (a stream mode)", mode.name()),
            ));
        }
        let mut stream = CipherStream {
            aes: AnyAes::new(key),
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
        self.state =
            Some(with_aes!(&self.aes, c => mode_state(c.clone(), self.mode, self.direction, &iv)));
        Ok(())
    }

    fn state(&mut self) -> Result<&mut Box<dyn ModeState>> {
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

//! `inpath.seal` / `unseal` (the page codec) and `compress` / `decompress` (streaming formats).

use crate::InpathError;
use inpath_seal::codec::{self, Format};
use inpath_seal::{Cipher, Compression, Key, KeyRing, SealConfig, Sealer, Unsealer};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

pub(crate) fn seal_err(err: inpath_seal::Error) -> PyErr {
    InpathError::new_err(err.to_string())
}

/// A read-only byte buffer (`bytes`, `bytearray`, `memoryview`, a uint8 array...), located by
/// address so the GIL can be released while it is read.
struct Bytes {
    _buffer: Option<PyUntypedBuffer>,
    address: usize,
    len: usize,
}

impl Bytes {
    fn from_object(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Bytes> {
        let buffer = PyUntypedBuffer::get(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} must be bytes-like (bytes, bytearray, memoryview)"
            ))
        })?;
        if !buffer.is_c_contiguous() {
            return Err(PyTypeError::new_err(format!(
                "{what} must be a contiguous buffer"
            )));
        }
        let (address, len) = (buffer.buf_ptr() as usize, buffer.len_bytes());
        Ok(Bytes {
            _buffer: Some(buffer),
            address,
            len,
        })
    }

    /// # Safety
    /// Valid while `self` is alive (the held buffer keeps the memory in place).
    unsafe fn slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the buffer protocol guarantees `len` readable bytes at `address` while the
        // buffer is held by `self._buffer`.
        unsafe { std::slice::from_raw_parts(self.address as *const u8, self.len) }
    }
}

pub(crate) fn config(
    compress: &str,
    cipher: &str,
    level: Option<i32>,
    key: Option<&Key>,
) -> PyResult<SealConfig> {
    let mut compression = Compression::parse(compress).map_err(seal_err)?;
    if let Some(level) = level {
        compression = match compression {
            Compression::Deflate(_) => Compression::Deflate(u8::try_from(level).map_err(|_| {
                InpathError::new_err(format!("deflate level {level} is out of range: 0 to 9"))
            })?),
            Compression::Zstd(_) => Compression::Zstd(i8::try_from(level).map_err(|_| {
                InpathError::new_err(format!("zstd level {level} is out of range"))
            })?),
            other => {
                return Err(InpathError::new_err(format!(
                    "level applies to deflate and zstd, not {}",
                    other.describe()
                )))
            }
        };
    }
    let (cipher, bits) = Cipher::parse(cipher).map_err(seal_err)?;
    if let (Some(key), true) = (key, cipher != Cipher::None) {
        if key.bits() != bits {
            return Err(InpathError::new_err(format!(
                "the key has {} bits but the cipher needs a {bits}-bit key",
                key.bits()
            )));
        }
    }
    Ok(SealConfig {
        compression,
        cipher,
    })
}

fn sealer(
    compress: &str,
    cipher: &str,
    level: Option<i32>,
    key: Option<&[u8]>,
    key_id: u32,
) -> PyResult<Sealer> {
    let key = key.map(Key::new).transpose().map_err(seal_err)?;
    let config = config(compress, cipher, level, key.as_ref())?;
    if config.cipher != Cipher::None && key.is_none() {
        return Err(InpathError::new_err(format!(
            "cipher {cipher:?} needs key= (16, 24 or 32 bytes)"
        )));
    }
    Sealer::new(config, key.as_ref().map(|k| (key_id, k))).map_err(seal_err)
}

/// ``threads``: the CLI's one rule, 1 to `inpath_core::lanes::MAX_THREADS` (None: the
/// number of CPUs).
pub(crate) fn threads_arg(threads: Option<usize>) -> PyResult<usize> {
    match threads {
        Some(n) => inpath_core::lanes::check_threads(n)
            .map(|()| n)
            .map_err(|e| InpathError::new_err(format!("{e} (None: one per CPU)"))),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

pub(crate) fn ring(keys: Option<&Bound<'_, PyDict>>) -> PyResult<KeyRing> {
    let mut ring = KeyRing::new();
    if let Some(keys) = keys {
        for (id, key) in keys.iter() {
            let id: u32 = id
                .extract()
                .map_err(|_| PyTypeError::new_err("keys must map int key ids to key bytes"))?;
            let key: Vec<u8> = key
                .extract()
                .map_err(|_| PyTypeError::new_err("keys must map int key ids to key bytes"))?;
            ring.insert(id, Key::new(&key).map_err(seal_err)?);
        }
    }
    Ok(ring)
}

/// Seals one page: compress (``"none"``, ``"deflate"`` (level 1), ``"lz4"``, ``"zstd"``,
/// ``"snappy"``), then encrypt (``"none"``, ``"aes{128,192,256}-{ecb,ctr,cbc}"``,
/// ``"aes256-gcm"``) with ``key`` under ``key_id``. Returns the record (see docs/FORMATS.md).
///
/// >>> key = bytes(range(32))
/// >>> record = inpath.seal(b"page" * 1000, key=key)
/// >>> inpath.unseal(record, keys={1: key}) == b"page" * 1000
/// True
#[pyfunction]
#[pyo3(signature = (page, key=None, key_id=1, compress="deflate", cipher="aes256-gcm", level=None))]
fn seal<'py>(
    py: Python<'py>,
    page: &Bound<'py, PyAny>,
    key: Option<&[u8]>,
    key_id: u32,
    compress: &str,
    cipher: &str,
    level: Option<i32>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut sealer = sealer(compress, cipher, level, key, key_id)?;
    let page = Bytes::from_object(page, "page")?;
    // SAFETY: `page` outlives the closure.
    let record = py
        .detach(|| sealer.seal(unsafe { page.slice() }))
        .map_err(seal_err)?;
    Ok(PyBytes::new(py, &record))
}

/// Seals many pages on ``threads`` threads; byte-identical to sealing them one by one and
/// independent of the thread count.
#[pyfunction]
#[pyo3(signature = (pages, key=None, key_id=1, compress="deflate", cipher="aes256-gcm", level=None, threads=None))]
#[allow(clippy::too_many_arguments)]
fn seal_batch<'py>(
    py: Python<'py>,
    pages: &Bound<'py, PyAny>,
    key: Option<&[u8]>,
    key_id: u32,
    compress: &str,
    cipher: &str,
    level: Option<i32>,
    threads: Option<usize>,
) -> PyResult<Bound<'py, PyList>> {
    let mut sealer = sealer(compress, cipher, level, key, key_id)?;
    let held: Vec<Bytes> = pages
        .try_iter()?
        .map(|p| Bytes::from_object(&p?, "each page"))
        .collect::<PyResult<_>>()?;
    let threads = threads_arg(threads)?;
    let records = py
        .detach(|| {
            // SAFETY: `held` outlives the closure.
            let slices: Vec<&[u8]> = held.iter().map(|b| unsafe { b.slice() }).collect();
            sealer.seal_batch(&slices, threads)
        })
        .map_err(seal_err)?;
    PyList::new(py, records.iter().map(|r| PyBytes::new(py, r)))
}

/// Opens a sealed record with the keys (a dict key id → key bytes); raises ``InpathError``
/// naming the problem for a damaged record, a wrong or missing key.
#[pyfunction]
#[pyo3(signature = (record, keys=None, max_page=1 << 30))]
fn unseal<'py>(
    py: Python<'py>,
    record: &Bound<'py, PyAny>,
    keys: Option<&Bound<'py, PyDict>>,
    max_page: u64,
) -> PyResult<Bound<'py, PyBytes>> {
    let ring = ring(keys)?;
    let record = Bytes::from_object(record, "record")?;
    let unsealer = Unsealer::new(&ring).with_max_page(max_page);
    // SAFETY: `record` outlives the closure.
    let page = py
        .detach(|| unsealer.unseal(unsafe { record.slice() }))
        .map_err(seal_err)?;
    Ok(PyBytes::new(py, &page))
}

/// Opens many records on ``threads`` threads; raises on the first bad record (by index).
#[pyfunction]
#[pyo3(signature = (records, keys=None, threads=None, max_page=1 << 30))]
fn unseal_batch<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyAny>,
    keys: Option<&Bound<'py, PyDict>>,
    threads: Option<usize>,
    max_page: u64,
) -> PyResult<Bound<'py, PyList>> {
    let ring = ring(keys)?;
    let held: Vec<Bytes> = records
        .try_iter()?
        .map(|r| Bytes::from_object(&r?, "each record"))
        .collect::<PyResult<_>>()?;
    let threads = threads_arg(threads)?;
    let unsealer = Unsealer::new(&ring).with_max_page(max_page);
    let pages = py.detach(|| {
        // SAFETY: `held` outlives the closure.
        let slices: Vec<&[u8]> = held.iter().map(|b| unsafe { b.slice() }).collect();
        unsealer.unseal_batch(&slices, threads)
    });
    let mut out = Vec::with_capacity(pages.len());
    for (i, page) in pages.into_iter().enumerate() {
        out.push(PyBytes::new(
            py,
            &page.map_err(|e| InpathError::new_err(format!("record {i}: {e}")))?,
        ));
    }
    PyList::new(py, out)
}

/// Compresses ``data`` in a standard format: ``"gzip"``, ``"zlib"``, ``"deflate"`` (raw),
/// ``"lz4"`` (frame), ``"snappy"`` (framing format) or ``"zstd"``.
#[pyfunction]
#[pyo3(signature = (data, format="zstd", level=None))]
fn compress<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    format: &str,
    level: Option<i32>,
) -> PyResult<Bound<'py, PyBytes>> {
    let format = Format::parse(format).map_err(seal_err)?;
    let data = Bytes::from_object(data, "data")?;
    // SAFETY: `data` outlives the closure.
    let out = py
        .detach(|| codec::compress(format, level, unsafe { data.slice() }))
        .map_err(seal_err)?;
    Ok(PyBytes::new(py, &out))
}

/// Decompresses ``data``; ``format=None`` recognises gzip, zlib, LZ4, Snappy framing and Zstd
/// from the first bytes (raw DEFLATE has no signature: name it). ``limit`` caps the output.
#[pyfunction]
#[pyo3(signature = (data, format=None, limit=1 << 34))]
fn decompress<'py>(
    py: Python<'py>,
    data: &Bound<'py, PyAny>,
    format: Option<&str>,
    limit: u64,
) -> PyResult<Bound<'py, PyBytes>> {
    let data = Bytes::from_object(data, "data")?;
    // SAFETY: `data` outlives every use below.
    let slice = unsafe { data.slice() };
    let format = match format {
        Some(name) => Format::parse(name).map_err(seal_err)?,
        None => Format::detect(slice).ok_or_else(|| {
            InpathError::new_err("the data does not start like gzip, zlib, LZ4, Snappy or Zstd; pass format= (\"deflate\" for raw DEFLATE)")
        })?,
    };
    let out = py
        .detach(|| codec::decompress(format, slice, limit))
        .map_err(seal_err)?;
    Ok(PyBytes::new(py, &out))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(seal, m)?)?;
    m.add_function(wrap_pyfunction!(seal_batch, m)?)?;
    m.add_function(wrap_pyfunction!(unseal, m)?)?;
    m.add_function(wrap_pyfunction!(unseal_batch, m)?)?;
    m.add_function(wrap_pyfunction!(compress, m)?)?;
    m.add_function(wrap_pyfunction!(decompress, m)?)?;
    Ok(())
}

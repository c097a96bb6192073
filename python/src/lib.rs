//! The `inpath` Python package's native module (`inpath._inpath`): thin PyO3 wrappers over the
//! same crates the CLI uses, so results are identical. Arrays are read in place through the
//! buffer protocol (no copy) and the GIL is released while the engines run.
#![deny(missing_docs)]

use inpath_core::Error;
use inpath_sketch::{format, report, Estimator, HashMode, ItemKind, Params, Parts, Sketch};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

mod corr;
mod hll;
mod query;
mod seal;
mod store;

pyo3::create_exception!(
    inpath,
    InpathError,
    PyValueError,
    "Bad input or parameters for an inpath engine (a ValueError)."
);

/// The NumPy dtype kind (`"i"`, `"u"`, `"f"`, `"O"`, ...) of a pandas Series or Index, or
/// `None` for anything else.
fn series_kind(data: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if !(data.hasattr("to_numpy")? && data.hasattr("dtype")?) {
        return Ok(None);
    }
    Ok(Some(
        data.getattr("dtype")?
            .getattr("kind")?
            .extract()
            .unwrap_or_default(),
    ))
}

/// Turns an engine error into a Python exception with the same message.
fn to_py(err: Error) -> PyErr {
    match err {
        Error::Io { .. } | Error::Write { .. } => PyOSError::new_err(err.to_string()),
        other => InpathError::new_err(other.to_string()),
    }
}

/// A 1-D, C-contiguous buffer of 4- or 8-byte integers, located by address so the GIL can be
/// released while it is read.
struct IntArray {
    /// Keeps the exporter's buffer alive (and its memory in place) while we read it.
    _buffer: PyUntypedBuffer,
    address: usize,
    len_bytes: usize,
    width: usize,
    dtype: String,
}

impl IntArray {
    /// The array behind `obj`, or `None` when `obj` does not export a buffer.
    fn from_object(obj: &Bound<'_, PyAny>) -> PyResult<Option<IntArray>> {
        let Ok(buffer) = PyUntypedBuffer::get(obj) else {
            return Ok(None);
        };
        let format = buffer.format().to_string_lossy().into_owned();
        let code = format.trim_start_matches(['@', '=', '<']);
        let width = buffer.item_size();
        let dtype = match (code, width) {
            ("I" | "L", 4) => "uint32",
            ("i" | "l", 4) => "int32",
            ("L" | "Q", 8) => "uint64",
            ("l" | "q", 8) => "int64",
            _ => {
                return Err(PyTypeError::new_err(format!(
                "unsupported array element type (buffer format {format:?}, {width}-byte items): \
                     pass uint32/int32 or uint64/int64 integers, or a sequence of str/bytes values"
            )))
            }
        };
        if format.starts_with(['>', '!']) {
            return Err(PyTypeError::new_err(
                "big-endian arrays are not supported: convert with .astype('<u4') or similar",
            ));
        }
        let dims = buffer.dimensions();
        if dims != 1 {
            return Err(PyValueError::new_err(format!(
                "expected a 1-D array of items, got {dims} dimensions (flatten it with .ravel() first)"
            )));
        }
        if !buffer.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "the array is not contiguous (a strided view?): pass numpy.ascontiguousarray(a)",
            ));
        }
        Ok(Some(IntArray {
            address: buffer.buf_ptr() as usize,
            len_bytes: buffer.len_bytes(),
            width,
            dtype: dtype.to_string(),
            _buffer: buffer,
        }))
    }

    /// The items' bytes.
    ///
    /// # Safety
    /// The caller must keep `self` alive while using the slice, and no other thread may resize
    /// or free the exporting object meanwhile (the held buffer prevents resizing; NumPy's own
    /// functions make the same assumption when they release the GIL).
    unsafe fn bytes(&self) -> &[u8] {
        if self.len_bytes == 0 {
            return &[];
        }
        // SAFETY: the buffer protocol guarantees `len_bytes` readable bytes at `buf_ptr` for as
        // long as the buffer is held, which `self._buffer` does; contiguity was checked.
        unsafe { std::slice::from_raw_parts(self.address as *const u8, self.len_bytes) }
    }
}

fn parse_hash(hash: &str) -> PyResult<HashMode> {
    hash.parse().map_err(to_py)
}

fn parse_estimator(estimator: &str) -> PyResult<Estimator> {
    estimator.parse().map_err(to_py)
}

fn parse_kind(kind: &str) -> PyResult<ItemKind> {
    match kind {
        "u32" => Ok(ItemKind::U32),
        "u64" => Ok(ItemKind::U64),
        "bytes" | "str" => Ok(ItemKind::Bytes),
        other => Err(InpathError::new_err(format!(
            "kind = {other:?} is not one of \"u32\", \"u64\", \"bytes\""
        ))),
    }
}

/// One-pass HyperLogLog + Fast-AGMS + Count-Min + min/max/count sketch (SKT).
///
/// ``Sketch(hll_p=16, cm=(6, 13), agms=(6, 13), hash="fast", seed=None, kind=None)``
///
/// - ``hll_p``: HyperLogLog precision (4..18); ``cm`` and ``agms``: (rows 1..16, index bits 4..20).
/// - ``hash``: ``"fast"`` (XXH3-128) or ``"compat"`` (MurmurHash3_x64_128, bit-exact with SKT).
/// - ``kind``: ``"u32"``, ``"u64"`` or ``"bytes"``; by default the first ``update`` decides
///   (32-bit integer arrays → u32, 64-bit → u64, str/bytes values → bytes).
///
/// ``update`` takes NumPy integer arrays (read in place, GIL released), pandas Series,
/// ``array.array``/``memoryview`` of integers, or sequences of ``str``/``bytes`` values.
/// Signed integers are hashed by their two's-complement bits, like the unsigned integers of the
/// same width, so ``min``/``max`` are reported as unsigned values.
///
/// >>> import numpy as np, inpath
/// >>> s = inpath.Sketch()
/// >>> s.update(np.arange(100_000, dtype=np.uint32) % 1000)
/// >>> round(s.cardinality())
/// 1000
/// >>> s.frequency(7) >= 100
/// True
#[pyclass(name = "Sketch", module = "inpath")]
struct PySketch {
    params: Params,
    /// `None` until the kind is known (explicitly or from the first update).
    sketch: Option<Sketch>,
}

impl PySketch {
    /// An error naming the sketch a query needs when it is not kept.
    fn require(&self, kept: bool, name: &str, query: &str) -> PyResult<()> {
        if kept {
            Ok(())
        } else {
            Err(InpathError::new_err(format!(
                "{query}() needs the {name} sketch, but this sketch keeps only {:?} (sketches=...)",
                self.params.parts().names()
            )))
        }
    }

    fn resolve(&mut self, kind: ItemKind, what: &str) -> PyResult<&mut Sketch> {
        match &self.sketch {
            Some(existing) if existing.kind() != kind => {
                return Err(InpathError::new_err(format!(
                    "this sketch holds {} items; got {what}",
                    existing.kind().name()
                )))
            }
            Some(_) => {}
            None => self.sketch = Some(Sketch::new(self.params, kind).map_err(to_py)?),
        }
        Ok(self.sketch.as_mut().expect("set above"))
    }

    fn get(&self) -> PyResult<&Sketch> {
        self.sketch.as_ref().ok_or_else(|| {
            InpathError::new_err(
                "the sketch has no items yet and no kind (pass kind= or update it first)",
            )
        })
    }

    fn update_values(&mut self, py: Python<'_>, values: &Bound<'_, PyAny>) -> PyResult<()> {
        // Gather the values' bytes with the GIL held, then hash and sketch without it.
        let mut data = Vec::new();
        let mut ends = Vec::new();
        let mut integers: Vec<u64> = Vec::new();
        for value in values.try_iter()? {
            let value = value?;
            if let Ok(s) = value.cast::<PyString>() {
                data.extend_from_slice(s.to_str()?.as_bytes());
                ends.push(data.len());
            } else if let Ok(b) = value.cast::<PyBytes>() {
                data.extend_from_slice(b.as_bytes());
                ends.push(data.len());
            } else if let Ok(i) = value.extract::<u64>() {
                integers.push(i);
            } else {
                return Err(PyTypeError::new_err(format!(
                    "cannot sketch a value of type {}: use str, bytes, or non-negative int",
                    value.get_type().name()?
                )));
            }
        }
        if !ends.is_empty() && !integers.is_empty() {
            return Err(PyTypeError::new_err(
                "a sequence mixes text and integers: sketch one kind at a time",
            ));
        }
        if !integers.is_empty() {
            let kind = match &self.sketch {
                Some(s) => s.kind(),
                None => ItemKind::U64,
            };
            let sketch = self.resolve(kind, "integers")?;
            return py
                .detach(|| match kind {
                    ItemKind::U32 => {
                        let items: Vec<u32> = integers
                            .iter()
                            .map(|&i| {
                                u32::try_from(i).map_err(|_| {
                                    Error::parameter("item", i, "0 to 4294967295 for a u32 sketch")
                                })
                            })
                            .collect::<Result<_, _>>()?;
                        sketch.update_u32(&items)
                    }
                    ItemKind::U64 => sketch.update_u64(&integers),
                    ItemKind::Bytes => Err(Error::State(
                        "this sketch holds text values; got integers".into(),
                    )),
                })
                .map_err(to_py);
        }
        if ends.is_empty() {
            return Ok(());
        }
        let sketch = self.resolve(ItemKind::Bytes, "str/bytes values")?;
        py.detach(|| {
            let mut start = 0;
            sketch.update_values(ends.iter().map(|&end| {
                let value = &data[start..end];
                start = end;
                value
            }))
        })
        .map_err(to_py)
    }
}

#[pymethods]
impl PySketch {
    #[new]
    #[pyo3(signature = (hll_p=16, cm=(6, 13), agms=(6, 13), hash="fast", seed=None, kind=None, sketches="all"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        hll_p: u8,
        cm: (u8, u8),
        agms: (u8, u8),
        hash: &str,
        seed: Option<u64>,
        kind: Option<&str>,
        sketches: &str,
    ) -> PyResult<Self> {
        let hash = parse_hash(hash)?;
        let ((cm_rows, cm_p), (agms_rows, agms_p)) = (cm, agms);
        let params = Params {
            hll_p,
            cm_rows,
            cm_p,
            agms_rows,
            agms_p,
            hash,
            seed: seed.unwrap_or(hash.default_seed()),
        };
        params.validate().map_err(to_py)?;
        // The sketches not chosen get zero size (each shape is checked as given first).
        let params = params.with_parts(Parts::parse(sketches).map_err(to_py)?);
        let sketch = kind
            .map(|k| parse_kind(k).and_then(|k| Sketch::new(params, k).map_err(to_py)))
            .transpose()?;
        Ok(PySketch { params, sketch })
    }

    /// Adds items: a NumPy integer array (uint32/int32 → u32 items, uint64/int64 → u64 items),
    /// a pandas Series, a buffer of such integers, one str/bytes value, or a sequence of
    /// str/bytes values (or of ints). Returns None. An integer array is sketched without the
    /// GIL on up to ``threads`` threads (default: one per CPU; arrays under 2^18 items per
    /// thread take fewer); the state is the same for any count.
    #[pyo3(signature = (data, threads=None))]
    fn update(
        &mut self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        threads: Option<usize>,
    ) -> PyResult<()> {
        if threads == Some(0) {
            return Err(PyValueError::new_err(
                "threads must be at least 1 (or None: one per CPU)",
            ));
        }
        if data.is_instance_of::<PyString>() || data.is_instance_of::<PyBytes>() {
            let one = pyo3::types::PyTuple::new(py, [data])?;
            return self.update_values(py, one.as_any());
        }
        // pandas Series / Index: integer columns go through NumPy, others value by value.
        if let Some(kind) = series_kind(data)? {
            if kind == "i" || kind == "u" {
                let array = data.call_method0("to_numpy")?;
                return self.update(py, &array, threads);
            }
            return self.update_values(py, data);
        }
        if let Some(array) = IntArray::from_object(data)? {
            let (kind, what) = match array.width {
                4 => (ItemKind::U32, format!("a {} array", array.dtype)),
                _ => (ItemKind::U64, format!("a {} array", array.dtype)),
            };
            // Asked here, not per call: it reads the cgroup's CPU quota (a one-value update
            // in a Python loop must not).
            let lanes = threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let sketch = self.resolve(kind, &what)?;
            return py
                .detach(|| {
                    // SAFETY: `array` (and so the exporter's buffer) lives until this closure
                    // returns; see `IntArray::bytes`.
                    let bytes = unsafe { array.bytes() };
                    inpath_sketch::SketchEngine::update_on_lanes(sketch, bytes, lanes)
                })
                .map_err(to_py);
        }
        self.update_values(py, data)
    }

    /// Estimated number of distinct items (HyperLogLog). ``estimator`` is ``"ertl"`` (default)
    /// or ``"reference"`` (SKT's).
    #[pyo3(signature = (estimator="ertl"))]
    fn cardinality(&self, estimator: &str) -> PyResult<f64> {
        let estimator = parse_estimator(estimator)?;
        self.require(self.params.parts().hll, "hll", "cardinality")?;
        Ok(self
            .sketch
            .as_ref()
            .and_then(|s| s.cardinality(estimator))
            .unwrap_or(0.0))
    }

    /// Estimated second frequency moment F2 = Σ f² (Fast-AGMS).
    fn f2(&self) -> PyResult<f64> {
        self.require(self.params.parts().agms, "agms", "f2")?;
        Ok(self.sketch.as_ref().and_then(|s| s.f2()).unwrap_or(0.0))
    }

    /// Which sketches this one keeps, e.g. ``"hll,cm,agms"`` (the ``sketches`` argument).
    #[getter]
    fn sketches(&self) -> String {
        self.params.parts().names()
    }

    /// Count-Min point query: how often ``key`` occurred (never below the true count). ``key``
    /// is an int for integer sketches, str or bytes for text sketches.
    fn frequency(&self, key: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.require(self.params.parts().cm, "cm", "frequency")?;
        let Some(sketch) = &self.sketch else {
            return Ok(0);
        };
        let bytes: Vec<u8> = match sketch.kind() {
            ItemKind::U32 => {
                let v: u32 = key.extract().map_err(|_| {
                    InpathError::new_err("key must be an int from 0 to 4294967295 for a u32 sketch")
                })?;
                v.to_le_bytes().to_vec()
            }
            ItemKind::U64 => {
                let v: u64 = key.extract().map_err(|_| {
                    InpathError::new_err("key must be an int from 0 to 2**64-1 for a u64 sketch")
                })?;
                v.to_le_bytes().to_vec()
            }
            ItemKind::Bytes => {
                if let Ok(s) = key.cast::<PyString>() {
                    s.to_str()?.as_bytes().to_vec()
                } else if let Ok(b) = key.cast::<PyBytes>() {
                    b.as_bytes().to_vec()
                } else {
                    return Err(InpathError::new_err(
                        "key must be str or bytes for a text sketch",
                    ));
                }
            }
        };
        sketch.frequency_of_bytes(&bytes).map_err(to_py)
    }

    /// Items added.
    #[getter]
    fn count(&self) -> u64 {
        self.sketch.as_ref().map_or(0, |s| s.count())
    }

    /// Exact minimum (int for integer items, float over the numeric values of text items),
    /// None when there is none.
    #[getter]
    fn min(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.extreme(py, true)
    }

    /// Exact maximum, like ``min``.
    #[getter]
    fn max(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.extreme(py, false)
    }

    /// ``"u32"``, ``"u64"``, ``"bytes"``, or None while undecided.
    #[getter]
    fn kind(&self) -> Option<&'static str> {
        self.sketch.as_ref().map(|s| s.kind().name())
    }

    /// Every estimate and setting as a dict (the same schema as ``inpath sketch --json``).
    #[pyo3(signature = (estimator="ertl"))]
    fn summary(&self, py: Python<'_>, estimator: &str) -> PyResult<Py<PyAny>> {
        let estimator = parse_estimator(estimator)?;
        let sketch = self.get()?;
        let text = report::summary_json(sketch, &sketch.summary(estimator)).to_string();
        Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
    }

    /// Merges ``other`` into this sketch (same settings required): the result equals the
    /// sketch of both inputs.
    fn merge(&mut self, other: PyRef<'_, PySketch>) -> PyResult<()> {
        let Some(theirs) = &other.sketch else {
            if other.params != self.params {
                return Err(InpathError::new_err(
                    "cannot merge: the sketches were made with different settings",
                ));
            }
            return Ok(());
        };
        let kind = theirs.kind();
        let mine = self.resolve(kind, &format!("a sketch of {} items", kind.name()))?;
        mine.merge(theirs).map_err(to_py)
    }

    /// The sketch in inpath's file format (the same bytes as ``inpath sketch --save``).
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &format::to_bytes(self.get()?)))
    }

    /// A sketch from bytes made by ``to_bytes`` or ``inpath sketch --save``.
    #[staticmethod]
    fn from_bytes(data: &[u8]) -> PyResult<PySketch> {
        let sketch = format::from_bytes(data, "sketch bytes").map_err(to_py)?;
        Ok(PySketch {
            params: *sketch.params(),
            sketch: Some(sketch),
        })
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let constructor = slf.get_type().getattr("from_bytes")?;
        Ok((constructor, (slf.borrow().to_bytes(slf.py())?,)))
    }

    fn __len__(&self) -> usize {
        self.count() as usize
    }

    fn __repr__(&self) -> String {
        let p = &self.params;
        match &self.sketch {
            None => format!("Sketch(empty, hll_p={}, cm=({}, {}), agms=({}, {}), hash={:?})", p.hll_p, p.cm_rows, p.cm_p, p.agms_rows, p.agms_p, p.hash.name()),
            Some(s) => format!(
                "Sketch({} {} items, ~{:.0} distinct, hll_p={}, cm=({}, {}), agms=({}, {}), hash={:?})",
                s.count(),
                s.kind().name(),
                s.cardinality(Estimator::Ertl).unwrap_or(f64::NAN),
                p.hll_p,
                p.cm_rows,
                p.cm_p,
                p.agms_rows,
                p.agms_p,
                p.hash.name()
            ),
        }
    }
}

impl PySketch {
    fn extreme(&self, py: Python<'_>, min: bool) -> PyResult<Py<PyAny>> {
        use inpath_sketch::Extremes;
        let Some(sketch) = &self.sketch else {
            return Ok(py.None());
        };
        Ok(match sketch.extremes() {
            Extremes::Int(Some((lo, hi))) => (if min { lo } else { hi })
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            Extremes::Numeric {
                range: Some((lo, hi)),
                ..
            } => (if min { lo } else { hi })
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            _ => py.None(),
        })
    }
}

/// The native module.
#[pymodule]
fn _inpath(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("InpathError", m.py().get_type::<InpathError>())?;
    m.add_class::<PySketch>()?;
    corr::register(m)?;
    hll::register(m)?;
    seal::register(m)?;
    query::register(m)?;
    store::register(m)?;
    Ok(())
}

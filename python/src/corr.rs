//! `inpath.corr`: exact correlation statistics of the columns (or rows) of a 2-D array.

use crate::{to_py, InpathError};
use inpath_core::{run_slice, Engine};
use inpath_corr::{Corr, CorrConfig, DType, Ddof, NanPolicy, Statistics};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The sufficient statistics of M streams (count, sums, sums of squares, sums of products),
/// exact for integer data. Merge statistics from several arrays, files or machines, save them
/// with ``to_bytes`` (the CLI's ``.stats`` format) and compute coefficients at any time.
#[pyclass(name = "Statistics", module = "inpath")]
pub struct PyStatistics {
    pub(crate) inner: Statistics,
}

fn f64_bytes<'py>(py: Python<'py>, values: &[f64]) -> Bound<'py, PyBytes> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    PyBytes::new(py, &bytes)
}

fn nan_policy(constant: &str) -> PyResult<NanPolicy> {
    match constant {
        "nan" => Ok(NanPolicy::Nan),
        "zero" => Ok(NanPolicy::Zero),
        other => Err(InpathError::new_err(format!(
            "constant = {other:?} is not \"nan\" or \"zero\""
        ))),
    }
}

fn ddof(ddof: u8) -> PyResult<Ddof> {
    match ddof {
        0 => Ok(Ddof::Population),
        1 => Ok(Ddof::Sample),
        other => Err(InpathError::new_err(format!(
            "ddof = {other} is not 0 or 1"
        ))),
    }
}

#[pymethods]
impl PyStatistics {
    /// Number of streams M.
    #[getter]
    fn streams(&self) -> usize {
        self.inner.streams()
    }

    /// Rows (items per stream) accumulated.
    #[getter]
    fn count(&self) -> u64 {
        self.inner.count()
    }

    /// Stream names.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.inner.names().to_vec()
    }

    /// The item type, e.g. ``"u32"``.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.inner.dtype().name()
    }

    /// Folds ``other`` in (same type and streams): the result equals the statistics of both.
    fn merge(&mut self, other: PyRef<'_, PyStatistics>) -> PyResult<()> {
        self.inner.merge(&other.inner).map_err(to_py)
    }

    /// The full M×M Pearson matrix, row-major little-endian f64 bytes (``inpath.corr`` wraps
    /// this as a NumPy array).
    #[pyo3(signature = (constant="nan"))]
    fn _pearson<'py>(&self, py: Python<'py>, constant: &str) -> PyResult<Bound<'py, PyBytes>> {
        Ok(f64_bytes(
            py,
            &self.inner.pearson_matrix(nan_policy(constant)?),
        ))
    }

    /// The full M×M covariance matrix as f64 bytes.
    #[pyo3(signature = (ddof=1))]
    fn _covariance<'py>(&self, py: Python<'py>, ddof: u8) -> PyResult<Bound<'py, PyBytes>> {
        let d = self::ddof(ddof)?;
        let m = self.inner.streams();
        let mut out = vec![0.0; m * m];
        for i in 0..m {
            for j in 0..m {
                out[i * m + j] = self.inner.covariance_pair(i, j, d);
            }
        }
        Ok(f64_bytes(py, &out))
    }

    /// Means as f64 bytes.
    fn _means<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        f64_bytes(py, &self.inner.means())
    }

    /// Standard deviations as f64 bytes.
    #[pyo3(signature = (ddof=1))]
    fn _std<'py>(&self, py: Python<'py>, ddof: u8) -> PyResult<Bound<'py, PyBytes>> {
        Ok(f64_bytes(py, &self.inner.std_devs(self::ddof(ddof)?)))
    }

    /// Regression of stream ``y`` on stream ``x``: ``(slope, intercept, slope_through_origin)``.
    #[pyo3(signature = (x, y, constant="nan"))]
    fn regression(&self, x: usize, y: usize, constant: &str) -> PyResult<(f64, f64, f64)> {
        let m = self.inner.streams();
        if x >= m || y >= m {
            return Err(InpathError::new_err(format!(
                "stream index out of range: there are {m} streams"
            )));
        }
        let r = self.inner.regression(x, y, nan_policy(constant)?);
        Ok((r.slope, r.intercept, r.slope_origin))
    }

    /// Cosine similarity of streams ``i`` and ``j``.
    #[pyo3(signature = (i, j, constant="nan"))]
    fn cosine(&self, i: usize, j: usize, constant: &str) -> PyResult<f64> {
        let m = self.inner.streams();
        if i >= m || j >= m {
            return Err(InpathError::new_err(format!(
                "stream index out of range: there are {m} streams"
            )));
        }
        Ok(self.inner.cosine_pair(i, j, nan_policy(constant)?))
    }

    /// The statistics in the CLI's ``.stats`` file format.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.to_bytes())
    }

    /// Statistics from ``to_bytes`` or an ``inpath corr --save`` file.
    #[staticmethod]
    fn from_bytes(data: &[u8]) -> PyResult<PyStatistics> {
        Ok(PyStatistics {
            inner: Statistics::from_bytes(data, "statistics bytes").map_err(to_py)?,
        })
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let constructor = slf.get_type().getattr("from_bytes")?;
        Ok((constructor, (slf.borrow().to_bytes(slf.py()),)))
    }

    fn __repr__(&self) -> String {
        format!(
            "Statistics({} streams of {}, {} rows)",
            self.inner.streams(),
            self.inner.dtype().name(),
            self.inner.count()
        )
    }
}

/// `_corr_array(data, rowvar, threads, names)`: statistics of a 2-D C- or F-contiguous array
/// whose columns (``rowvar=False``) or rows (``rowvar=True``) are the streams. Read in place,
/// GIL released.
#[pyfunction]
#[pyo3(signature = (data, rowvar=false, threads=1, names=None))]
fn _corr_array(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    rowvar: bool,
    threads: usize,
    names: Option<Vec<String>>,
) -> PyResult<PyStatistics> {
    let buffer = PyUntypedBuffer::get(data)
        .map_err(|_| PyTypeError::new_err("expected a 2-D NumPy array (or a pandas DataFrame)"))?;
    let format = buffer.format().to_string_lossy().into_owned();
    if format.starts_with(['>', '!']) {
        return Err(PyTypeError::new_err(
            "big-endian arrays are not supported: convert with .astype(dtype.newbyteorder('<'))",
        ));
    }
    let code = format.trim_start_matches(['@', '=', '<']);
    let dtype = match (code, buffer.item_size()) {
        ("B", 1) => DType::U8,
        ("b", 1) => DType::I8,
        ("H", 2) => DType::U16,
        ("h", 2) => DType::I16,
        ("I" | "L", 4) => DType::U32,
        ("i" | "l", 4) => DType::I32,
        ("L" | "Q", 8) => DType::U64,
        ("l" | "q", 8) => DType::I64,
        ("f", 4) => DType::F32,
        ("d", 8) => DType::F64,
        (_, width) => {
            return Err(PyTypeError::new_err(format!(
                "unsupported element type (buffer format {format:?}, {width}-byte items): use 8/16/32/64-bit integers, float32 or float64"
            )))
        }
    };
    let dims = buffer.dimensions();
    if dims != 2 {
        return Err(PyValueError::new_err(format!(
            "expected a 2-D array (rows x streams), got {dims} dimension(s)"
        )));
    }
    let shape = buffer.shape();
    let (rows, cols) = (shape[0], shape[1]);
    let (streams, items) = if rowvar { (rows, cols) } else { (cols, rows) };
    if streams < 2 {
        return Err(InpathError::new_err(format!(
            "M = {streams} stream(s): at least 2 are needed to correlate"
        )));
    }
    let c = buffer.is_c_contiguous();
    let f = buffer.is_fortran_contiguous();
    if !c && !f {
        return Err(PyValueError::new_err(
            "the array is not contiguous (a strided view?): pass numpy.ascontiguousarray(a)",
        ));
    }
    // Row-interleaved in memory when each stream's items are `streams` apart.
    let interleaved = (c && !rowvar) || (!c && f && rowvar);
    let width = dtype.width();
    let address = buffer.buf_ptr() as usize;
    let len = buffer.len_bytes();
    let mut engine = Corr::new(CorrConfig::rows(dtype, streams)).map_err(to_py)?;
    if let Some(names) = names {
        engine.set_names(names).map_err(to_py)?;
    }
    let threads = threads.max(1);
    let stats = py.detach(|| -> inpath_core::Result<Statistics> {
        // SAFETY: the buffer protocol guarantees `len` readable bytes at `address` while
        // `buffer` is held (it lives until this function returns); contiguity was checked.
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            unsafe { std::slice::from_raw_parts(address as *const u8, len) }
        };
        if interleaved {
            run_slice(&mut engine, bytes, threads)?;
        } else {
            // Each stream's items are contiguous: each lane gets its range's column slices.
            inpath_corr::run_column_lanes(
                &mut engine,
                items as u64,
                threads,
                |lane, rows| -> inpath_core::Result<()> {
                    let (start, end) = (rows.start as usize, rows.end as usize);
                    let columns: Vec<&[u8]> = (0..streams)
                        .map(|s| &bytes[(s * items + start) * width..(s * items + end) * width])
                        .collect();
                    lane.update_columns(&columns)
                },
            )?;
        }
        engine.finish()
    });
    Ok(PyStatistics {
        inner: stats.map_err(to_py)?,
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStatistics>()?;
    m.add_function(wrap_pyfunction!(_corr_array, m)?)?;
    Ok(())
}

//! `inpath.DataSketchesHll`: a HyperLogLog whose images Apache DataSketches and Spark's
//! `hll_*` functions read and write (`inpath_sketch::datasketches`).

use crate::{to_py, IntArray};
use inpath_sketch::datasketches::{DsHll, DEFAULT_LG_K};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyString};

/// A HyperLogLog with DataSketches' hashing and registers; ``to_bytes()`` is an image
/// DataSketches (``hll_sketch.deserialize``) and Spark (``hll_union_agg``,
/// ``hll_sketch_estimate``) read, and ``from_bytes()`` reads theirs.
#[pyclass(name = "DataSketchesHll", module = "inpath._inpath")]
#[derive(Clone)]
pub struct PyDsHll {
    inner: DsHll,
}

#[pymethods]
impl PyDsHll {
    /// An empty sketch of ``2**lg_k`` registers (4 to 21; Spark's default is 12).
    #[new]
    #[pyo3(signature = (lg_k=DEFAULT_LG_K))]
    fn new(lg_k: u8) -> PyResult<Self> {
        Ok(PyDsHll {
            inner: DsHll::new(lg_k).map_err(to_py)?,
        })
    }

    /// Adds items as Spark and DataSketches do: a NumPy integer array (each value as a 64-bit
    /// integer: int32 sign-extended, as Spark widens an int to a long), a pandas Series, or a
    /// sequence of int, float, str or bytes values (None is skipped, as Spark skips nulls; an
    /// empty string is ignored, as DataSketches does).
    fn update(&mut self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        if data.is_instance_of::<PyString>() || data.is_instance_of::<PyBytes>() {
            return self.update_one(data);
        }
        if data.hasattr("to_numpy")? && data.hasattr("dtype")? {
            let kind: String = data
                .getattr("dtype")?
                .getattr("kind")?
                .extract()
                .unwrap_or_default();
            let has_nulls: bool = data.call_method0("isna")?.call_method0("any")?.extract()?;
            if (kind == "i" || kind == "u") && !has_nulls {
                let array = data.call_method0("to_numpy")?;
                return self.update(py, &array);
            }
            return self.update_values(&data.call_method0("tolist")?);
        }
        let float_array = data.hasattr("dtype")?
            && data
                .getattr("dtype")?
                .getattr("kind")
                .and_then(|k| k.extract::<String>())
                .is_ok_and(|k| k == "f");
        if float_array {
            return self.update_values(&data.call_method0("tolist")?);
        }
        if let Some(array) = IntArray::from_object(data)? {
            let signed = array.dtype.starts_with("int");
            let inner = &mut self.inner;
            py.detach(|| {
                // SAFETY: `array` (and so the exporter's buffer) lives until this closure
                // returns; see `IntArray::bytes`.
                let bytes = unsafe { array.bytes() };
                if array.width == 4 {
                    for c in bytes.chunks_exact(4) {
                        let b = [c[0], c[1], c[2], c[3]];
                        let v = if signed {
                            i32::from_le_bytes(b) as i64 as u64
                        } else {
                            u32::from_le_bytes(b) as u64
                        };
                        inner.update_u64(v);
                    }
                } else {
                    for c in bytes.chunks_exact(8) {
                        inner.update_u64(u64::from_le_bytes(c.try_into().expect("8 bytes")));
                    }
                }
            });
            return Ok(());
        }
        self.update_values(data)
    }

    /// The cardinality estimate (Ertl's estimator over the registers).
    fn estimate(&self) -> f64 {
        self.inner.estimate()
    }

    /// log2 of the register count.
    #[getter]
    fn lg_k(&self) -> u8 {
        self.inner.lg_k()
    }

    /// The registers as bytes (one per register, values 0 to 63).
    fn registers<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.registers())
    }

    /// Folds ``other`` in (the larger register wins; different ``lg_k`` merge at the smaller).
    fn merge(&mut self, other: PyRef<'_, PyDsHll>) {
        self.inner.merge(&other.inner);
    }

    /// The DataSketches image (HLL_8, HLL mode).
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.to_bytes())
    }

    /// Reads any DataSketches HLL image (LIST, SET or HLL mode; HLL_4, HLL_6 or HLL_8).
    #[staticmethod]
    fn from_bytes(data: &[u8]) -> PyResult<PyDsHll> {
        Ok(PyDsHll {
            inner: DsHll::from_bytes(data).map_err(to_py)?,
        })
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let constructor = slf.get_type().getattr("from_bytes")?;
        Ok((constructor, (slf.borrow().to_bytes(slf.py()),)))
    }

    fn __eq__(&self, other: PyRef<'_, PyDsHll>) -> bool {
        self.inner == other.inner
    }

    fn __repr__(&self) -> String {
        format!(
            "DataSketchesHll(lg_k={}, estimate={:.1})",
            self.inner.lg_k(),
            self.inner.estimate()
        )
    }
}

impl PyDsHll {
    fn update_one(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        if value.is_none() {
            return Ok(());
        }
        if let Ok(s) = value.cast::<PyString>() {
            self.inner.update_str(s.to_str()?);
        } else if let Ok(b) = value.cast::<PyBytes>() {
            self.inner.update_bytes(b.as_bytes());
        } else if value.is_instance_of::<PyFloat>() {
            self.inner.update_f64(value.extract::<f64>()?);
        } else if let Ok(i) = value.extract::<i64>() {
            self.inner.update_u64(i as u64);
        } else if let Ok(u) = value.extract::<u64>() {
            self.inner.update_u64(u);
        } else {
            return Err(PyTypeError::new_err(format!(
                "cannot add a value of type {} to a DataSketches HLL: use int, float, str or bytes",
                value.get_type().name()?
            )));
        }
        Ok(())
    }

    fn update_values(&mut self, values: &Bound<'_, PyAny>) -> PyResult<()> {
        for value in values.try_iter()? {
            self.update_one(&value?)?;
        }
        Ok(())
    }
}

/// Adds the class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDsHll>()
}

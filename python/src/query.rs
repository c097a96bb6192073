//! `inpath.query.sql`: SQL over column tables (DataFusion inside `inpath-query`), the result
//! handed to Python as an Arrow IPC stream that `pyarrow` opens without a copy per value.

use crate::seal::{ring, threads_arg};
use crate::InpathError;
use inpath_query::sql::OffloadOptions;
use inpath_query::{ResultFormat, SqlSession};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// Runs one SQL statement over the column tables under ``dir`` (a table directory or a
/// directory of them, each table by its directory name) and returns the result as an Arrow
/// IPC stream (``inpath.query.sql`` wraps it in a ``pyarrow.Table``). With ``offload``, the
/// Table Tasks run on the local offload device (``device_memory`` bytes; the default scales
/// with the tables).
#[pyfunction]
#[pyo3(signature = (dir, statement, keys=None, threads=None, offload=false, device_memory=None))]
fn _query_sql<'py>(
    py: Python<'py>,
    dir: std::path::PathBuf,
    statement: &str,
    keys: Option<&Bound<'py, PyDict>>,
    threads: Option<usize>,
    offload: bool,
    device_memory: Option<u64>,
) -> PyResult<Bound<'py, PyBytes>> {
    let ring = ring(keys)?;
    let threads = threads_arg(threads)?;
    if device_memory.is_some() && !offload {
        return Err(InpathError::new_err(
            "device_memory is the offload device's memory: pass offload=True with it",
        ));
    }
    if device_memory == Some(0) {
        return Err(InpathError::new_err(
            "device_memory must be at least 1 byte (it is the device's budget in bytes)",
        ));
    }
    let options = offload.then(|| OffloadOptions {
        memory: device_memory,
        ..OffloadOptions::default()
    });
    let bytes = py
        .detach(|| {
            let session = SqlSession::open_with(&dir, &ring, threads, options)?;
            session.sql(statement)?.encode(ResultFormat::ArrowIpc)
        })
        .map_err(|e: inpath_query::Error| InpathError::new_err(e.to_string()))?;
    Ok(PyBytes::new(py, &bytes))
}

/// Adds the query functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_query_sql, m)?)?;
    Ok(())
}

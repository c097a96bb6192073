//! `inpath.query.sql`: SQL over column tables (DataFusion inside `inpath-query`), the result
//! handed to Python as an Arrow IPC stream that `pyarrow` opens without a copy per value.

use crate::seal::{ring, threads_arg};
use crate::InpathError;
use inpath_query::{ResultFormat, SqlSession};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// Runs one SQL statement over the column tables under ``dir`` (a table directory or a
/// directory of them, each table by its directory name) and returns the result as an Arrow
/// IPC stream (``inpath.query.sql`` wraps it in a ``pyarrow.Table``).
#[pyfunction]
#[pyo3(signature = (dir, statement, keys=None, threads=None))]
fn _query_sql<'py>(
    py: Python<'py>,
    dir: std::path::PathBuf,
    statement: &str,
    keys: Option<&Bound<'py, PyDict>>,
    threads: Option<usize>,
) -> PyResult<Bound<'py, PyBytes>> {
    let ring = ring(keys)?;
    let threads = threads_arg(threads)?;
    let bytes = py
        .detach(|| {
            let session = SqlSession::open(&dir, &ring, threads)?;
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

//! `inpath.store.Store`: the page store from Python, a local directory or a server
//! (`inpath store serve`). Requests and results have the shape of `inpath_store::remote`
//! (JSON), so a local store and a served one answer the same; `inpath/store.py` turns the
//! lists into numpy arrays.

use crate::seal::{config, ring, seal_err};
use crate::InpathError;
use inpath_seal::{Cipher, Key};
use inpath_store::remote::{Client, Request, Service};
use inpath_store::{FlashReader, PutOptions, ReaderConfig, Store, StoreError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::path::PathBuf;
use std::sync::Mutex;

fn store_err(e: StoreError) -> PyErr {
    InpathError::new_err(inpath_store::remote::error_text(&e))
}

enum Target {
    Local { dir: PathBuf, service: Box<Service> },
    Remote(Mutex<Client>),
}

/// A store opened from Python: `_Store(dir, keys)` or `_Store.connect(addr)`.
#[pyclass(name = "_Store", module = "inpath._inpath")]
pub struct PyStore {
    target: Target,
    keys: inpath_seal::KeyRing,
}

#[pymethods]
impl PyStore {
    /// A local store directory (created on the first `put`); `keys` maps key ids to key
    /// bytes for sealed handles.
    #[new]
    #[pyo3(signature = (dir, keys=None))]
    fn new(dir: PathBuf, keys: Option<&Bound<'_, PyDict>>) -> PyResult<PyStore> {
        let ring = ring(keys)?;
        let reader = FlashReader::new(ReaderConfig::default());
        let service = Service::new(
            dir.clone(),
            (!ring.is_empty()).then(|| ring.clone()),
            reader,
        );
        Ok(PyStore {
            target: Target::Local {
                dir,
                service: Box::new(service),
            },
            keys: ring,
        })
    }

    /// A connection to `inpath store serve` at `addr` (`HOST:PORT`): TLS when `tls_ca` is
    /// given (with a client certificate when `tls_cert` is), a token sent once when `token`
    /// or `token_file` is.
    #[staticmethod]
    #[pyo3(signature = (addr, tls_ca=None, tls_cert=None, tls_key=None, token=None, token_file=None, server_name=None))]
    #[allow(clippy::too_many_arguments)]
    fn connect(
        py: Python<'_>,
        addr: String,
        tls_ca: Option<PathBuf>,
        tls_cert: Option<PathBuf>,
        tls_key: Option<PathBuf>,
        token: Option<String>,
        token_file: Option<PathBuf>,
        server_name: Option<String>,
    ) -> PyResult<PyStore> {
        let files = inpath_net::CredentialFiles {
            ca: tls_ca,
            cert: tls_cert,
            key: tls_key,
            token_file,
            token,
            server_name,
        };
        let client = py
            .detach(|| -> Result<Client, StoreError> {
                let credentials = files.load().map_err(Box::new)?;
                Client::connect_with(&addr, &credentials)
            })
            .map_err(store_err)?;
        Ok(PyStore {
            target: Target::Remote(Mutex::new(client)),
            keys: inpath_seal::KeyRing::new(),
        })
    }

    /// Whether this is a connection to a server.
    #[getter]
    fn remote(&self) -> bool {
        matches!(self.target, Target::Remote(_))
    }

    /// Runs a request (JSON text, `inpath_store::remote::Request`) and returns the result as
    /// JSON text, with the GIL released.
    fn call(&self, py: Python<'_>, request: &str) -> PyResult<String> {
        let req: Request =
            inpath_store::remote::parse_request(request.as_bytes()).map_err(store_err)?;
        if matches!(req, Request::Ls) {
            if let Target::Local { dir, .. } = &self.target {
                if !dir.join("catalog").exists() {
                    return Ok("[]".to_string());
                }
            }
        }
        py.detach(|| match &self.target {
            Target::Local { service, .. } => service.answer(&req),
            Target::Remote(c) => c.lock().unwrap_or_else(|p| p.into_inner()).call(&req),
        })
        .map(|v| v.to_string())
        .map_err(store_err)
    }

    /// Raw bytes of a handle: ``length`` bytes at ``offset`` (None: to the end).
    #[pyo3(signature = (handle, offset=0, length=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        handle: String,
        offset: u64,
        length: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = py
            .detach(|| -> Result<Vec<u8>, StoreError> {
                let mut out = Vec::new();
                match &self.target {
                    Target::Local { service, .. } => {
                        let (h, length) = service.read_range(&handle, offset, length)?;
                        out.reserve(length as usize);
                        service.read_into(&h, offset, length, |b| {
                            out.extend_from_slice(b);
                            Ok(())
                        })?;
                    }
                    Target::Remote(c) => {
                        let req = Request::Read {
                            handle,
                            offset,
                            length,
                        };
                        c.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .read(&req, |b| {
                                out.extend_from_slice(b);
                                Ok(())
                            })?;
                    }
                }
                Ok(out)
            })
            .map_err(store_err)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Stores a file (a path) under ``name``: raw pages, or sealed with ``cipher`` (and
    /// ``compress``) under key ``key_id`` of the store's keys (a server's own keys). Returns
    /// the entry as JSON text.
    #[pyo3(signature = (path, name=None, page_size=8192, cipher=None, compress="none", key_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn put(
        &self,
        py: Python<'_>,
        path: PathBuf,
        name: Option<String>,
        page_size: u32,
        cipher: Option<&str>,
        compress: &str,
        key_id: Option<u32>,
    ) -> PyResult<String> {
        let dir = match &self.target {
            Target::Local { dir, .. } => dir,
            Target::Remote(c) => {
                let name = match name {
                    Some(n) => n,
                    None => path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_else(|| path.display().to_string()),
                };
                return py
                    .detach(|| -> Result<String, StoreError> {
                        let file =
                            std::fs::File::open(&path).map_err(|source| StoreError::Read {
                                path: path.clone(),
                                source,
                            })?;
                        let length = file
                            .metadata()
                            .map_err(|source| StoreError::Read {
                                path: path.clone(),
                                source,
                            })?
                            .len();
                        let req = Request::Put {
                            name,
                            length,
                            page_size,
                            seal_tier: cipher.map(str::to_string),
                            compress: (compress != "none").then(|| compress.to_string()),
                            key_id,
                        };
                        let mut c = c.lock().unwrap_or_else(|p| p.into_inner());
                        Ok(
                            c.put(&req, std::io::BufReader::with_capacity(1 << 20, file))?
                                .to_string(),
                        )
                    })
                    .map_err(store_err);
            }
        };
        let seal = match cipher {
            None if compress == "none" => None,
            cipher => {
                let cipher = cipher.unwrap_or("none");
                let (c, _) = Cipher::parse(cipher).map_err(seal_err)?;
                let key: Option<(u32, &Key)> = if c == Cipher::None {
                    None
                } else {
                    let id = match key_id {
                        Some(id) => id,
                        None => self.keys.ids().next().ok_or_else(|| {
                            InpathError::new_err(format!(
                                "cipher {cipher:?} needs keys= on the Store"
                            ))
                        })?,
                    };
                    Some((id, self.keys.get(id).map_err(seal_err)?))
                };
                Some((config(compress, cipher, None, key.map(|k| k.1))?, key))
            }
        };
        let options = PutOptions { page_size, seal };
        let entry = py
            .detach(|| Store::create(dir)?.put_file(&path, name.as_deref(), &options))
            .map_err(store_err)?;
        Ok(inpath_store::remote::entry_json(&entry).to_string())
    }
}

/// Adds the store class to the module.
/// The CSR graph file (docs/FORMATS.md, "CSR graph") of the edges `src[i] → dst[i]` over
/// `vertices` vertices, laid out for pages of `page_size` bytes (as `inpath store put-graph`).
#[pyfunction]
#[pyo3(signature = (vertices, src, dst, undirected=false, page_size=8192))]
fn _csr_bytes<'py>(
    py: Python<'py>,
    vertices: u64,
    src: Vec<u32>,
    dst: Vec<u32>,
    undirected: bool,
    page_size: u32,
) -> PyResult<Bound<'py, PyBytes>> {
    if src.len() != dst.len() {
        return Err(InpathError::new_err(format!(
            "src has {} vertices and dst {}: they pair up into edges",
            src.len(),
            dst.len()
        )));
    }
    let edges: Vec<(u32, u32)> = src.into_iter().zip(dst).collect();
    let bytes = py
        .detach(|| inpath_store::csr_bytes(vertices, &edges, undirected, page_size))
        .map_err(store_err)?;
    Ok(PyBytes::new(py, &bytes))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStore>()?;
    m.add_function(wrap_pyfunction!(_csr_bytes, m)?)?;
    Ok(())
}

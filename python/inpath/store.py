"""inpath's page store (BlueDBM's in-store processing) from Python.

A :class:`Store` is a local store directory or a server started with ``inpath store serve``
(``Store("127.0.0.1:7420")``). Kernels run beside the pages, in Rust with the GIL released,
and return results, not bytes: offsets as numpy arrays, neighbours as index and distance
arrays. Raw bytes leave only through :meth:`Store.read`. Results have the same shape locally
and remotely (the server answers with the same code). Needs numpy (``pip install
inpath[numpy]``).

>>> import inpath.store
>>> s = inpath.store.Store("/srv/store")                      # doctest: +SKIP
>>> h = s.put("access.log")["handle"]                         # doctest: +SKIP
>>> s.grep(h, "GET /api", count=True)["lines"]                # doctest: +SKIP
1234
"""

import json
import os

from . import _inpath

__all__ = ["Store"]


def _np():
    try:
        import numpy
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("inpath.store needs numpy: pip install 'inpath[numpy]'") from e
    return numpy


def _is_address(where):
    """HOST:PORT (or tcp://HOST:PORT) and not an existing path."""
    if isinstance(where, str) and where.startswith("tcp://"):
        return True
    if not isinstance(where, str) or os.path.exists(where):
        return False
    host, sep, port = where.rpartition(":")
    return bool(sep and host and port.isdigit())


class Store:
    """A page store: ``Store(dir, keys=None)`` or ``Store("HOST:PORT")`` for a server.

    ``keys`` maps key ids to key bytes (as :func:`inpath.unseal` takes them) for sealed
    handles of a local store; a server uses the keys it was started with. Handles are ints
    or ``"ID@GENERATION"`` strings (a replaced file then raises instead of mixing versions).
    Errors raise :class:`inpath.InpathError` naming the handle, range or page.

    A server with TLS and authentication (docs/SECURITY.md) takes ``tls_ca`` (the CA file
    that signs its certificate: TLS on), ``tls_cert`` and ``tls_key`` (a client certificate),
    ``token`` or ``token_file`` (sent once per connection; default: the ``INPATH_TOKEN``
    environment variable) and ``server_name`` (the name its certificate holds, when it is not
    the host connected to). A refusal raises :class:`inpath.InpathError` saying why.
    """

    def __init__(self, where, *, keys=None, tls_ca=None, tls_cert=None, tls_key=None,
                 token=None, token_file=None, server_name=None):
        remote_only = {"tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key,
                       "token": token, "token_file": token_file, "server_name": server_name}
        if _is_address(where):
            addr = where[len("tcp://"):] if where.startswith("tcp://") else where
            if token is None and token_file is None:
                token = os.environ.get("INPATH_TOKEN")
            fs = lambda p: None if p is None else os.fspath(p)  # noqa: E731
            self._s = _inpath._Store.connect(
                addr, fs(tls_ca), fs(tls_cert), fs(tls_key), token, fs(token_file), server_name
            )
        else:
            given = sorted(k for k, v in remote_only.items() if v is not None)
            if given:
                raise _inpath.InpathError(
                    f"{', '.join(given)}: for a server (HOST:PORT), not a store directory"
                )
            self._s = _inpath._Store(os.fspath(where), keys)

    @property
    def remote(self):
        """Whether this is a connection to ``inpath store serve``."""
        return self._s.remote

    def _call(self, op, **params):
        return json.loads(self._s.call(json.dumps({"op": op, **params})))

    def ls(self):
        """The handles: a list of dicts (handle, generation, name, size, page_size, pages,
        tier, codec, stored_bytes)."""
        return self._call("ls")

    def put(self, path, *, name=None, page_size=8192, cipher=None, compress="none", key_id=None):
        """Stores the file at ``path``: raw pages, or sealed page by page with ``cipher``
        (``"aes256-gcm"``, ``"aes{128,192,256}-{ecb,ctr,cbc}"``) after ``compress``
        (``"lz4"``, ``"zstd"``, ``"deflate"``, ``"snappy"``). A server receives the file's
        bytes and seals them with its own keys. Returns the entry."""
        return json.loads(
            self._s.put(os.fspath(path), name, page_size, cipher, compress, key_id)
        )

    def rm(self, handle):
        """Removes a handle and its pages; returns the removed entry."""
        return self._call("rm", handle=str(handle))

    def read(self, handle, offset=0, length=None):
        """Raw bytes: ``length`` bytes at ``offset`` (None: to the end)."""
        return self._s.read(str(handle), offset, length)

    def grep(self, handle, pattern, *, regex=False, count=False, threads=1):
        """Searches a handle for a literal (every occurrence, overlapping ones too) or, with
        ``regex=True``, a regular expression matched line by line. Returns a dict: ``lines``
        (lines with a match, as ``grep -c``), and unless ``count``, ``matches``, ``offsets``
        and ``lengths`` (numpy uint64 arrays), with the run's counters (``bytes_scanned``,
        ``bytes_returned``, ``cpu_seconds_per_gb``, ...)."""
        if isinstance(pattern, bytes):
            pattern = pattern.decode("utf-8")
        r = self._call("grep", handle=str(handle), pattern=pattern, regex=regex,
                       count=count, threads=threads)
        if not count:
            np = _np()
            r["offsets"] = np.asarray(r["offsets"], dtype=np.uint64)
            r["lengths"] = np.asarray(r["lengths"], dtype=np.uint64)
        return r

    def nn(self, handle, queries, *, k=1, item_size=None, threads=1, lsh=False, probe=0):
        """Top-``k`` Hamming nearest neighbours among a handle's fixed-size binary items.
        ``queries`` is bytes (``item_size`` bytes each) or a 2-D uint8 numpy array (one row
        per query). Returns a dict with ``indices`` (uint64) and ``distances`` (uint32), each
        of shape (queries, k), nearest first: ties go to the lowest index. ``kernel`` names
        the distance kernel that ran (``avx2``, ``portable``, ...).

        With ``lsh=True`` the search is approximate, through the handle's LSH index (build it
        with :meth:`index`): only items that share a probed bucket with a query are read and
        compared (their distances are exact); ``probe`` (0 to 2) also probes the buckets whose
        keys differ in up to that many bits. A query with fewer than ``k`` candidates gets its
        row padded with index ``2**64 - 1`` and distance ``2**32 - 1``. ``r["lsh"]`` has the
        candidates verified, the bytes read and the buckets probed."""
        np = _np()
        if isinstance(queries, (bytes, bytearray, memoryview)):
            raw = bytes(queries)
            if item_size is None:
                raise ValueError("item_size is needed when queries are bytes")
        else:
            arr = np.ascontiguousarray(queries, dtype=np.uint8)
            if arr.ndim != 2:
                raise ValueError(f"queries must be a 2-D uint8 array, got {arr.ndim} dimensions")
            item_size = item_size or arr.shape[1]
            raw = arr.tobytes()
        r = self._call("nn", handle=str(handle), item_size=item_size, queries_hex=raw.hex(),
                       k=k, threads=threads, lsh=bool(lsh), probe=int(probe))
        lists = r.pop("neighbours")
        width = max([k] + [len(q) for q in lists]) if lsh else k
        indices = np.full((len(lists), width), np.iinfo(np.uint64).max, dtype=np.uint64)
        distances = np.full((len(lists), width), np.iinfo(np.uint32).max, dtype=np.uint32)
        for i, q in enumerate(lists):
            indices[i, :len(q)] = [n["index"] for n in q]
            distances[i, :len(q)] = [n["distance"] for n in q]
        r["indices"], r["distances"] = indices, distances
        return r

    def index(self, handle, item_size, *, tables=8, bits=16, seed=None, threads=1):
        """Builds the LSH index (bit sampling) of a handle's items of ``item_size`` bytes for
        ``nn(..., lsh=True)``: ``tables`` tables (1 to 64) of ``bits`` sampled bits each (1 to
        32, at most the item's bits), positions drawn from ``seed`` (None: the fixed default).
        One scan over the handle; the index is stored beside the store's data and must be
        built again when the handle is put again. Returns a dict (items, tables, bits, path,
        index_bytes, and the scan's counters)."""
        params = dict(handle=str(handle), item_size=item_size, tables=tables, bits=bits,
                      threads=threads)
        if seed is not None:
            params["seed"] = int(seed)
        return self._call("index", **params)

    def bfs(self, handle, source, *, threads=1):
        """Breadth-first search over a CSR graph handle (``inpath store put-graph``) from
        vertex ``source``. Returns a dict: ``reached``, ``depth``, ``level_sizes``,
        ``edges_traversed``, ``edges_per_second``, ... and numpy arrays ``order`` (the visit
        order, as scipy's ``breadth_first_order``), ``levels`` and ``predecessors`` (int64,
        -1 for unreached vertices and the source's predecessor)."""
        np = _np()
        r = self._call("bfs", handle=str(handle), source=int(source), threads=threads,
                       arrays=True)
        for k in ("order", "levels", "predecessors"):
            r[k] = np.asarray(r[k], dtype=np.int64)
        return r

    def put_graph(self, name, src, dst, *, vertices=None, undirected=False, page_size=8192):
        """Stores the graph with edges ``src[i] -> dst[i]`` (vertex ids from 0; ``vertices``
        defaults to the largest id + 1) as a CSR file (``inpath store put-graph``'s format):
        each vertex's neighbours sorted, duplicates kept; ``undirected`` stores each edge both
        ways. Returns the entry."""
        import tempfile

        np = _np()
        src = np.asarray(src, dtype=np.uint32)
        dst = np.asarray(dst, dtype=np.uint32)
        if vertices is None:
            vertices = int(max(src.max(initial=0), dst.max(initial=0))) + 1 if len(src) else 0
        data = _inpath._csr_bytes(int(vertices), src.tolist(), dst.tolist(), undirected, page_size)
        with tempfile.NamedTemporaryFile(prefix="inpath-graph-") as f:
            f.write(data)
            f.flush()
            return self.put(f.name, name=name, page_size=page_size)

    def neighbours(self, handle, vertices):
        """The out-neighbours of ``vertices`` in a CSR graph handle: ``(targets, counts)``,
        numpy arrays (the lists back to back in the order asked, and each one's length)."""
        np = _np()
        r = self._call("neighbours", handle=str(handle), vertices=[int(v) for v in vertices])
        return np.asarray(r["targets"], dtype=np.uint32), np.asarray(r["counts"], dtype=np.uint64)

    def chase(self, handle, *, start=0, hops=None):
        """Follows a chase file's pages (``inpath store put-chase``), each naming the next,
        from page ``start`` for at most ``hops`` pages. Returns a dict with ``sequence`` (the
        pages read, a numpy uint64 array), ``stop`` (``"end"``, ``"max-hops"`` or
        ``"cycle"``) and ``ns_per_hop``."""
        np = _np()
        r = self._call("chase", handle=str(handle), start=int(start),
                       hops=None if hops is None else int(hops))
        r["sequence"] = np.asarray(r["sequence"], dtype=np.uint64)
        return r

    def _tap(self, name, handle, threads, options):
        spec = name
        if options:
            parts = []
            for key, value in options.items():
                if value is True:
                    parts.append(key)
                elif value is not False and value is not None:
                    parts.append(f"{key}={value}")
            if parts:
                spec += ":" + ",".join(parts)
        return self._call("tap", handle=str(handle), spec=spec, threads=threads)

    def sketch(self, handle, *, threads=1, **options):
        """Sketches a handle beside its pages (HyperLogLog, Fast-AGMS, Count-Min, min/max/
        count), with the options of ``inpath wire --tap sketch:...`` as keywords
        (``format="u32"``, ``hll_p=14``, ``no_header=True``, ...). Returns a dict whose
        ``result`` is the summary ``inpath sketch --json`` prints (``cardinality``, ``f2``,
        ``count``, ...), with the run's counters."""
        return self._tap("sketch", handle, threads, options)

    def corr(self, handle, *, threads=1, **options):
        """Exact correlation statistics of a handle's fixed-width rows, beside its pages
        (``type="f64"``, ``streams=4``; default rows of 16 u32). ``result`` holds
        ``pearson`` (upper triangle, row by row), ``means``, ``std_devs`` and ``rows``."""
        return self._tap("corr", handle, threads, options)

    def crc(self, handle, *, threads=1):
        """Bytes and CRC-32 (as ``zlib.crc32``) of a handle, computed beside its pages:
        ``result`` is ``{"bytes": N, "crc32": C}``."""
        return self._tap("crc", handle, threads, None)

    def stats(self):
        """A server's counters (requests, bytes scanned and returned, pages read, reads in
        flight, CPU seconds per GB); for a local store, this process's."""
        return self._call("stats")

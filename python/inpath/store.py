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
    """

    def __init__(self, where, *, keys=None):
        if _is_address(where):
            addr = where[len("tcp://"):] if where.startswith("tcp://") else where
            self._s = _inpath._Store.connect(addr)
        else:
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
        """Stores the file at ``path`` (local stores only): raw pages, or sealed page by page
        with ``cipher`` (``"aes256-gcm"``, ``"aes{128,192,256}-{ecb,ctr,cbc}"``) after
        ``compress`` (``"lz4"``, ``"zstd"``, ``"deflate"``, ``"snappy"``). Returns the entry."""
        return json.loads(
            self._s.put(os.fspath(path), name, page_size, cipher, compress, key_id)
        )

    def rm(self, handle):
        """Removes a handle and its pages (local stores only); returns the removed entry."""
        return json.loads(self._s.rm(str(handle)))

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

    def stats(self):
        """A server's counters (requests, bytes scanned and returned, pages read, reads in
        flight, CPU seconds per GB); for a local store, this process's."""
        return self._call("stats")

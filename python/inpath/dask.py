"""inpath's engines on Dask: each partition summarised where it lives, the states merged in a tree.

Every inpath state merges exactly: a sketch register for register (HyperLogLog maxima,
Count-Min and Fast-AGMS counter sums, min/max/count), correlation statistics in 128-bit integer
or double-double sums. So a Dask collection is summarised one partition per task (in Rust, the
GIL released), the partitions' states travel as a few KiB of bytes, and a tree of merges
(``split_every`` states per merge) gives **the same state** one process would have built from
all the data: the same estimate, bit for bit.

>>> import dask.array as da, inpath.dask                              # doctest: +SKIP
>>> x = da.random.randint(0, 10**6, size=50_000_000, chunks=5_000_000, dtype="u8")
>>> inpath.dask.approx_count_distinct(x)                               # doctest: +SKIP
631971.6...

Inputs: a 1-D dask array (u32/i32 or u64/i64 items), a dask DataFrame column (``column=``)
or Series (numbers or strings), or a list of files (``format="u32"|"u64"|"lines"``, each file
read by the task that sketches it, so with a distributed cluster the bytes stay on the worker
that reads them). :func:`corr` takes a 2-D dask array (rows of streams) or a DataFrame
(``columns=``). With a ``distributed.Client`` active the tasks run on its workers; otherwise on
Dask's local scheduler. Needs ``pip install 'inpath[dask]'``.
"""

import os

from . import CorrResult, InpathError, Sketch, Statistics, _corr_array

__all__ = ["Shard", "ShardedStore", "approx_count_distinct", "corr", "sketch"]


def _dask():
    try:
        import dask
    except ImportError as e:  # pragma: no cover - the extra is installed in tests
        raise ImportError("inpath.dask needs dask: pip install 'inpath[dask]'") from e
    return dask


# ------------------------------------------------------------------------------------------
# Partition tasks: plain functions of bytes and arrays, so they pickle to any worker.


def _sketch_block(block, params):
    import numpy as np

    s = Sketch(**params)
    if hasattr(block, "to_numpy"):  # a pandas Series: numbers as an array, else str values
        kind = getattr(block.dtype, "kind", "O")
        block = block.to_numpy() if kind in "iu" else block.astype(object).tolist()
    if getattr(getattr(block, "dtype", None), "kind", "") in ("i", "u"):
        block = np.ascontiguousarray(block)
    if len(block):
        s.update(block)
    return s.to_bytes()


def _sketch_file(path, fmt, params):
    import numpy as np

    s = Sketch(**params)
    if fmt in ("u32", "u64"):
        width = 4 if fmt == "u32" else 8
        size = os.path.getsize(path)
        if size % width:
            raise InpathError(
                f"{path}: {size} bytes is not a whole number of {width}-byte {fmt} items"
            )
        items = np.fromfile(path, dtype="<u4" if fmt == "u32" else "<u8")
        if len(items):
            s.update(items)
    elif fmt == "lines":
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        if lines:
            s.update(lines)
    else:
        raise InpathError(f'format = {fmt!r} is not "u32", "u64" or "lines"')
    return s.to_bytes()


def _merge_sketches(states):
    s = Sketch.from_bytes(states[0])
    for b in states[1:]:
        s.merge(Sketch.from_bytes(b))
    return s.to_bytes()


def _corr_block(block, names):
    import numpy as np

    if hasattr(block, "to_numpy"):
        block = block.to_numpy()
    block = np.asarray(block)
    if not (block.flags.c_contiguous or block.flags.f_contiguous):
        block = np.ascontiguousarray(block)
    if block.ndim != 2:
        raise InpathError(f"corr needs 2-D blocks (rows of streams), got {block.ndim} dimensions")
    if block.dtype.kind == "f" and np.isnan(block).any():
        raise InpathError("the data contains NaN; drop or fill it first")
    return _corr_array(block, False, 1, names).to_bytes()


def _corr_file(path, dtype, streams, names):
    import numpy as np

    dt = np.dtype(dtype).newbyteorder("<")
    size = os.path.getsize(path)
    row = dt.itemsize * streams
    if size % row:
        raise InpathError(
            f"{path}: {size} bytes is not a whole number of {row}-byte rows "
            f"({streams} x {np.dtype(dtype).name})"
        )
    block = np.fromfile(path, dtype=dt).reshape(-1, streams)
    return _corr_block(block, names)


def _merge_statistics(states):
    s = Statistics.from_bytes(states[0])
    for b in states[1:]:
        s.merge(Statistics.from_bytes(b))
    return s.to_bytes()


# ------------------------------------------------------------------------------------------


def _tree(states, merge, split_every):
    """Merges delayed states in a tree, ``split_every`` at a time."""
    dask = _dask()
    if split_every < 2:
        raise InpathError(f"split_every = {split_every} is out of range: at least 2")
    if not states:
        raise InpathError("the input has no partitions")
    while len(states) > 1:
        states = [
            dask.delayed(merge, pure=False)(states[i : i + split_every])
            for i in range(0, len(states), split_every)
        ]
    return states[0]


def _is_frame(data):
    """A DataFrame (two dimensions, named columns), not a Series or an array."""
    return getattr(data, "ndim", None) == 2 and hasattr(data, "columns")


def _partitions(data, column):
    """The delayed partitions of a dask array, DataFrame column or Series."""
    if hasattr(data, "to_delayed") and _is_frame(data):
        if column is None:
            raise InpathError("a DataFrame needs column=NAME (the column to sketch)")
        if column not in data.columns:
            raise InpathError(f"column {column!r} is not in the DataFrame ({list(data.columns)})")
        data = data[column]
    elif column is not None:
        raise InpathError("column= is for DataFrames")
    if hasattr(data, "to_delayed"):
        parts = data.to_delayed()
        if hasattr(parts, "ravel"):  # a dask array: an array of delayed chunks
            if getattr(data, "ndim", 1) != 1:
                raise InpathError(f"sketch needs a 1-D array, got {data.ndim} dimensions")
            parts = list(parts.ravel())
        return list(parts)
    raise InpathError(
        f"{type(data).__name__} is not a dask array, DataFrame or Series, or a list of files"
    )


def sketch(data, *, column=None, format=None, split_every=8, **params):
    """The :class:`inpath.Sketch` of a whole Dask collection or list of files, built partition
    by partition and merged in a tree; equal to one Sketch fed all the data.

    ``params`` are :class:`inpath.Sketch`'s (``hll_p``, ``cm``, ``agms``, ``hash``, ``seed``).
    For a list of files, ``format`` is ``"u32"``, ``"u64"`` (little-endian items) or
    ``"lines"`` (one item per line).
    """
    dask = _dask()
    Sketch(**params)  # bad parameters fail here, before any task runs
    if isinstance(data, (list, tuple)):
        if format is None:
            raise InpathError('a list of files needs format="u32", "u64" or "lines"')
        paths = [os.fspath(p) for p in data]
        states = [dask.delayed(_sketch_file, pure=False)(p, format, params) for p in paths]
    else:
        if format is not None:
            raise InpathError("format= is for lists of files")
        states = [
            dask.delayed(_sketch_block, pure=False)(p, params) for p in _partitions(data, column)
        ]
    return Sketch.from_bytes(_tree(states, _merge_sketches, split_every).compute())


def approx_count_distinct(data, *, column=None, format=None, split_every=8, **params):
    """Distinct items of a Dask collection or list of files: the HyperLogLog estimate of
    :func:`sketch` (standard error about 0.4 % at the default ``hll_p=16``)."""
    return sketch(
        data, column=column, format=format, split_every=split_every, **params
    ).cardinality()


def corr(data, *, columns=None, dtype=None, streams=None, split_every=8, constant="nan", ddof=1):
    """Exact Pearson correlation (and covariance, means, standard deviations) of the columns
    of a 2-D dask array (each row one item of every stream), of a dask DataFrame's
    ``columns`` (one numeric dtype), or of a list of files of little-endian rows of
    ``streams`` items of ``dtype`` (``inpath corr --layout rows``), as :func:`inpath.corr`
    gives for all the rows at once."""
    dask = _dask()
    names = None
    if isinstance(data, (list, tuple)):
        if dtype is None or streams is None:
            raise InpathError("a list of files needs dtype= and streams= (rows of streams items)")
        if streams < 1:
            raise InpathError(f"streams = {streams} is out of range: at least 1")
        states = [
            dask.delayed(_corr_file, pure=False)(os.fspath(p), dtype, int(streams), None)
            for p in data
        ]
        stats = Statistics.from_bytes(_tree(states, _merge_statistics, split_every).compute())
        return CorrResult(stats, constant=constant, ddof=ddof)
    if dtype is not None or streams is not None:
        raise InpathError("dtype= and streams= are for lists of files")
    if hasattr(data, "to_delayed") and _is_frame(data):
        cols = list(data.columns) if columns is None else list(columns)
        missing = [c for c in cols if c not in data.columns]
        if missing:
            raise InpathError(f"columns {missing} are not in the DataFrame ({list(data.columns)})")
        kinds = {data[c].dtype for c in cols}
        if len(kinds) != 1 or next(iter(kinds)).kind not in "iuf":
            raise TypeError(
                "the columns must share one numeric dtype; convert them first, "
                "e.g. df[cols].astype('float64')"
            )
        names = [str(c) for c in cols]
        parts = list(data[cols].to_delayed())
    elif hasattr(data, "to_delayed") and hasattr(data, "ndim"):
        if columns is not None:
            raise InpathError("columns= is for DataFrames")
        if data.ndim != 2:
            raise InpathError(f"corr needs a 2-D array (rows of streams), got {data.ndim} dimensions")
        # Whole rows in every block: one chunk across the streams.
        parts = list(data.rechunk({1: -1}).to_delayed().ravel())
    else:
        raise InpathError(f"{type(data).__name__} is not a 2-D dask array or a dask DataFrame")
    states = [dask.delayed(_corr_block, pure=False)(p, names) for p in parts]
    stats = Statistics.from_bytes(_tree(states, _merge_statistics, split_every).compute())
    return CorrResult(stats, constant=constant, ddof=ddof, labelled=names is not None)


# ------------------------------------------------------------------------------------------
# The store engine across workers.

PLUGIN_NAME = "inpath-store"


def _make_plugin_class():
    from distributed import WorkerPlugin

    class _StorePlugin(WorkerPlugin):
        """Opens each worker's store directory once, when the worker starts (or now)."""

        name = PLUGIN_NAME

        def __init__(self, directories, keys=None, remote=None):
            self.directories = dict(directories)
            self.keys = keys
            self.remote = dict(remote or {})

        def setup(self, worker):
            from .store import Store, _is_address

            where = self.directories.get(worker.name, self.directories.get(worker.address))
            if where is None:
                where = self.directories.get(str(worker.name))
            if where is None:
                self.store = None
            elif _is_address(where):
                self.store = Store(where, **self.remote)
            else:
                self.store = Store(where, keys=self.keys)
            self.directory = where

    return _StorePlugin


def _worker_store():
    from distributed import get_worker

    worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_NAME)
    store = getattr(plugin, "store", None)
    if store is None:
        raise InpathError(
            f"worker {worker.address} ({worker.name}) has no store directory in the "
            "ShardedStore's mapping"
        )
    return worker.address, store


def _shard_put(data, name):
    address, store = _worker_store()
    import tempfile

    with tempfile.NamedTemporaryFile(prefix="inpath-shard-", delete=True) as f:
        f.write(data)
        f.flush()
        entry = store.put(f.name, name=name)
    return address, entry


def _shard_grep(handle, pattern, regex, count, threads):
    address, store = _worker_store()
    return address, store.grep(handle, pattern, regex=regex, count=count, threads=threads)


def _shard_nn(handle, queries, k, item_size, threads):
    address, store = _worker_store()
    return address, store.nn(handle, queries, k=k, item_size=item_size, threads=threads)


def _shard_put_graph(name, vertices, src, dst, page_size):
    address, store = _worker_store()
    return address, store.put_graph(name, src, dst, vertices=vertices, page_size=page_size)


def _shard_expand(handle, vertices):
    """One superstep on one worker: the distinct out-neighbours of its frontier vertices."""
    import numpy as np

    address, store = _worker_store()
    targets, counts = store.neighbours(handle, vertices)
    return address, np.unique(targets), int(counts.sum())


class Shard:
    """One piece of a sharded file: on ``worker`` as ``handle``, bytes ``offset`` to
    ``offset + length`` of the whole file."""

    __slots__ = ("worker", "handle", "offset", "length")

    def __init__(self, worker, handle, offset, length):
        self.worker, self.handle, self.offset, self.length = worker, handle, offset, length

    def __repr__(self):
        return f"Shard({self.worker}, handle {self.handle}, bytes {self.offset}..{self.offset + self.length})"


class ShardedStore:
    """inpath stores on Dask workers, one directory each, and files sharded across them.

    ``directories`` maps a worker's name (or address) to its store directory; a
    ``WorkerPlugin`` opens each one on its worker. ``put`` cuts a file into one shard per
    worker (text at line ends, binary items at item boundaries) and records the shard catalog:
    (worker, handle, offset, length). ``grep`` and ``nn`` run on every shard **on the worker
    that holds it** (hard placement: ``workers=[w], allow_other_workers=False``), and the
    results merge into the answer for the whole file: global byte offsets, global item indices.
    Only results cross the network. A worker that is gone gives an :class:`inpath.InpathError`
    naming its shards, never a partial answer.

    A worker's entry may be a store server's ``HOST:PORT`` instead of a directory (a worker
    beside an ``inpath store serve``); the keywords ``tls_ca``, ``tls_cert``, ``tls_key``,
    ``token_file``, ``token`` and ``server_name`` are then :class:`inpath.store.Store`'s, and
    paths are read on the worker (docs/SECURITY.md). Prefer ``token_file`` to ``token``: a
    token given here travels to the workers with the plugin, through Dask's own connections.
    """

    _REMOTE = ("tls_ca", "tls_cert", "tls_key", "token", "token_file", "server_name")

    def __init__(self, client, directories, *, keys=None, timeout=600, **remote):
        unknown = sorted(set(remote) - set(self._REMOTE))
        if unknown:
            raise InpathError(
                f"ShardedStore takes no keyword {', '.join(unknown)} (the server keywords are "
                f"{', '.join(self._REMOTE)})"
            )
        self.client = client
        self.timeout = timeout
        self.catalog = {}
        plugin = _make_plugin_class()(directories, keys, remote)
        client.register_plugin(plugin, name=PLUGIN_NAME)

    def _workers(self):
        return sorted(self.client.scheduler_info()["workers"])

    def _workers_to_place_on(self):
        """The workers a new file is sharded across. A cluster that has none at this moment
        (just started, or a worker restarting under its nanny) is waited for, within
        ``min(timeout, 60)`` seconds, before that is an error."""
        workers = self._workers()
        if workers:
            return workers
        wait_s = min(self.timeout, 60)
        try:
            self.client.wait_for_workers(1, timeout=wait_s)
        except Exception as e:  # noqa: BLE001 - distributed raises TimeoutError or its own
            raise InpathError(f"the cluster has no workers (waited {wait_s} s for one: {e})") from None
        workers = self._workers()
        if not workers:
            raise InpathError(f"the cluster has no workers (waited {wait_s} s for one)")
        return workers

    def _check_alive(self, shards):
        alive = set(self._workers())
        dead = [s for s in shards if s.worker not in alive]
        if dead:
            raise InpathError(
                f"worker(s) {sorted({s.worker for s in dead})} are gone; their shards "
                f"{dead} cannot be searched, so no answer is given"
            )

    def _run(self, name, fn, *args):
        """Runs ``fn(handle, *args)`` on every shard of ``name`` where it lives."""
        from distributed import wait

        shards = self.catalog.get(name)
        if shards is None:
            raise InpathError(f"no sharded file {name!r} (put it first; have {sorted(self.catalog)})")
        self._check_alive(shards)
        futures = [
            self.client.submit(fn, s.handle, *args, workers=[s.worker],
                               allow_other_workers=False, pure=False)
            for s in shards
        ]
        import time

        deadline = time.monotonic() + self.timeout
        while True:
            done = wait(futures, timeout=1.0, return_when="ALL_COMPLETED")
            if not done.not_done:
                break
            try:
                self._check_alive(shards)
            except InpathError:
                for f in futures:
                    f.cancel()
                raise
            if time.monotonic() > deadline:
                raise InpathError(f"the shards of {name!r} did not answer in {self.timeout} s")
        results = []
        for s, f in zip(shards, futures):
            if f.status == "error":
                raise InpathError(f"shard {s}: {f.exception()}")
            if f.status != "finished":
                self._check_alive(shards)
                raise InpathError(f"shard {s} did not finish ({f.status})")
            address, result = f.result()
            results.append((s, address, result))
        return results

    def put(self, name, data, *, item_size=None):
        """Shards ``data`` (bytes) across the workers under ``name``: text cut after a newline
        near each even split, or with ``item_size`` binary items cut at item boundaries.
        Returns the shard catalog (a list of :class:`Shard`)."""
        workers = self._workers_to_place_on()
        data = bytes(data)
        n = len(workers)
        cuts = [0]
        for i in range(1, n):
            at = len(data) * i // n
            if item_size:
                at -= at % item_size
            else:
                nl = data.find(b"\n", at)
                at = len(data) if nl < 0 else nl + 1
            cuts.append(max(at, cuts[-1]))
        cuts.append(len(data))
        futures = [
            self.client.submit(_shard_put, data[cuts[i]:cuts[i + 1]], name, workers=[w],
                               allow_other_workers=False, pure=False)
            for i, w in enumerate(workers)
        ]
        shards = []
        for i, f in enumerate(futures):
            address, entry = f.result()
            shards.append(Shard(address, entry["handle"], cuts[i], cuts[i + 1] - cuts[i]))
        self.catalog[name] = shards
        return shards

    def put_graph(self, name, src, dst, *, vertices=None, undirected=False, page_size=8192):
        """Shards a graph (edges ``src[i] -> dst[i]``) across the workers by source vertex:
        vertex ``v`` belongs to shard ``v % workers``, whose CSR file holds the out-lists of its
        vertices only. ``undirected`` adds each edge both ways first. Returns the catalog."""
        import numpy as np

        workers = self._workers_to_place_on()
        src = np.asarray(src, dtype=np.uint32)
        dst = np.asarray(dst, dtype=np.uint32)
        if len(src) != len(dst):
            raise InpathError(f"src has {len(src)} vertices and dst {len(dst)}: they pair up into edges")
        if vertices is None:
            vertices = int(max(src.max(initial=0), dst.max(initial=0))) + 1 if len(src) else 0
        if undirected:
            loops = src == dst
            src, dst = np.concatenate([src, dst[~loops]]), np.concatenate([dst, src[~loops]])
        w = len(workers)
        futures = []
        for i, worker in enumerate(workers):
            mine = (src % w) == i
            futures.append(self.client.submit(
                _shard_put_graph, name, int(vertices), src[mine], dst[mine], page_size,
                workers=[worker], allow_other_workers=False, pure=False))
        shards = []
        for f in futures:
            address, entry = f.result()
            shards.append(Shard(address, entry["handle"], 0, entry["size"]))
        self.catalog[name] = shards
        self.graphs = getattr(self, "graphs", {})
        self.graphs[name] = int(vertices)
        return shards

    def bfs(self, name, source):
        """Breadth-first search over a graph put with :meth:`put_graph`, in supersteps: the
        frontier is cut by owner (``v % workers``), each worker expands its part beside its
        pages and returns the distinct neighbours (one batch per worker per superstep), and the
        vertices not reached before form the next frontier. Returns ``levels`` (int64, -1 for
        unreached; equal to any exact BFS's), ``reached``, ``level_sizes``, ``supersteps``,
        ``edges_traversed`` and ``placement``."""
        import numpy as np

        n = getattr(self, "graphs", {}).get(name)
        if n is None:
            raise InpathError(f"no sharded graph {name!r} (put_graph it first)")
        if not 0 <= source < n:
            raise InpathError(f"source = {source} is out of range: 0 to {n - 1}")
        shards = self.catalog[name]
        w = len(shards)
        levels = np.full(n, -1, dtype=np.int64)
        levels[source] = 0
        frontier = np.array([source], dtype=np.uint64)
        sizes, placement, edges, level = [1], [], 0, 0
        while len(frontier):
            self._check_alive(shards)
            futures = []
            for i, s in enumerate(shards):
                part = frontier[frontier % w == i]
                if len(part):
                    futures.append((s, self.client.submit(
                        _shard_expand, s.handle, part.tolist(), workers=[s.worker],
                        allow_other_workers=False, pure=False)))
            reached = []
            for s, f in futures:
                try:
                    address, targets, traversed = f.result(timeout=self.timeout)
                except Exception as e:  # noqa: BLE001 - a lost worker or a failed shard
                    self._check_alive(shards)
                    raise InpathError(f"shard {s}: {e}") from e
                placement.append((s.worker, address))
                edges += traversed
                reached.append(targets)
            level += 1
            candidates = np.unique(np.concatenate(reached)) if reached else np.zeros(0, np.uint32)
            new = candidates[levels[candidates] < 0]
            levels[new] = level
            if len(new):
                sizes.append(len(new))
            frontier = new.astype(np.uint64)
        return {
            "levels": levels,
            "reached": int((levels >= 0).sum()),
            "level_sizes": sizes,
            "supersteps": level,
            "edges_traversed": edges,
            "placement": placement,
        }

    def grep(self, name, pattern, *, regex=False, count=False, threads=1):
        """Searches every shard of ``name`` on its worker. Returns ``lines``, and unless
        ``count``, ``matches`` and ``offsets`` (global byte offsets, a numpy uint64 array in
        order), with ``bytes_scanned``, ``bytes_returned`` and ``placement`` (each shard's
        worker and the worker that ran it)."""
        import numpy as np

        out = {"lines": 0, "bytes_scanned": 0, "bytes_returned": 0, "placement": []}
        offsets = []
        for s, address, r in self._run(name, _shard_grep, pattern, regex, count, threads):
            out["lines"] += r["lines"]
            out["bytes_scanned"] += r["bytes_scanned"]
            out["bytes_returned"] += r["bytes_returned"]
            out["placement"].append((s.worker, address))
            if not count:
                offsets.append(r["offsets"] + np.uint64(s.offset))
        if not count:
            out["offsets"] = np.concatenate(offsets) if offsets else np.zeros(0, np.uint64)
            out["matches"] = len(out["offsets"])
        return out

    def nn(self, name, queries, *, k=1, item_size=None, threads=1):
        """Top-``k`` Hamming neighbours over every shard of ``name`` (binary items of
        ``item_size`` bytes), merged by (distance, global index): ties go to the lowest index,
        as on one machine. Returns ``indices`` and ``distances`` of shape (queries, k)."""
        import numpy as np

        parts = []
        placement = []
        for s, address, r in self._run(name, _shard_nn, queries, k, item_size, threads):
            size = item_size or np.asarray(queries).shape[-1]
            parts.append((r["indices"].astype(np.uint64) + np.uint64(s.offset // size),
                          r["distances"]))
            placement.append((s.worker, address))
        idx = np.concatenate([p[0] for p in parts], axis=1)
        dist = np.concatenate([p[1] for p in parts], axis=1)
        order = np.lexsort((idx, dist), axis=1)[:, :k]
        return {
            "indices": np.take_along_axis(idx, order, axis=1),
            "distances": np.take_along_axis(dist, order, axis=1),
            "placement": placement,
        }

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

__all__ = ["approx_count_distinct", "corr", "sketch"]


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
            dask.delayed(merge, pure=True)(states[i : i + split_every])
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
        states = [dask.delayed(_sketch_file, pure=True)(p, format, params) for p in paths]
    else:
        if format is not None:
            raise InpathError("format= is for lists of files")
        states = [
            dask.delayed(_sketch_block, pure=True)(p, params) for p in _partitions(data, column)
        ]
    return Sketch.from_bytes(_tree(states, _merge_sketches, split_every).compute())


def approx_count_distinct(data, *, column=None, format=None, split_every=8, **params):
    """Distinct items of a Dask collection or list of files: the HyperLogLog estimate of
    :func:`sketch` (standard error about 0.4 % at the default ``hll_p=16``)."""
    return sketch(
        data, column=column, format=format, split_every=split_every, **params
    ).cardinality()


def corr(data, *, columns=None, split_every=8, constant="nan", ddof=1):
    """Exact Pearson correlation (and covariance, means, standard deviations) of the columns
    of a 2-D dask array (each row one item of every stream) or of a dask DataFrame's
    ``columns`` (one numeric dtype), as :func:`inpath.corr` gives for all the rows at once."""
    dask = _dask()
    names = None
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
    states = [dask.delayed(_corr_block, pure=True)(p, names) for p in parts]
    stats = Statistics.from_bytes(_tree(states, _merge_statistics, split_every).compute())
    return CorrResult(stats, constant=constant, ddof=ddof, labelled=names is not None)

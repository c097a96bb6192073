"""inpath: compute on data while it moves.

One-pass engines from the FPGA systems that analyse data on the network card or the storage
path, in software, one ``import`` away:

- :class:`Sketch` — SKT's HyperLogLog + Fast-AGMS + Count-Min + min/max/count from one hash
  per item, on NumPy arrays, pandas Series or sequences of strings.
- :func:`corr` — AMNES's exact Pearson correlation (plus covariance, means, standard
  deviations, regression, cosine) of every pair of columns of a 2-D array or DataFrame, from
  mergeable :class:`Statistics`.
- :class:`DataSketchesHll` — a HyperLogLog whose images Apache DataSketches and Spark's
  ``hll_sketch_agg`` / ``hll_union_agg`` read and write.
- :func:`seal` / :func:`unseal` (and batch forms) — the SAP HANA page codec: compress, then
  encrypt each page; :func:`compress` / :func:`decompress` — gzip, zlib, raw DEFLATE, LZ4,
  Snappy and Zstd.

Every result equals the ``inpath`` command line's on the same data; the work runs in Rust with
the GIL released and arrays are read in place.

>>> import numpy as np, inpath
>>> s = inpath.Sketch()
>>> s.update(np.arange(1_000_000, dtype=np.uint64) % 5000)
>>> round(s.cardinality(), -1)
5000.0
"""

from ._inpath import (
    DataSketchesHll,
    InpathError,
    Sketch,
    Statistics,
    __version__,
    _corr_array,
    compress,
    decompress,
    seal,
    seal_batch,
    unseal,
    unseal_batch,
)

__all__ = [
    "CorrResult",
    "DataSketchesHll",
    "InpathError",
    "Sketch",
    "Statistics",
    "__version__",
    "compress",
    "corr",
    "decompress",
    "seal",
    "seal_batch",
    "unseal",
    "unseal_batch",
]


class CorrResult:
    """Coefficients computed from exact :class:`Statistics`.

    Attributes (NumPy arrays; pandas objects labelled by column name when the input was a
    DataFrame): ``pearson`` (M×M), ``covariance`` (M×M), ``means`` (M), ``std`` (M);
    ``names``, ``count`` and ``statistics`` (mergeable, picklable, ``to_bytes()``).
    A constant stream's coefficients are NaN (``constant="zero"`` gives 0.0, the reference's
    convention).
    """

    def __init__(self, statistics, constant="nan", ddof=1, labelled=False):
        import numpy as np

        self.statistics = statistics
        self.names = statistics.names
        self.count = statistics.count
        m = statistics.streams
        self.pearson = np.frombuffer(statistics._pearson(constant), dtype="<f8").reshape(m, m)
        self.covariance = np.frombuffer(statistics._covariance(ddof), dtype="<f8").reshape(m, m)
        self.means = np.frombuffer(statistics._means(), dtype="<f8")
        self.std = np.frombuffer(statistics._std(ddof), dtype="<f8")
        if labelled:
            import pandas as pd

            self.pearson = pd.DataFrame(self.pearson, index=self.names, columns=self.names)
            self.covariance = pd.DataFrame(self.covariance, index=self.names, columns=self.names)
            self.means = pd.Series(self.means, index=self.names)
            self.std = pd.Series(self.std, index=self.names)

    def __repr__(self):
        return f"CorrResult({self.statistics.streams} streams, {self.count} rows)"


def corr(data, *, rowvar=False, nan="raise", constant="nan", ddof=1, threads=None, names=None):
    """Exact Pearson correlation of every pair of streams of a 2-D array or DataFrame.

    Orientation: by default **each column is a stream** (as in pandas, and as in the reference's
    row-interleaved lines: each row holds one item of every stream); ``rowvar=True`` makes each
    row a stream, as in ``numpy.corrcoef``. C- and Fortran-ordered arrays are both read in place.

    Types: 8/16/32/64-bit integers are exact (the statistics equal big-integer sums, the
    coefficients are within a few ulps of the exact value); float32/float64 use double-double
    accumulation. NaN policy: ``nan="raise"`` (default) rejects float data containing NaN;
    ``nan="propagate"`` lets NaN flow into every coefficient of its stream (like numpy).

    >>> import numpy as np, inpath
    >>> x = np.arange(1000, dtype=np.int64)
    >>> r = inpath.corr(np.stack([x, 2 * x + 1, -x], axis=1))
    >>> r.pearson.round(12).tolist()
    [[1.0, 1.0, -1.0], [1.0, 1.0, -1.0], [-1.0, -1.0, 1.0]]
    """
    import os

    import numpy as np

    labelled = False
    if hasattr(data, "columns") and hasattr(data, "to_numpy"):
        if names is None:
            names = [str(c) for c in data.columns]
        kinds = {dt.kind for dt in data.dtypes}
        if not kinds <= set("iuf") or len({dt for dt in data.dtypes}) != 1:
            raise TypeError(
                "DataFrame columns must share one numeric dtype; convert them first, "
                "e.g. df[cols].astype('float64')"
            )
        data = data.to_numpy()
        # A subset of a frame's columns can come out as a strided view of its block.
        if not (data.flags.c_contiguous or data.flags.f_contiguous):
            data = np.ascontiguousarray(data)
        labelled = True
    elif not hasattr(data, "__array_interface__") and not isinstance(data, memoryview):
        data = np.asarray(data)
    if nan not in ("raise", "propagate"):
        raise InpathError(f'nan = {nan!r} is not "raise" or "propagate"')
    arr = np.asarray(data)
    if nan == "raise" and arr.dtype.kind == "f" and np.isnan(arr).any():
        where = np.argwhere(np.isnan(arr))[0].tolist()
        raise InpathError(
            f"the data contains NaN (first at index {where}); drop or fill it, or pass nan='propagate'"
        )
    if threads is None:
        threads = os.cpu_count() or 1
    stats = _corr_array(data, rowvar, threads, names)
    return CorrResult(stats, constant=constant, ddof=ddof, labelled=labelled)

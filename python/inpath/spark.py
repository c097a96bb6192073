"""inpath's engines inside Spark: ``mapInArrow`` runs them per partition, the driver merges.

Each partition's rows arrive as Arrow record batches; the engine (in Rust, the GIL released)
summarises them into one state, the partition yields that state as a single binary row, and
the driver merges the states exactly. The result equals one process's over all the rows.

>>> from pyspark.sql import SparkSession                              # doctest: +SKIP
>>> import inpath.spark
>>> df = spark.range(50_000_000)
>>> inpath.spark.approx_count_distinct(df, "id")
49874512.3...

:func:`hll_sketch` builds HyperLogLog images in Apache DataSketches' format, the one Spark's
own ``hll_sketch_agg`` writes: they merge with ``hll_union_agg`` and are read by
``hll_sketch_estimate``, and Spark's images are read by :meth:`inpath.DataSketchesHll.from_bytes`.
Needs ``pip install 'inpath[spark]'`` and Java 17+.
"""

from . import CorrResult, DataSketchesHll, InpathError, Sketch, Statistics, _corr_array

__all__ = ["approx_count_distinct", "corr", "hll_sketch", "sketch"]


def _column(df, column):
    if column not in df.columns:
        raise InpathError(f"column {column!r} is not in the DataFrame ({df.columns})")
    return df.select(column)


def _values(col):
    """An Arrow column as what inpath's update takes: integers as a NumPy array, others as a
    list of Python values; nulls dropped (as Spark's aggregates skip them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if col.null_count:
        col = pc.drop_null(col)
    if pa.types.is_integer(col.type):
        return col.to_numpy(zero_copy_only=False).astype("int64", copy=False)
    if pa.types.is_floating(col.type):
        return col.to_pylist()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        return col.to_pylist()
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        return col.to_pylist()
    raise InpathError(f"cannot sketch a column of Arrow type {col.type}")


def _states(df, make_state):
    """Runs ``make_state(batches) -> bytes`` over each partition; the states, collected."""
    import pyarrow as pa

    def per_partition(batches):
        state = make_state(batches)
        if state is not None:
            yield pa.RecordBatch.from_pydict({"state": [state]}, schema=pa.schema([("state", pa.binary())]))

    rows = df.mapInArrow(per_partition, "state binary").collect()
    return [bytes(r["state"]) for r in rows]


def sketch(df, column, **params):
    """The :class:`inpath.Sketch` of a column (integers, strings or binary), built per
    partition inside Spark and merged on the driver. ``params`` are :class:`inpath.Sketch`'s."""
    Sketch(**params)  # bad parameters fail before Spark starts a job

    def make(batches):
        s = Sketch(**params)
        for b in batches:
            s.update(_values(b.column(0)))
        return s.to_bytes() if s.count else None

    states = _states(_column(df, column), make)
    if not states:
        return Sketch(**params)
    out = Sketch.from_bytes(states[0])
    for b in states[1:]:
        out.merge(Sketch.from_bytes(b))
    return out


def approx_count_distinct(df, column, **params):
    """Distinct values of a column: the HyperLogLog estimate of :func:`sketch` (about 0.4 %
    standard error at the default ``hll_p=16``; Spark's own default is 5 %)."""
    return sketch(df, column, **params).cardinality()


def hll_sketch(df, column, lg_k=12):
    """A :class:`inpath.DataSketchesHll` of a column, in the format of Spark's
    ``hll_sketch_agg(column, lg_k)``: ``to_bytes()`` merges with ``hll_union_agg`` and is read
    by ``hll_sketch_estimate``. Integers hash as Spark's longs, strings as UTF-8."""
    DataSketchesHll(lg_k)

    def make(batches):
        h = DataSketchesHll(lg_k)
        for b in batches:
            h.update(_values(b.column(0)))
        return h.to_bytes()

    out = DataSketchesHll(lg_k)
    for b in _states(_column(df, column), make):
        out.merge(DataSketchesHll.from_bytes(b))
    return out


def corr(df, columns, constant="nan", ddof=1):
    """Exact Pearson correlation (covariance, means, standard deviations) of numeric columns
    of one type, per partition inside Spark, merged on the driver: :func:`inpath.corr` of all
    the rows. Rows with a null are refused (drop them first)."""
    import numpy as np

    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InpathError(f"columns {missing} are not in the DataFrame ({df.columns})")
    names = [str(c) for c in columns]

    def make(batches):
        stats = None
        for b in batches:
            if b.num_rows == 0:
                continue
            cols = [b.column(i) for i in range(b.num_columns)]
            if any(c.null_count for c in cols):
                raise InpathError("a row holds a null; drop or fill nulls before corr")
            block = np.ascontiguousarray(
                np.stack([c.to_numpy(zero_copy_only=False) for c in cols], axis=1)
            )
            part = _corr_array(block, False, 1, names)
            if stats is None:
                stats = part
            else:
                stats.merge(part)
        return None if stats is None else stats.to_bytes()

    states = _states(df.select(*columns), make)
    if not states:
        raise InpathError("the DataFrame has no rows")
    stats = Statistics.from_bytes(states[0])
    for b in states[1:]:
        stats.merge(Statistics.from_bytes(b))
    return CorrResult(stats, constant=constant, ddof=ddof, labelled=True)

"""SQL over inpath column tables (``inpath query gen`` / ``inpath query import``).

The statement runs in Rust (Apache DataFusion over inpath's column scan: projection, exact
filter pushdown, zone maps; sealed pages unsealed as they are read) with the GIL released; the
result comes back as a ``pyarrow.Table`` (``.to_pandas()`` for pandas). Needs ``pyarrow``
(``pip install inpath[query]``).

>>> import inpath.query
>>> t = inpath.query.sql("tpch", "SELECT n_name FROM nation ORDER BY n_name LIMIT 2")  # doctest: +SKIP
>>> t.column("n_name").to_pylist()  # doctest: +SKIP
['ALGERIA', 'ARGENTINA']
"""

import os

from . import _inpath

__all__ = ["sql"]


def sql(dir, statement, *, keys=None, threads=None, offload=False, device_memory=None):
    """Runs one SQL statement over the tables under ``dir`` and returns a ``pyarrow.Table``.

    ``dir`` is a table directory or a directory of table directories; each table is named by
    its directory. ``keys`` maps key ids to key bytes for sealed tables (as in
    :func:`inpath.unseal`); ``threads`` defaults to one per CPU. ``offload=True`` runs the
    aggregates, joins and top-k the planner can hand off as Table Tasks on the local offload
    device (AQUOMAN's design; the answer is the same), within ``device_memory`` bytes (default:
    40 MiB per TPC-H SF 1 worth of rows); what does not fit runs on the host. Errors (a missing
    table or column, bad SQL, a wrong key, a damaged page naming its table, column and page, a
    bad ``device_memory``) raise :class:`inpath.InpathError`.
    """
    try:
        import pyarrow.ipc
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("inpath.query.sql needs pyarrow: pip install 'inpath[query]'") from e
    data = _inpath._query_sql(os.fspath(dir), statement, keys, threads, bool(offload), device_memory)
    return pyarrow.ipc.open_stream(data).read_all()

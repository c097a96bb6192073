"""inpath.dask on a LocalCluster of 2 worker processes: every result equals the one a single
process computes from all the data (sketches register for register, correlation statistics
exactly), whatever the partitioning and the merge tree."""

import numpy as np
import pandas as pd
import pytest

import inpath

# Installed by scripts/requirements-test.txt: a missing dask fails the suite, never skips it.
import dask.array as da
import dask.dataframe as dd
from distributed import Client, LocalCluster

import inpath.dask as idask


@pytest.fixture(scope="module")
def client():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None, host="127.0.0.1")
    c = Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def whole_sketch(items, **params):
    s = inpath.Sketch(**params)
    s.update(items)
    return s


def test_sketch_of_a_dask_array_equals_one_process(client):
    items = np.random.default_rng(1).integers(0, 200_000, 3_000_000, dtype=np.uint64)
    want = whole_sketch(items)
    for chunks, split_every in ((1_000_000, 2), (250_000, 3), (3_000_000, 8)):
        got = idask.sketch(da.from_array(items, chunks=chunks), split_every=split_every)
        assert got.to_bytes() == want.to_bytes()
        assert got.cardinality() == want.cardinality()
        assert got.count == len(items)
    est = idask.approx_count_distinct(da.from_array(items.astype(np.uint32), chunks=500_000),
                                      hll_p=14, seed=7)
    assert est == whole_sketch(items.astype(np.uint32), hll_p=14, seed=7).cardinality()
    assert abs(est - len(np.unique(items))) / len(np.unique(items)) < 0.03


def test_sketch_of_dataframe_columns_and_files(client, tmp_path):
    rng = np.random.default_rng(2)
    pdf = pd.DataFrame({
        "user": [f"u{i}" for i in rng.integers(0, 5000, 40_000)],
        "n": rng.integers(0, 1 << 40, 40_000, dtype=np.int64),
    })
    ddf = dd.from_pandas(pdf, npartitions=7)
    got = idask.sketch(ddf, column="user")
    want = whole_sketch(pdf["user"].tolist())
    assert got.to_bytes() == want.to_bytes()
    assert got.frequency("u17") == want.frequency("u17")
    got = idask.sketch(ddf["n"])
    assert got.to_bytes() == whole_sketch(pdf["n"].to_numpy()).to_bytes()
    # Files: each read by the task that sketches it.
    items = rng.integers(0, 1 << 32, 400_000, dtype=np.uint64).astype(np.uint32)
    paths = []
    for i, part in enumerate(np.array_split(items, 5)):
        path = tmp_path / f"part{i}.u32"
        part.tofile(path)
        paths.append(path)
    assert idask.sketch(paths, format="u32").to_bytes() == whole_sketch(items).to_bytes()
    lines = tmp_path / "words.txt"
    lines.write_bytes(b"".join(f"w{i % 999}\n".encode() for i in range(10_000)))
    got = idask.sketch([lines, lines], format="lines")
    assert got.count == 20_000
    assert got.to_bytes() == whole_sketch([f"w{i % 999}".encode() for i in range(10_000)] * 2).to_bytes()


def test_corr_equals_one_process(client):
    rng = np.random.default_rng(3)
    x = rng.integers(-1000, 1000, (200_000, 4)).astype(np.int32)
    x[:, 3] = 2 * x[:, 0] - x[:, 1]
    want = inpath.corr(x)
    got = idask.corr(da.from_array(x, chunks=(30_000, 2)))
    assert got.count == want.count
    assert got.statistics.to_bytes() == want.statistics.to_bytes()
    np.testing.assert_array_equal(got.pearson, want.pearson)
    f = pd.DataFrame(rng.random((50_000, 3)), columns=["a", "b", "c"])
    got = idask.corr(dd.from_pandas(f, npartitions=5), columns=["c", "a"])
    want = inpath.corr(f[["c", "a"]])
    assert list(got.pearson.columns) == ["c", "a"]
    np.testing.assert_allclose(got.pearson.to_numpy(), want.pearson.to_numpy(), rtol=0, atol=1e-15)


def test_bad_input_is_a_clear_error(client, tmp_path):
    x = da.from_array(np.arange(10, dtype=np.uint32), chunks=5)
    with pytest.raises(inpath.InpathError, match="column=NAME"):
        idask.sketch(dd.from_pandas(pd.DataFrame({"a": [1, 2]}), npartitions=1))
    with pytest.raises(inpath.InpathError, match="not in the DataFrame"):
        idask.sketch(dd.from_pandas(pd.DataFrame({"a": [1, 2]}), npartitions=1), column="b")
    with pytest.raises(inpath.InpathError, match="split_every = 1"):
        idask.sketch(x, split_every=1)
    with pytest.raises(inpath.InpathError, match="format="):
        idask.sketch([tmp_path / "x"])
    (tmp_path / "odd.u32").write_bytes(b"12345")
    with pytest.raises(inpath.InpathError, match="not a whole number of 4-byte u32 items"):
        idask.sketch([tmp_path / "odd.u32"], format="u32")
    with pytest.raises(inpath.InpathError, match="2-D"):
        idask.corr(x)
    with pytest.raises(Exception, match="hll_p"):
        idask.sketch(x, hll_p=40)

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


def test_corr_over_files_equals_one_process(client, tmp_path):
    rng = np.random.default_rng(8)
    x = rng.integers(0, 1 << 20, (90_000, 3)).astype(np.uint32)
    x[:, 2] = x[:, 0] // 2 + x[:, 1] // 3
    paths = []
    for i, part in enumerate(np.array_split(x, 4)):
        path = tmp_path / f"rows{i}.bin"
        part.tofile(path)
        paths.append(path)
    got = idask.corr(paths, dtype="u4", streams=3)
    want = inpath.corr(x)
    assert got.statistics.to_bytes() == want.statistics.to_bytes()
    (tmp_path / "odd.bin").write_bytes(b"x" * 13)
    with pytest.raises(inpath.InpathError, match="not a whole number of 12-byte rows"):
        idask.corr([tmp_path / "odd.bin"], dtype="u4", streams=3)
    with pytest.raises(inpath.InpathError, match="needs dtype= and streams="):
        idask.corr(paths)


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


def text(n=1_500_000, seed=3):
    rng = np.random.default_rng(seed)
    words = [b"hay", b"needle", b"aaaa", b"stack", b"needles", b"x"]
    picks = rng.integers(0, len(words), n // 4)
    seps = np.where(rng.integers(0, 6, len(picks)) == 0, b"\n", b" ")
    return b"".join(w + s for w, s in zip((words[i] for i in picks), seps))


def naive(data, pat):
    out, i = [], data.find(pat)
    while i >= 0:
        out.append(i)
        i = data.find(pat, i + 1)
    return out


def test_sharded_store_grep_and_nn_run_where_the_shards_are(client, tmp_path):
    dirs = {name: str(tmp_path / f"store-{name}") for name in (0, 1)}
    sharded = idask.ShardedStore(client, dirs)
    data = text()
    shards = sharded.put("t", data)
    assert len(shards) == 2 and shards[0].offset == 0
    assert shards[1].offset == shards[0].length and sum(s.length for s in shards) == len(data)
    assert {s.worker for s in shards} == set(client.scheduler_info()["workers"])
    r = sharded.grep("t", "needle")
    assert r["offsets"].tolist() == naive(data, b"needle")
    assert r["lines"] == sum(b"needle" in line for line in data.split(b"\n"))
    # Every shard ran on the worker holding it, and only results came back.
    assert all(owner == ran for owner, ran in r["placement"])
    assert r["bytes_scanned"] == len(data)
    c = sharded.grep("t", "needles", count=True)
    assert c["lines"] == sum(b"needles" in line for line in data.split(b"\n"))
    assert c["bytes_returned"] < 0.01 * c["bytes_scanned"]
    # Nearest neighbours over items sharded at item boundaries: numpy's brute force, ties to
    # the lowest global index.
    rng = np.random.default_rng(9)
    items = rng.integers(0, 256, (6001, 32), dtype=np.uint8)
    items[4000] = items[17]  # a tie across the shards
    sharded.put("codes", items.tobytes(), item_size=32)
    queries = items[[17, 5, 5999]] ^ np.uint8(1)
    got = sharded.nn("codes", queries, k=4, item_size=32)
    dist = np.unpackbits(items[None, :, :] ^ queries[:, None, :], axis=2).sum(axis=2)
    want = np.lexsort((np.arange(len(items))[None, :].repeat(3, 0), dist), axis=1)[:, :4]
    assert got["indices"].tolist() == want.tolist()
    assert got["distances"].tolist() == np.take_along_axis(dist, want, axis=1).tolist()
    assert all(owner == ran for owner, ran in got["placement"])
    with pytest.raises(inpath.InpathError, match="no sharded file"):
        sharded.grep("nothing", "x")


def test_a_dead_worker_is_an_error_naming_its_shards(tmp_path):
    import os
    import time

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None, host="127.0.0.1")
    c = Client(cluster)
    try:
        sharded = idask.ShardedStore(c, {n: str(tmp_path / f"s{n}") for n in (0, 1)}, timeout=60)
        shards = sharded.put("t", text(200_000))
        victim = shards[1].worker
        try:
            c.run(lambda: os._exit(1), workers=[victim])
        except Exception:  # noqa: BLE001 - the worker dies while answering
            pass
        for _ in range(200):
            if victim not in c.scheduler_info()["workers"]:
                break
            time.sleep(0.05)
        with pytest.raises(inpath.InpathError, match=f"{victim}.*are gone.*handle {shards[1].handle}"):
            sharded.grep("t", "needle")
    finally:
        c.close()
        cluster.close()


def test_sharded_bfs_levels_equal_scipy(client, tmp_path):
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    dirs = {name: str(tmp_path / f"graph-{name}") for name in (0, 1)}
    sharded = idask.ShardedStore(client, dirs)
    rng = np.random.default_rng(12)
    n, m = 3000, 9000
    src = rng.integers(0, n - 200, m).astype(np.uint32)   # the last 200 vertices isolated
    dst = rng.integers(0, n - 200, m).astype(np.uint32)
    for undirected in (False, True):
        name = f"g{int(undirected)}"
        sharded.put_graph(name, src, dst, vertices=n, undirected=undirected)
        r = sharded.bfs(name, 5)
        g = csr_matrix((np.ones(m), (src, dst)), shape=(n, n))
        d = shortest_path(g, directed=not undirected, unweighted=True, indices=5)
        want = np.where(np.isinf(d), -1, d).astype(np.int64)
        assert r["levels"].tolist() == want.tolist()
        assert r["reached"] == int((want >= 0).sum()) and r["level_sizes"][0] == 1
        assert all(owner == ran for owner, ran in r["placement"])
    with pytest.raises(inpath.InpathError, match="out of range"):
        sharded.bfs("g0", n)

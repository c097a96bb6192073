"""Hamming search from Python: the flat scan equals numpy's brute force (ties to the lowest
index) for odd item sizes, on every kernel level (the CLI under INPATH_ISA); LSH finds planted
near-duplicates (recall@1 >= 0.95) with exact distances; index errors name the fix."""

import json
import os
import subprocess

import numpy as np
import pytest

import inpath
import inpath.store


def brute(items, queries, k):
    bits = np.unpackbits(items[None, :, :] ^ queries[:, None, :], axis=2).sum(axis=2)
    order = np.argsort(bits, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(bits, order, axis=1)


@pytest.fixture()
def server(tmp_path, inpath_bin):
    """A server on tmp_path/S (started once the store exists); yields a function making it."""
    procs = []

    def start():
        p = subprocess.Popen([inpath_bin, "store", "serve", str(tmp_path / "S"), "--listen",
                              "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        procs.append(p)
        line = p.stdout.readline().decode()
        assert line.startswith("listening on "), line
        return inpath.store.Store(line.split()[-1])

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.parametrize("item_size", [1, 7, 8, 33, 8192])
def test_flat_scan_equals_numpy_on_every_level(tmp_path, inpath_bin, item_size):
    rng = np.random.default_rng(item_size)
    n = 40 if item_size == 8192 else 700
    items = rng.integers(0, 256, (n, item_size), dtype=np.uint8)
    items[n - 1] = items[3]  # ties: the lower index first
    items[n // 2] = 0
    (tmp_path / "items.bin").write_bytes(items.tobytes())
    s = inpath.store.Store(tmp_path / "S")
    h = s.put(tmp_path / "items.bin", page_size=4096)["handle"]
    for nq in (1, 3, 8, 9, 16, 17):
        queries = rng.integers(0, 256, (nq, item_size), dtype=np.uint8)
        queries[0] = items[3]
        k = min(5, n)
        want_i, want_d = brute(items, queries, k)
        r = s.nn(h, queries, k=k, threads=2)
        np.testing.assert_array_equal(r["indices"], want_i)
        np.testing.assert_array_equal(r["distances"], want_d)
        assert r["indices"][0][:2].tolist() == [3, n - 1] or item_size == 1
    # The CLI at every level this machine has (the portable one always).
    queries = rng.integers(0, 256, (17, item_size), dtype=np.uint8)
    (tmp_path / "q.bin").write_bytes(queries.tobytes())
    want_i, want_d = brute(items, queries, 4)
    for level in ("portable", "avx2", "avx512"):
        out = subprocess.run([inpath_bin, "store", "nn", str(tmp_path / "S"), str(h),
                              "--item-size", str(item_size), "--queries", str(tmp_path / "q.bin"),
                              "-k", "4", "--json"], capture_output=True, check=True,
                             env={**os.environ, "INPATH_ISA": level})
        v = json.loads(out.stdout)
        got_i = [[x["index"] for x in q] for q in v["neighbours"]]
        got_d = [[x["distance"] for x in q] for q in v["neighbours"]]
        assert got_i == want_i.tolist() and got_d == want_d.tolist(), (level, v["kernel"])
        if level == "portable":
            assert v["kernel"] == "portable"


def test_lsh_recall_on_planted_near_duplicates(tmp_path, server):
    rng = np.random.default_rng(11)
    n, item_size, nq = 4000, 128, 300
    items = rng.integers(0, 256, (n, item_size), dtype=np.uint8)
    truth = rng.integers(0, n, nq)
    queries = items[truth].copy()
    bits = np.unpackbits(queries, axis=1)
    for row in bits:  # 2% of the bits flipped
        flip = rng.choice(item_size * 8, 20, replace=False)
        row[flip] ^= 1
    queries = np.packbits(bits, axis=1)
    (tmp_path / "items.bin").write_bytes(items.tobytes())
    local = inpath.store.Store(tmp_path / "S")
    h = local.put(tmp_path / "items.bin")["handle"]
    with pytest.raises(inpath.InpathError, match="has no LSH index"):
        local.nn(h, queries, k=1, lsh=True)
    r = local.index(h, item_size, threads=2)
    assert (r["items"], r["tables"], r["bits"]) == (n, 8, 16)
    want_i, want_d = brute(items, queries, 1)
    remote = server()
    for store in (local, remote):
        for probe in (0, 1):
            got = store.nn(h, queries, k=3, lsh=True, probe=probe)
            recall = np.mean(got["indices"][:, 0] == want_i[:, 0])
            assert recall >= 0.95, (probe, recall)
            assert got["lsh"]["candidates"] < n * nq / 10
            # Every distance returned is exact.
            for qi in range(nq):
                for idx, d in zip(got["indices"][qi], got["distances"][qi]):
                    if idx != np.iinfo(np.uint64).max:
                        assert d == np.unpackbits(items[idx] ^ queries[qi]).sum()
    # An index built with other parameters through the server.
    r = remote.index(h, item_size, tables=4, bits=12, seed=5)
    assert r["tables"] == 4 and local.nn(h, queries[:2], lsh=True)["lsh"]["bits"] == 12


def test_lsh_errors(tmp_path):
    items = np.zeros((100, 16), dtype=np.uint8)
    (tmp_path / "items.bin").write_bytes(items.tobytes())
    s = inpath.store.Store(tmp_path / "S")
    h = s.put(tmp_path / "items.bin")["handle"]
    with pytest.raises(inpath.InpathError, match="LSH tables = 0 is out of range: 1 to 64"):
        s.index(h, 16, tables=0)
    with pytest.raises(inpath.InpathError, match="LSH bits = 40 is out of range: 1 to 32"):
        s.index(h, 16, bits=40)
    with pytest.raises(inpath.InpathError, match="divisor of the handle's size"):
        s.index(h, 48)
    s.index(h, 16)
    with pytest.raises(inpath.InpathError, match="probe radius = 5 is out of range: 0 to 2"):
        s.nn(h, items[:1], lsh=True, probe=5)
    with pytest.raises(inpath.InpathError, match="k = 0"):
        s.nn(h, items[:1], k=0, lsh=True)
    # Every item is the same: k beyond the items pads the row.
    r = s.nn(h, items[:1], k=120, lsh=True)
    assert r["indices"].shape == (1, 120) and r["distances"][0, 99] == 0
    assert r["indices"][0, 100] == np.iinfo(np.uint64).max
    s.put(tmp_path / "items.bin")  # generation 2: the index is stale
    with pytest.raises(inpath.InpathError, match=r"stale.*rebuild it: inpath store index"):
        s.nn(h, items[:1], lsh=True)
    path = tmp_path / "S" / "index" / f"{h}.lsh"
    path.write_bytes(b"garbage")
    with pytest.raises(inpath.InpathError, match="not an LSH index"):
        s.nn(h, items[:1], lsh=True)

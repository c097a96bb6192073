"""inpath.store.Store: a local store directory and a served one answer the same; search
equals a naive search, nearest neighbours equal numpy brute force; errors name the problem."""

import os
import subprocess

import numpy as np
import pytest

import inpath
import inpath.store

from conftest import naive, run_cli, text


@pytest.fixture()
def served(tmp_path, inpath_bin):
    """A store with a raw and a sealed handle, and a server on it."""
    data = text()
    (tmp_path / "t.txt").write_bytes(data)
    key = bytes(range(32))
    (tmp_path / "keys.txt").write_text(f"inpath-seal-keys 1\nkey 1 {key.hex()}\n")
    os.chmod(tmp_path / "keys.txt", 0o600)
    local = inpath.store.Store(tmp_path / "S", keys={1: key})
    raw = local.put(tmp_path / "t.txt", page_size=1024)
    sealed = local.put(tmp_path / "t.txt", name="sealed", cipher="aes256-gcm", compress="lz4")
    server = subprocess.Popen(
        [inpath_bin, "store", "serve", str(tmp_path / "S"), "--listen", "127.0.0.1:0",
         "--key-file", str(tmp_path / "keys.txt")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = server.stdout.readline().decode()
        assert line.startswith("listening on "), line
        remote = inpath.store.Store(line.split()[-1])
        yield data, local, remote, raw["handle"], sealed["handle"]
    finally:
        server.kill()
        server.wait()


def test_local_and_remote_answer_alike_and_equal_a_naive_search(served):
    data, local, remote, raw, sealed = served
    assert remote.remote and not local.remote
    assert [e["name"] for e in remote.ls()] == [e["name"] for e in local.ls()] == ["t.txt", "sealed"]
    want = naive(data, b"needle")
    lines = sum(1 for line in data.split(b"\n") if b"needle" in line)
    for store in (local, remote):
        for h in (raw, sealed):
            for threads in (1, 3):
                r = store.grep(h, "needle", threads=threads)
                assert r["offsets"].dtype == np.uint64
                np.testing.assert_array_equal(r["offsets"], want)
                assert r["lines"] == lines
                assert store.grep(h, b"needle", count=True)["lines"] == lines
        r = store.grep(raw, "ne+dles", regex=True)
        assert r["lines"] == sum(1 for line in data.split(b"\n") if b"needles" in line)
        assert store.read(sealed, 10, 20) == data[10:30]
        assert store.read(raw) == data
        # A handle may be given by the name the file was put under.
        assert store.read("sealed", 10, 20) == data[10:30]
        assert store.grep("t.txt", b"needle", count=True)["lines"] == lines
    r = remote.grep(raw, "needle", count=True)
    assert r["bytes_scanned"] == len(data) and r["bytes_returned"] < 1000
    assert remote.stats()["requests"] >= 10


def test_nearest_neighbours_equal_numpy(tmp_path, served):
    _, local, remote, _, _ = served
    rng = np.random.default_rng(5)
    items = rng.integers(0, 256, (3000, 32), dtype=np.uint8)
    items[100] = items[7]  # a tie: the lower index first
    (tmp_path / "items.bin").write_bytes(items.tobytes())
    h = local.put(tmp_path / "items.bin", page_size=4096)["handle"]
    queries = np.concatenate([items[[7, 2999]], rng.integers(0, 256, (5, 32), dtype=np.uint8)])
    bits = np.unpackbits(items[None, :, :] ^ queries[:, None, :], axis=2).sum(axis=2)
    order = np.argsort(bits, axis=1, kind="stable")[:, :4]
    for store in (local, remote):
        r = store.nn(h, queries, k=4, threads=2)
        np.testing.assert_array_equal(r["indices"], order)
        np.testing.assert_array_equal(r["distances"], np.take_along_axis(bits, order, axis=1))
    assert list(local.nn(h, queries[:1].tobytes(), item_size=32, k=2)["indices"][0]) == [7, 100]


def test_bad_input_raises_inpath_error(tmp_path, served):
    data, local, remote, raw, sealed = served
    for store in (local, remote):
        with pytest.raises(inpath.InpathError, match="unknown handle 99"):
            store.grep(99, "x")
        with pytest.raises(inpath.InpathError, match="past the end"):
            store.read(raw, len(data), 1)
        with pytest.raises(inpath.InpathError, match="out of range"):
            store.grep(raw, "")
        with pytest.raises(inpath.InpathError, match="stale handle"):
            store.grep(f"{raw}@7", "x")
    nokeys = inpath.store.Store(tmp_path / "S")
    with pytest.raises(inpath.InpathError, match="a key file is needed"):
        nokeys.grep(sealed, "x")
    wrong = inpath.store.Store(tmp_path / "S", keys={1: bytes(32)})
    with pytest.raises(inpath.InpathError, match="does not unseal"):
        wrong.read(sealed, 0, 10)
    with pytest.raises(inpath.InpathError, match="is not an inpath store"):
        inpath.store.Store(tmp_path / "nothing").grep(1, "x")
    assert inpath.store.Store(tmp_path / "nothing").ls() == []
    assert local.rm(raw)["name"] == "t.txt"
    with pytest.raises(inpath.InpathError, match="cannot connect"):
        inpath.store.Store("127.0.0.1:1").ls()


def test_taps_put_rm_bfs_and_chase_local_and_remote(tmp_path, served, inpath_bin):
    import zlib
    data, local, remote, raw, sealed = served
    items = np.random.default_rng(5).integers(0, 30_000, 200_000, dtype=np.uint32)
    (tmp_path / "items.bin").write_bytes(items.tobytes())
    # put through the server (sealed with its key), then the same taps from both sides.
    put = remote.put(tmp_path / "items.bin", cipher="aes256-gcm", compress="lz4")
    assert put["size"] == items.nbytes and "aes256-gcm" in put["codec"]
    h = put["handle"]
    for store in (local, remote):
        for threads in (1, 2):
            crc = store.crc(h, threads=threads)
            assert crc["result"] == {"bytes": items.nbytes, "crc32": zlib.crc32(items.tobytes())}
            s = store.sketch(h, format="u32", threads=threads)
            assert s["result"]["count"] == len(items)
            assert s["result"]["min"] == int(items.min()) and s["result"]["max"] == int(items.max())
            distinct = len(np.unique(items))
            assert abs(s["result"]["cardinality"] - distinct) / distinct < 0.03
            assert s["bytes_returned"] < 0.01 * s["bytes_scanned"]
    rows = np.random.default_rng(6).random((5000, 3))
    rows[:, 2] = 2 * rows[:, 0] + 1
    (tmp_path / "rows.bin").write_bytes(rows.tobytes())
    r = local.put(tmp_path / "rows.bin")["handle"]
    c = remote.corr(r, type="f64", streams=3, threads=2)["result"]
    want = np.corrcoef(rows.T)
    assert np.allclose(c["pearson"], [want[0, 1], want[0, 2], want[1, 2]], atol=1e-12)
    with pytest.raises(inpath.InpathError, match="there is no tap"):
        remote._tap("bloom", h, 1, None)
    with pytest.raises(inpath.InpathError, match="unknown option"):
        local.sketch(h, colour="red")
    # bfs and chase, as the CLI put them in.
    (tmp_path / "edges.txt").write_text("0 1\n1 2\n0 3\n3 2\n2 4\n5 6\n")
    run_cli(inpath_bin, "store", "put-graph", str(tmp_path / "S"), "g",
            "--edges", str(tmp_path / "edges.txt"))
    run_cli(inpath_bin, "store", "put-chase", str(tmp_path / "S"), "c", "--pages", "50")
    ids = {e["name"]: e["handle"] for e in local.ls()}
    for store in (local, remote):
        b = store.bfs(ids["g"], 0, threads=2)
        assert b["order"].tolist() == [0, 1, 3, 2, 4]
        assert b["levels"].tolist() == [0, 1, 2, 1, 3, -1, -1]
        assert b["predecessors"].tolist() == [-1, 0, 1, 0, 2, -1, -1]
        ch = store.chase(ids["c"], hops=10)
        assert len(ch["sequence"]) == 10 and ch["sequence"][0] == 0 and ch["stop"] == "max-hops"
        assert len(set(store.chase(ids["c"])["sequence"].tolist())) == 50
    assert remote.rm(r)["name"] == "rows.bin"
    assert all(e["handle"] != r for e in local.ls())

"""inpath.Sketch: same results as the CLI and the Rust library, zero-copy NumPy input, pickling,
and clear errors for bad input."""

import pickle
import threading

import numpy as np
import pandas as pd
import pytest

import inpath
from conftest import run_cli


def test_u32_array_matches_cli_bytes(tmp_path, inpath_bin):
    data = np.random.default_rng(1).integers(0, 50_000, 300_000, dtype=np.uint32)
    path = tmp_path / "a.bin"
    data.tofile(path)
    saved = tmp_path / "a.skt"
    run_cli(inpath_bin, "sketch", "--format", "u32", str(path), "--save", str(saved), "-q")
    s = inpath.Sketch()
    s.update(data)
    assert s.kind == "u32"
    assert s.to_bytes() == saved.read_bytes()
    assert s.count == 300_000 and len(s) == 300_000
    assert s.min == int(data.min()) and s.max == int(data.max())


def test_u64_compat_and_chunked_updates_match_cli(tmp_path, inpath_bin):
    data = np.random.default_rng(2).integers(0, 2**40, 100_000, dtype=np.uint64)
    path = tmp_path / "b.bin"
    data.tofile(path)
    saved = tmp_path / "b.skt"
    run_cli(inpath_bin, "sketch", "--format", "u64", "--hash", "compat", str(path), "--save", str(saved), "-q")
    s = inpath.Sketch(hash="compat")
    for part in np.array_split(data, 7):
        s.update(part)
    assert s.to_bytes() == saved.read_bytes()


def test_text_values_match_cli_lines(tmp_path, inpath_bin):
    words = [f"user{i % 777}" for i in range(20_000)]
    path = tmp_path / "w.txt"
    path.write_text("\n".join(words) + "\n")
    saved = tmp_path / "w.skt"
    run_cli(inpath_bin, "sketch", str(path), "--save", str(saved))
    s = inpath.Sketch()
    s.update(words)
    assert s.to_bytes() == saved.read_bytes()
    b = inpath.Sketch()
    b.update([w.encode() for w in words])
    assert b.to_bytes() == s.to_bytes()
    assert s.frequency("user5") >= words.count("user5")


def test_pandas_series_integer_and_text(tmp_path, inpath_bin):
    df = pd.DataFrame({"id": np.arange(10_000, dtype=np.int64) % 300, "user": [f"u{i % 50}" for i in range(10_000)]})
    path = tmp_path / "e.csv"
    df.to_csv(path, index=False)
    saved = tmp_path / "e.skt"
    run_cli(inpath_bin, "sketch", "--column", "user", str(path), "--save", str(saved))
    text = inpath.Sketch()
    text.update(df["user"])
    assert text.to_bytes() == saved.read_bytes()
    ints = inpath.Sketch()
    ints.update(df["id"])
    assert ints.kind == "u64"
    assert abs(ints.cardinality() - 300) < 3


def test_sketch_saved_by_python_loads_in_cli_and_back(tmp_path, inpath_bin):
    s = inpath.Sketch()
    s.update(np.arange(5000, dtype=np.uint32) % 100)
    path = tmp_path / "p.skt"
    path.write_bytes(s.to_bytes())
    out = run_cli(inpath_bin, "sketch", "query", str(path), "--key", "7", "--json").stdout
    import json

    assert json.loads(out)["answers"][0]["count_at_most"] == s.frequency(7) == 50
    shown = json.loads(run_cli(inpath_bin, "sketch", "show", str(path), "--json").stdout)
    assert shown == s.summary()
    assert inpath.Sketch.from_bytes(path.read_bytes()).to_bytes() == s.to_bytes()


def test_estimates_are_accurate():
    data = np.random.default_rng(3).integers(0, 2**32, 1_000_000, dtype=np.uint32)
    s = inpath.Sketch()
    s.update(data)
    exact = len(np.unique(data))
    assert abs(s.cardinality() - exact) / exact < 0.015
    _, counts = np.unique(data, return_counts=True)
    f2 = float((counts.astype(np.float64) ** 2).sum())
    assert abs(s.f2() - f2) / f2 < 0.02
    assert s.summary()["count_min"]["trustworthy"] is False


def test_merge_equals_union_and_pickle():
    a_data = np.arange(0, 60_000, dtype=np.uint32)
    b_data = np.arange(30_000, 90_000, dtype=np.uint32)
    a, b, both = inpath.Sketch(), inpath.Sketch(), inpath.Sketch()
    a.update(a_data)
    b.update(b_data)
    both.update(a_data)
    both.update(b_data)
    a.merge(b)
    assert a.to_bytes() == both.to_bytes()
    clone = pickle.loads(pickle.dumps(a))
    assert clone.to_bytes() == a.to_bytes()
    assert repr(clone).startswith("Sketch(120000 u32 items")


def test_signed_integers_hash_by_bits():
    signed = np.array([-1, 5, -7], dtype=np.int32)
    s, u = inpath.Sketch(), inpath.Sketch()
    s.update(signed)
    u.update(signed.view(np.uint32))
    assert s.to_bytes() == u.to_bytes()


def test_bad_input_gives_clear_exceptions():
    s = inpath.Sketch()
    with pytest.raises(TypeError, match="unsupported array element type"):
        s.update(np.zeros(4, dtype=np.float32))
    with pytest.raises(TypeError, match="unsupported array element type"):
        s.update(np.zeros(4, dtype=np.uint8))
    with pytest.raises(ValueError, match="1-D"):
        s.update(np.zeros((2, 2, 2), dtype=np.uint32))
    with pytest.raises(ValueError, match="not contiguous"):
        s.update(np.arange(10, dtype=np.uint32)[::3])
    s.update(np.zeros(0, dtype=np.uint32))  # empty input is fine
    s.update(np.arange(3, dtype=np.uint32))
    with pytest.raises(inpath.InpathError, match="holds u32 items"):
        s.update(np.arange(3, dtype=np.uint64))
    with pytest.raises(inpath.InpathError, match="holds u32 items"):
        s.update(["text"])
    with pytest.raises(TypeError, match="cannot sketch a value"):
        inpath.Sketch().update([1.5, 2.5])
    with pytest.raises(inpath.InpathError, match="hll_p = 3 is out of range: 4 to 18"):
        inpath.Sketch(hll_p=3)
    with pytest.raises(inpath.InpathError, match="128 bits in compat mode"):
        inpath.Sketch(cm=(10, 13), hash="compat")
    with pytest.raises(inpath.InpathError, match="fast or compat"):
        inpath.Sketch(hash="md5")
    with pytest.raises(inpath.InpathError, match="different settings"):
        other = inpath.Sketch(hll_p=12)
        other.update(np.arange(3, dtype=np.uint32))
        s.merge(other)
    good = s.to_bytes()
    with pytest.raises(inpath.InpathError, match="checksum"):
        damaged = bytearray(good)
        damaged[100] ^= 1
        inpath.Sketch.from_bytes(bytes(damaged))
    with pytest.raises(inpath.InpathError, match="truncated"):
        inpath.Sketch.from_bytes(good[:-1])
    with pytest.raises(inpath.InpathError, match="no items yet"):
        inpath.Sketch().to_bytes()
    with pytest.raises(inpath.InpathError, match="u32 sketch"):
        s.frequency("x")


def test_update_releases_the_gil():
    data = np.random.default_rng(4).integers(0, 2**32, 40_000_000, dtype=np.uint32)
    s = inpath.Sketch()
    done = threading.Event()
    ticks = 0

    def work():
        s.update(data)
        done.set()

    worker = threading.Thread(target=work)
    worker.start()
    while not done.is_set():
        ticks += 1
    worker.join()
    # With the GIL held for the whole update this loop could not run while it lasts.
    assert ticks > 1000
    assert s.count == 40_000_000


def test_any_thread_count_gives_the_same_sketch(tmp_path, inpath_bin):
    # 1.1M items: up to four lanes of at least 2^18 items; the CLI on one thread is the
    # reference. u64 items with a prior update check that lanes merge into existing state.
    data = np.random.default_rng(8).integers(0, 400_000, 1_100_000, dtype=np.uint32)
    path = tmp_path / "t.bin"
    data.tofile(path)
    saved = tmp_path / "t.skt"
    run_cli(inpath_bin, "sketch", "--format", "u32", str(path), "--save", str(saved), "-q", "-t", "1")
    for threads in (1, 2, 3, 4, None):
        s = inpath.Sketch()
        s.update(data, threads=threads)
        assert s.to_bytes() == saved.read_bytes(), threads
    wide = np.random.default_rng(9).integers(0, 2**40, 900_000, dtype=np.uint64)
    one = inpath.Sketch()
    one.update(wide[:1000], threads=1)
    one.update(wide[1000:], threads=1)
    for threads in (2, 3):
        s = inpath.Sketch()
        s.update(wide[:1000], threads=threads)
        s.update(wide[1000:], threads=threads)
        assert s.to_bytes() == one.to_bytes(), threads
    with pytest.raises(ValueError, match="threads must be at least 1"):
        inpath.Sketch().update(data, threads=0)


def test_sketch_choice_matches_cli_and_refuses_absent_queries(tmp_path, inpath_bin):
    data = np.random.default_rng(7).integers(0, 100_000, 200_000, dtype=np.uint32)
    path = tmp_path / "c.bin"
    data.tofile(path)
    saved = tmp_path / "c.skt"
    run_cli(inpath_bin, "sketch", "--format", "u32", "--sketches", "hll", str(path), "--save", str(saved), "-q")
    s = inpath.Sketch(sketches="hll")
    s.update(data)
    assert s.sketches == "hll"
    assert s.to_bytes() == saved.read_bytes()
    full = inpath.Sketch()
    full.update(data)
    # The kept sketch holds exactly what the full sketch holds.
    assert s.cardinality() == full.cardinality()
    summary = s.summary()
    assert summary["f2"] is None and summary["count_min"] is None and summary["sketches"] == "hll"
    with pytest.raises(inpath.InpathError, match="needs the agms sketch"):
        s.f2()
    with pytest.raises(inpath.InpathError, match="needs the cm sketch"):
        s.frequency(1)
    with pytest.raises(inpath.InpathError, match="hll, cm, agms"):
        inpath.Sketch(sketches="hll,bogus")
    # A sketch keeping other parts does not merge.
    with pytest.raises(inpath.InpathError):
        s.merge(full)

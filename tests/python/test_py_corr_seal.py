"""inpath.corr, inpath.seal/unseal and inpath.compress/decompress from Python: the same results
as the CLI and numpy, and clear exceptions for bad input."""

import gzip
import pickle
import zlib

import numpy as np
import pandas as pd
import pytest

import inpath
from conftest import run_cli


def test_corr_matches_numpy_in_both_orientations():
    rng = np.random.default_rng(1)
    base = rng.integers(0, 1 << 20, (50_000, 1), dtype=np.int64)
    x = np.hstack([base + rng.integers(0, 1 << k, (50_000, 1)) for k in (4, 12, 18, 20)]).astype(np.uint32)
    expected = np.corrcoef(x, rowvar=False)
    columns = inpath.corr(x)
    assert np.allclose(columns.pearson, expected, rtol=1e-12, atol=1e-15)
    assert np.allclose(columns.covariance, np.cov(x, rowvar=False), rtol=1e-12)
    assert np.allclose(columns.means, x.mean(axis=0), rtol=1e-14)
    assert np.allclose(columns.std, x.std(axis=0, ddof=1), rtol=1e-12)
    rows = inpath.corr(np.ascontiguousarray(x.T), rowvar=True)
    fortran = inpath.corr(np.asfortranarray(x))
    for other in (rows, fortran):
        assert other.statistics.to_bytes() == columns.statistics.to_bytes()
    f = x.astype(np.float64)
    assert np.allclose(inpath.corr(f).pearson, np.corrcoef(f, rowvar=False), rtol=1e-12, atol=1e-15)


def test_corr_statistics_equal_the_cli_and_merge(tmp_path, inpath_bin):
    x = np.random.default_rng(2).integers(0, 2**32, (20_000, 16), dtype=np.uint32)
    path = tmp_path / "lines.bin"
    x.tofile(path)
    saved = tmp_path / "x.stats"
    run_cli(inpath_bin, "corr", str(path), "--layout", "lines", "--type", "u32", "--save", str(saved))
    whole = inpath.corr(x, threads=3).statistics
    assert whole.to_bytes() == saved.read_bytes()
    first, second = inpath.corr(x[:7000]).statistics, inpath.corr(x[7000:]).statistics
    first.merge(second)
    assert first.to_bytes() == whole.to_bytes()
    again = pickle.loads(pickle.dumps(first))
    assert again.to_bytes() == whole.to_bytes()
    loaded = inpath.Statistics.from_bytes(saved.read_bytes())
    assert np.array_equal(inpath.CorrResult(loaded).pearson, inpath.corr(x).pearson)


def test_corr_dataframe_is_labelled_and_extras():
    t = np.arange(1000, dtype=np.int64)
    df = pd.DataFrame({"cpu": t, "mem": 3 * t + 7, "io": 500 - t, "const": np.full(1000, 4, dtype=np.int64)})
    r = inpath.corr(df)
    assert list(r.pearson.columns) == ["cpu", "mem", "io", "const"]
    assert r.pearson.loc["cpu", "mem"] == pytest.approx(1.0, abs=1e-15)
    assert r.pearson.loc["cpu", "io"] == pytest.approx(-1.0, abs=1e-15)
    assert np.isnan(r.pearson.loc["cpu", "const"])
    assert inpath.corr(df, constant="zero").pearson.loc["cpu", "const"] == 0.0
    slope, intercept, _ = r.statistics.regression(0, 1)
    assert (slope, intercept) == (pytest.approx(3.0), pytest.approx(7.0))
    assert r.statistics.cosine(0, 0) == pytest.approx(1.0)


def test_corr_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        inpath.corr(np.arange(10, dtype=np.int32))
    with pytest.raises(ValueError, match="2-D"):
        inpath.corr(np.zeros((2, 2, 2), dtype=np.int32))
    with pytest.raises(inpath.InpathError, match="at least 2"):
        inpath.corr(np.zeros((10, 1), dtype=np.int32))
    with pytest.raises(ValueError, match="not contiguous"):
        inpath.corr(np.zeros((10, 8), dtype=np.int32)[:, ::2])
    with pytest.raises(TypeError, match="unsupported element type"):
        inpath.corr(np.zeros((4, 3), dtype=np.complex128))
    with pytest.raises(TypeError, match="one numeric dtype"):
        inpath.corr(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}))
    nan = np.ones((10, 3))
    nan[4, 1] = np.nan
    with pytest.raises(inpath.InpathError, match=r"NaN \(first at index \[4, 1\]\)"):
        inpath.corr(nan)
    propagated = inpath.corr(nan, nan="propagate").pearson
    assert np.isnan(propagated[0, 1])
    with pytest.raises(inpath.InpathError, match="ddof"):
        inpath.corr(np.ones((3, 2)), ddof=5)
    a = inpath.corr(np.ones((3, 2), dtype=np.int32)).statistics
    b = inpath.corr(np.ones((3, 3), dtype=np.int32)).statistics
    with pytest.raises(inpath.InpathError):
        a.merge(b)
    with pytest.raises(inpath.InpathError):
        inpath.Statistics.from_bytes(b"not statistics")


KEY = bytes(range(32))


@pytest.mark.parametrize("compress", ["none", "deflate", "lz4", "zstd", "snappy"])
@pytest.mark.parametrize("cipher", ["none", "aes256-ecb", "aes256-ctr", "aes256-cbc", "aes256-gcm"])
def test_seal_round_trip_every_tier(compress, cipher):
    page = (b"lineitem|1|155190|7706|1|17|21168.23|0.04|0.02|N|O|" * 700)[:30_000]
    key = KEY if cipher != "none" else None
    record = inpath.seal(page, key=key, key_id=9, compress=compress, cipher=cipher)
    assert inpath.unseal(record, keys={9: KEY}) == page
    assert inpath.unseal(memoryview(record), keys={9: KEY}) == page


def test_seal_batch_and_keys():
    pages = [bytes([i]) * (1000 + i) for i in range(20)]
    records = inpath.seal_batch(pages, key=KEY[:16], cipher="aes128-ctr", threads=3)
    assert inpath.unseal_batch(records, keys={1: KEY[:16]}, threads=2) == pages
    with pytest.raises(inpath.InpathError, match="128 bits but the cipher needs a 256-bit key"):
        inpath.seal(b"x", key=KEY[:16], cipher="aes256-cbc")
    with pytest.raises(inpath.InpathError, match="needs key="):
        inpath.seal(b"x")
    record = inpath.seal(b"secret page" * 100, key=KEY)
    with pytest.raises(inpath.InpathError, match="(?i)key"):
        inpath.unseal(record, keys={1: bytes(32)})
    with pytest.raises(inpath.InpathError, match="(?i)key"):
        inpath.unseal(record, keys={2: KEY})
    damaged = bytearray(record)
    damaged[-5] ^= 1
    with pytest.raises(inpath.InpathError):
        inpath.unseal(bytes(damaged), keys={1: KEY})
    with pytest.raises(inpath.InpathError, match="record 1"):
        inpath.unseal_batch([record, bytes(damaged)], keys={1: KEY})
    with pytest.raises(inpath.InpathError):
        inpath.unseal(record[:30], keys={1: KEY})


def test_compress_interoperates_with_python_codecs():
    data = b"the quick brown fox " * 5000
    assert zlib.decompress(inpath.compress(data, "zlib")) == data
    assert gzip.decompress(inpath.compress(data, "gzip")) == data
    assert zlib.decompress(inpath.compress(data, "deflate"), -15) == data
    assert inpath.decompress(gzip.compress(data)) == data
    assert inpath.decompress(zlib.compress(data)) == data
    for fmt in ("lz4", "snappy", "zstd", "gzip", "zlib"):
        assert inpath.decompress(inpath.compress(data, fmt)) == data
    assert inpath.decompress(inpath.compress(data, "deflate"), format="deflate") == data
    with pytest.raises(inpath.InpathError, match="pass format="):
        inpath.decompress(b"plain text")
    with pytest.raises(inpath.InpathError):
        inpath.compress(data, "rar")
    with pytest.raises(inpath.InpathError):
        inpath.decompress(inpath.compress(data, "zstd")[:-3])
    with pytest.raises(TypeError, match="bytes-like"):
        inpath.compress("a str is not bytes")

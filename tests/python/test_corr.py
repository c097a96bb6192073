"""inpath corr against numpy.corrcoef / numpy.cov / numpy.polyfit on files numpy writes.

Runs the release binary (scripts/test.sh builds it at target/release/inpath; INPATH_BIN
overrides). Integer types: inpath's statistics are exact, numpy computes in float64 with
centring, so both are within float rounding of the exact value and agree to ~1e-14. Float types:
inpath sums products in blocks of 64 rows and double-double across blocks; numpy centres first,
then sums; on data whose spread is not tiny against its mean they agree to ~1e-13.
"""

import json
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("INPATH_BIN", os.path.join(ROOT, "target", "release", "inpath"))


def corr(*args):
    out = subprocess.run([BIN, "corr", *map(str, args), "--json", "-q"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def upper(matrix):
    """The reference order: upper triangle without the diagonal, row by row."""
    i, j = np.triu_indices(matrix.shape[0], k=1)
    return matrix[i, j]


def assert_close(ours, theirs, rel):
    ours = np.array([np.nan if v is None else v for v in ours], dtype=float)
    np.testing.assert_allclose(ours, theirs, rtol=rel, atol=rel)


def correlated(rng, n, m, dtype):
    info = np.iinfo(dtype)
    base = rng.integers(0, info.max // 4 + 1, size=n, dtype=np.int64).astype(np.float64)
    out = np.empty((n, m), dtype=dtype)
    for s in range(m):
        noise = rng.integers(0, info.max // 4 + 1, size=n, dtype=np.int64).astype(np.float64)
        v = base * (s % 3) / 2 + noise * (1 + s % 4) / 4
        if s % 5 == 4:
            v = info.max - v if info.min == 0 else -v
        out[:, s] = np.clip(v, info.min, info.max).astype(dtype)
    return out


@pytest.mark.parametrize("dtype,name", [(np.uint8, "u8"), (np.uint16, "u16"), (np.uint32, "u32"), (np.int16, "i16"), (np.int32, "i32")])
def test_lines_layout_matches_numpy(tmp_path, dtype, name):
    rng = np.random.default_rng(42)
    m = 64 // np.dtype(dtype).itemsize
    data = correlated(rng, 50_000, m, dtype)
    path = tmp_path / "lines.bin"
    data.tofile(path)
    ours = corr(path, "--layout", "lines", "--type", name)
    assert ours["rows"] == data.shape[0] and ours["streams"] == m
    x = data.astype(np.float64)
    assert_close(ours["pearson"], upper(np.corrcoef(x, rowvar=False)), 1e-12)
    assert_close(ours["covariance"], upper(np.cov(x, rowvar=False)), 1e-12)
    np.testing.assert_allclose(ours["means"], x.mean(axis=0), rtol=1e-14)
    # numpy's own float64 std is off by up to ~3e-13 here (checked against exact fractions:
    # inpath's value, from exact integer sums, was the correctly rounded one).
    np.testing.assert_allclose(ours["std_devs"], x.std(axis=0, ddof=1), rtol=1e-12)


def test_rows_threads_and_regression_match_numpy(tmp_path):
    rng = np.random.default_rng(7)
    n, m = 20_000, 7
    data = correlated(rng, n, m, np.int32)
    path = tmp_path / "rows.bin"
    data.tofile(path)
    one = corr(path, "--layout", "rows", "--type", "i32", "--streams", m, "--stats")
    four = corr(path, "--layout", "rows", "--type", "i32", "--streams", m, "--stats", "-j", 4)
    assert one["statistics"] == four["statistics"]
    x = data.astype(np.float64)
    k = 0
    for i in range(m):
        for j in range(i + 1, m):
            slope, intercept = np.polyfit(x[:, i], x[:, j], 1)
            assert one["regression"]["slope"][k] == pytest.approx(slope, rel=1e-10)
            assert one["regression"]["intercept"][k] == pytest.approx(intercept, rel=1e-8, abs=1e-6 * abs(x[:, j]).mean())
            cos = x[:, i] @ x[:, j] / np.sqrt((x[:, i] @ x[:, i]) * (x[:, j] @ x[:, j]))
            assert one["cosine"][k] == pytest.approx(cos, rel=1e-13)
            k += 1
    # Exact integer statistics equal Python's big integers.
    ints = data.astype(object)
    assert one["statistics"]["sums"] == [str(sum(ints[:, s])) for s in range(m)]
    assert one["statistics"]["sums_of_products"][0] == str(sum(ints[:, 0] * ints[:, 1]))


@pytest.mark.parametrize("dtype,name", [(np.float64, "f64"), (np.float32, "f32")])
def test_float_columns_layout_matches_numpy(tmp_path, dtype, name):
    rng = np.random.default_rng(3)
    n, m = 30_000, 12
    base = rng.normal(size=n)
    data = np.stack([base * (s / m) + rng.normal(size=n) * (1 + s % 3) + 10 * s for s in range(m)]).astype(dtype)
    path = tmp_path / "cols.bin"
    data.tofile(path)  # stream after stream: column-major
    ours = corr(path, "--layout", "columns", "--type", name, "--streams", m)
    assert_close(ours["pearson"], upper(np.corrcoef(data.astype(np.float64))), 1e-12)


def test_csv_with_constant_column(tmp_path):
    rng = np.random.default_rng(5)
    n = 1000
    a = rng.normal(size=n)
    table = np.stack([a, 2 * a + rng.normal(size=n), np.full(n, 3.25), -a]).T
    path = tmp_path / "t.csv"
    np.savetxt(path, table, delimiter=",", header="a,b,flat,neg", comments="", fmt="%.17g")
    ours = corr(path)
    assert ours["names"] == ["a", "b", "flat", "neg"]
    expected = upper(np.corrcoef(table, rowvar=False))  # numpy gives NaN for the constant column
    assert_close(ours["pearson"], expected, 1e-12)
    assert ours["pearson"][2] == -1.0

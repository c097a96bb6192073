"""inpath.query.sql: SQL over column tables from Python, checked against the CLI and DuckDB's
pinned TPC-H answers."""

import csv
import os

import pytest

import inpath
import inpath.query

from conftest import ROOT, run_cli

pyarrow = pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def tpch(inpath_bin, tmp_path_factory):
    base = tmp_path_factory.mktemp("tpch")
    keys = base / "keys.txt"
    run_cli(inpath_bin, "seal", "keygen", "-o", str(keys))
    run_cli(inpath_bin, "query", "gen", "--sf", "0.01", str(base / "plain"), "--quiet")
    run_cli(inpath_bin, "query", "gen", "--sf", "0.01", str(base / "sealed"), "--quiet",
            "--tier", "lz4+aes256-gcm", "--key-file", str(keys), "--key-id", "1")
    return base, keys


def key_dict(keys_path):
    """The key file's keys as {id: bytes} (lines `key ID HEX`)."""
    out = {}
    for line in keys_path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "key":
            out[int(parts[1])] = bytes.fromhex(parts[2])
    return out


def test_q6_and_q1_equal_duckdbs_pinned_answers(tpch):
    base, keys = tpch
    answers = os.path.join(ROOT, "crates/inpath-query/tpch/answers/sf0.01")
    queries = os.path.join(ROOT, "crates/inpath-query/tpch/queries")
    for sub, ring in [("plain", None), ("sealed", key_dict(keys))]:
        for n in (1, 6):
            text = open(os.path.join(queries, f"q{n:02}.sql")).read()
            table = inpath.query.sql(base / sub, text, keys=ring, threads=2)
            assert isinstance(table, pyarrow.Table)
            with open(os.path.join(answers, f"q{n:02}.csv")) as f:
                rows = list(csv.reader(f))
            assert table.column_names == rows[0]
            assert table.num_rows == len(rows) - 1
            got = table.to_pylist()
            for row, expected in zip(got, rows[1:]):
                for name, value in zip(rows[0], expected):
                    ours = row[name]
                    if isinstance(ours, float):
                        assert ours == pytest.approx(float(value), rel=1e-9), (n, name)
                    else:
                        # Decimals compare as numbers; integers and strings as text.
                        assert str(ours) == value or float(ours) == float(value), (n, name, ours, value)


def test_result_matches_the_cli_and_converts_to_pandas(tpch, inpath_bin):
    base, _ = tpch
    text = "SELECT n_regionkey, count(*) AS n FROM nation GROUP BY n_regionkey ORDER BY n_regionkey"
    table = inpath.query.sql(base / "plain", text)
    cli = run_cli(inpath_bin, "query", "sql", str(base / "plain"), "--csv", text).stdout.decode()
    lines = cli.strip().splitlines()
    assert lines[0] == "n_regionkey,n"
    assert [f"{r['n_regionkey']},{r['n']}" for r in table.to_pylist()] == lines[1:]
    frame = table.to_pandas()
    assert list(frame["n"]) == [5, 5, 5, 5, 5]


def test_bad_input_raises_inpath_error_naming_the_problem(tpch, tmp_path):
    base, _ = tpch
    with pytest.raises(inpath.InpathError, match="nope"):
        inpath.query.sql(base / "plain", "SELECT nope FROM nation")
    with pytest.raises(inpath.InpathError, match="missing"):
        inpath.query.sql(base / "plain", "SELECT * FROM missing")
    with pytest.raises(inpath.InpathError, match="does not unseal|key"):
        inpath.query.sql(base / "sealed", "SELECT * FROM nation")
    with pytest.raises(inpath.InpathError, match="no column tables"):
        inpath.query.sql(tmp_path, "SELECT 1")
    with pytest.raises(inpath.InpathError, match="threads"):
        inpath.query.sql(base / "plain", "SELECT 1", threads=0)


def test_offload_gives_the_same_tables_and_falls_back_on_a_small_device(tpch):
    base, keys = tpch
    queries = os.path.join(ROOT, "crates/inpath-query/tpch/queries")
    for sub, ring in [("plain", None), ("sealed", key_dict(keys))]:
        # Q1 (an aggregate), Q3 (joins and TOPK), Q10 (TOPK over customers' groups).
        for n in (1, 3, 10):
            text = open(os.path.join(queries, f"q{n:02}.sql")).read()
            off = inpath.query.sql(base / sub, text, keys=ring, threads=2)
            on = inpath.query.sql(base / sub, text, keys=ring, threads=2, offload=True)
            assert on.column_names == off.column_names and on.num_rows == off.num_rows
            for a, b in zip(on.to_pylist(), off.to_pylist()):
                for name in off.column_names:
                    if isinstance(b[name], float):
                        # The device averages exact sums; the host adds doubles in its order.
                        assert a[name] == pytest.approx(b[name], rel=1e-12), (sub, n, name)
                    else:
                        assert a[name] == b[name], (sub, n, name)
    # Orders' rows outgrow a 300 KiB device: the host runs the plan, with the same answer.
    text = open(os.path.join(queries, "q03.sql")).read()
    small = inpath.query.sql(base / "plain", text, threads=2, offload=True, device_memory=300 << 10)
    assert small.equals(inpath.query.sql(base / "plain", text, threads=2))
    with pytest.raises(inpath.InpathError, match="offload=True"):
        inpath.query.sql(base / "plain", "SELECT 1", device_memory=1 << 20)
    with pytest.raises(inpath.InpathError, match="at least 1 byte"):
        inpath.query.sql(base / "plain", "SELECT 1", offload=True, device_memory=0)

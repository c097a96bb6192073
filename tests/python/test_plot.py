"""bench/plot.py: the three charts from a run directory, and a clear refusal (naming the file)
of a run file it cannot draw from. Standard library and pytest only."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLOT = os.path.join(ROOT, "bench", "plot.py")
SVG = "{http://www.w3.org/2000/svg}"


def setup(**extra):
    return dict({"cpu": "Test CPU (family 1 model 2)", "cpu_flags": ["avx2"], "isa_cap": "none", "cores": 2,
                 "python": "3.11.0", "date": "2026-01-02 03:04:05"}, **extra)


def report_row(name, nbytes, ours_s, peer, peer_s, unit=None):
    row = {"measurement": name, "bytes": nbytes, "inpath_s": ours_s, "inpath_gb_s": nbytes / ours_s / 1e9,
           "peer": peer, "peer_s": peer_s, "peer_gb_s": nbytes / peer_s / 1e9 if peer_s else None,
           "ratio": peer_s / ours_s if peer_s else None, "extra": {}}
    if unit:
        row["unit"] = unit
    return row


def write(directory, name, obj):
    path = directory / f"{name}.json"
    path.write_text(json.dumps(obj, indent=2))
    return path


def offload_rows():
    rows = []
    for threads in (1, 2):
        for q in range(1, 23):
            rows.append({"query": q, "threads": threads, "class": "full",
                         "offload_off_s": 0.1 * q / threads, "offload_on_s": 0.01 * q / threads,
                         "duckdb_file_s": 0.05 * q / threads, "offload_sealed_s": 0.012 * q})
    return rows


def make_run(directory):
    """A run directory with sketch (Report rows), cache (cache.py's rows), store (a row in
    another unit), sketch-accuracy and query files; corr, seal and the rest are absent."""
    directory.mkdir(parents=True, exist_ok=True)
    nbytes = 400_000_000
    write(directory, "sketch", {"engine": "sketch", "schema": 1, "setup": setup(items=100_000_000), "rows": [
        {"note": "exact distinct items: 98,844,000"},
        report_row("HLL alone, 1 thread", nbytes, 0.25, "DuckDB", 0.3975),
        report_row("HLL alone, 1 thread", nbytes, 0.25, "DataSketches", 4.75),
        report_row("all three, 1 thread", nbytes, 0.80, "DuckDB (HLL only)", 0.3975),
        report_row("Fast-AGMS alone, 1 thread", nbytes, 0.5, "(no peer)", None),
    ]})
    write(directory, "cache", {"engine": "cache", "schema": 1, "setup": setup(), "rows": [
        {"measurement": "(1) DRAM working set: server CPU per 1000 ops", "inpath": 17.4, "peer": "memcached",
         "peer_value": 17.5, "unit": "us", "ratio_in_inpath_favour": 17.5 / 17.4, "extra": {}},
        {"measurement": "(2) 10x DRAM: end-to-end requests/s", "inpath": 24600.0, "peer": "memcached",
         "peer_value": 21200.0, "unit": "req/s", "ratio_in_inpath_favour": 24600 / 21200, "extra": {}},
    ]})
    write(directory, "store", {"engine": "store", "schema": 1, "setup": setup(), "rows": [
        report_row("bfs rmat raw t1 vs scipy", 16_000_000, 0.1069, "scipy 1.15", 0.0874, unit="M edges/s"),
    ]})
    write(directory, "sketch-accuracy", {"engine": "sketch-accuracy", "schema": 1,
                                          "setup": setup(hll_p=16, theoretical_rel_std_error=0.0040625,
                                                         peer="DuckDB 2.0.1 approx_count_distinct, 1 thread"),
                                          "rows": [{"note": "P = 16"}] + [
        {"measurement": f"HLL relative error, {n:,} items", "cardinality": n, "seeds": [1, 2, 3],
         "exact": [n] * 3, "inpath_rel_error": [0.001, -0.002, 0.0005],
         "duckdb_rel_error": [0.03, -0.01, 0.05]} for n in (1000, 10_000, 100_000, 1_000_000, 10_000_000)]})
    write(directory, "query", {"engine": "query", "schema": 1, "setup": setup(data="TPC-H SF 1 (tpchgen 4.0)"),
                               "rows": [{"query": 1, "threads": 2, "plain_s": 0.4, "sealed_s": 0.4,
                                         "bytes_read": 1, "datafusion_parquet_s": 0.4, "duckdb_file_s": 0.07,
                                         "duckdb_parquet_s": 0.2},
                                        {"query": "total", "threads": 2, "plain_s": 3.7}] + offload_rows()})
    # A run file no chart reads still has to be a run file.
    write(directory, "cache-seal", {"engine": "cache-seal", "schema": 1, "setup": setup(),
                                    "rows": [{"measurement": "miss ratio", "plain": 0.02, "sealed": 0.03}]})
    return directory


def plot(*args):
    return subprocess.run([sys.executable, PLOT, *map(str, args)], capture_output=True, text=True)


def svg_text(path):
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    return "\n".join("".join(el.itertext()) for el in root.iter(f"{SVG}text")), root


def test_three_charts_from_a_run(tmp_path):
    run = make_run(tmp_path / "runs" / "2026-01-02-test-cpu")
    out = tmp_path / "img"
    result = plot(run, "-o", out)
    assert result.returncode == 0, result.stderr
    # Absent engines are left out, and said so.
    assert "corr.json absent" in result.stderr and "seal.json absent" in result.stderr
    assert "headline measurements" not in result.stderr  # each file's rows matched its patterns

    texts, root = svg_text(out / "throughput.svg")
    assert "(no peer)" not in texts
    assert "HLL alone, 1 thread" in texts and "all three, 1 thread" in texts
    assert "1.59\u00d7" in texts and "19.00\u00d7" in texts  # peer time / inpath time
    assert "1.60 GB/s" in texts and "DuckDB" in texts and "DataSketches" in texts
    assert "Fast-AGMS" not in texts  # no peer figure: not drawn
    assert "cache \u2014 us (lower is better)" in texts and "cache \u2014 req/s" in texts
    assert "store \u2014 M edges/s" in texts and "0.82\u00d7" in texts
    assert "Test CPU (family 1 model 2)" in texts and "2026-01-02" in texts and "2026-01-02-test-cpu" in texts
    assert len(root.findall(f".//{SVG}rect")) >= 2 * 6

    texts, root = svg_text(out / "hll-error.svg")
    assert "P = 16" in texts and "\u00b10.406 %" in texts and "10^3" in texts and "10^7" in texts
    assert "DuckDB 2.0.1" in texts
    titles = [el.text for el in root.iter(f"{SVG}title")]
    assert "inpath, 1,000 distinct: +0.100 %" in titles
    assert "DuckDB, 10,000,000 distinct: +5.000 %" in titles
    assert len(root.findall(f".//{SVG}circle")) >= 2 * 5 * 3

    texts, root = svg_text(out / "tpch.svg")
    assert "Q1" in texts and "Q22" in texts and "2 thread(s)" in texts
    titles = [el.text for el in root.iter(f"{SVG}title")]
    assert "Q22, inpath, offload: 0.1100 s" in titles  # the largest thread count by default
    assert "Q3, DuckDB, its own file: 0.0750 s" in titles
    assert "Q1, inpath, no offload: 0.0500 s" in titles
    assert sum(1 for t in titles if t.startswith("Q")) == 66

    # Deterministic: the same input gives the same bytes.
    first = {n: (out / n).read_bytes() for n in ("throughput.svg", "hll-error.svg", "tpch.svg")}
    again = tmp_path / "img2"
    assert plot(run, "-o", again, "--threads", "2").returncode == 0
    for name, data in first.items():
        assert (again / name).read_bytes() == data

    one = tmp_path / "img1"
    assert plot(run, "-o", one, "--charts", "tpch", "--threads", "1").returncode == 0
    assert not (one / "hll-error.svg").exists()
    assert "Q22, inpath, offload: 0.2200 s" in [el.text for el in ET.parse(one / "tpch.svg").getroot().iter(f"{SVG}title")]


def test_unknown_measurements_fall_back_to_the_first_rows(tmp_path):
    run = make_run(tmp_path / "run")
    rows = [report_row(f"renamed measurement {i}", 1_000_000, 0.001 * (i + 1), "peer", 0.002) for i in range(8)]
    write(run, "wire", {"engine": "wire", "schema": 1, "setup": setup(), "rows": rows})
    result = plot(run, "-o", tmp_path / "img", "--charts", "throughput")
    assert result.returncode == 0, result.stderr
    assert "wire.json: none of the headline measurements found" in result.stderr
    texts, _ = svg_text(tmp_path / "img" / "throughput.svg")
    assert "renamed measurement 5" in texts and "renamed measurement 6" not in texts


def test_offload_only_file_is_read(tmp_path):
    run = make_run(tmp_path / "run")
    os.rename(run / "query.json", run / "query-offload.json")
    result = plot(run, "-o", tmp_path / "img", "--charts", "tpch")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "img" / "tpch.svg").exists()


@pytest.mark.parametrize("name, content, expected", [
    ("sketch", "{\"engine\": \"sketch\", \"setup\": ", "not valid JSON"),
    ("corr", "[1, 2, 3]", "not a run file"),
    ("corr", json.dumps({"engine": "corr", "rows": []}), "lacks \"setup\""),
    ("corr", json.dumps({"engine": "corr", "setup": setup()}), "lacks \"rows\""),
    ("corr", json.dumps({"engine": "corr", "setup": {"cpu": "x"}, "rows": []}), "setup lacks \"date\""),
    ("corr", json.dumps({"engine": "corr", "schema": 2, "setup": setup(), "rows": []}), "schema 2"),
    ("io", json.dumps({"engine": "io", "setup": setup(), "rows": [{"measurement": "x", "peer": "y", "inpath_s": 1}]}),
     "rows[0] lacks \"inpath_gb_s\""),
    ("wire", json.dumps({"engine": "wire", "setup": setup(), "rows": [{"note": "nothing measured"}]}),
     "no row compares inpath with a peer"),
])
def test_a_bad_file_fails_naming_it(tmp_path, name, content, expected):
    run = make_run(tmp_path / "run")
    (run / f"{name}.json").write_text(content)
    out = tmp_path / "img"
    result = plot(run, "-o", out)
    assert result.returncode != 0
    assert f"{name}.json" in result.stderr and expected in result.stderr, result.stderr
    assert not out.exists()  # nothing is written when any input is bad


def test_missing_chart_fields_fail_naming_the_file(tmp_path):
    run = make_run(tmp_path / "run")
    acc = json.loads((run / "sketch-accuracy.json").read_text())
    del acc["setup"]["hll_p"]
    write(run, "sketch-accuracy", acc)
    result = plot(run, "-o", tmp_path / "img")
    assert result.returncode != 0
    assert "sketch-accuracy.json" in result.stderr and "hll_p" in result.stderr

    run = make_run(tmp_path / "run2")
    acc = json.loads((run / "sketch-accuracy.json").read_text())
    acc["rows"][2]["duckdb_rel_error"] = "n/a"
    write(run, "sketch-accuracy", acc)
    result = plot(run, "-o", tmp_path / "img")
    assert result.returncode != 0
    assert "sketch-accuracy.json" in result.stderr and "rows[2] \"duckdb_rel_error\"" in result.stderr

    run = make_run(tmp_path / "run3")
    query = json.loads((run / "query.json").read_text())
    del query["rows"][5]["duckdb_file_s"]
    write(run, "query", query)
    result = plot(run, "-o", tmp_path / "img")
    assert result.returncode != 0
    assert "query.json" in result.stderr and "rows[5] lacks \"duckdb_file_s\"" in result.stderr

    run = make_run(tmp_path / "run4")
    query = json.loads((run / "query.json").read_text())
    query["rows"] = [r for r in query["rows"] if not (r.get("query") == 7 and r.get("threads") == 2)]
    write(run, "query", query)
    result = plot(run, "-o", tmp_path / "img")
    assert result.returncode != 0
    assert "query.json" in result.stderr and "lack queries [7]" in result.stderr


def test_a_chart_without_input_fails(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "sketch-accuracy.json").unlink()
    result = plot(run, "-o", tmp_path / "img", "--charts", "hll")
    assert result.returncode != 0 and "sketch-accuracy.json is absent" in result.stderr

    query = json.loads((run / "query.json").read_text())
    query["rows"] = [r for r in query["rows"] if "offload_on_s" not in r]
    write(run, "query", query)
    result = plot(run, "-o", tmp_path / "img", "--charts", "tpch")
    assert result.returncode != 0 and "query.json" in result.stderr and "no offload rows" in result.stderr

    for name in ("sketch", "cache", "store"):
        (run / f"{name}.json").unlink()
    result = plot(run, "-o", tmp_path / "img", "--charts", "throughput")
    assert result.returncode != 0 and "no input for throughput.svg" in result.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    result = plot(empty, "-o", tmp_path / "img")
    assert result.returncode != 0 and "no input" in result.stderr


def test_cache_scale_chart_only_when_asked(tmp_path):
    run = make_run(tmp_path / "run")
    rows = []
    for mib, held, zipf, uni in ((1024, (48e6, 4.9e6), (0.99, 0.13), (0.97, 0.10)),
                                 (4096, (50e6, 19e6), (1.0, 0.5), (1.0, 0.38))):
        for name, (ours, peer) in ((f"[{mib} MiB] items held", held),
                                   (f"[{mib} MiB] gets Zipf .99, 4 conns: hit ratio", zipf),
                                   (f"[{mib} MiB] gets uniform, 4 conns: hit ratio", uni)):
            rows.append({"measurement": name, "inpath": ours, "peer": "memcached", "peer_value": peer,
                         "unit": "", "ratio_in_inpath_favour": ours / peer, "extra": {}})
    write(run, "cache-scale", {"engine": "cache", "schema": 1,
                               "setup": setup(peer="memcached 1.6.18 with extstore", items=50_000_000),
                               "rows": rows})
    result = plot(run, "-o", tmp_path / "img")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "img" / "cache-scale.svg").exists(), "not a default chart"
    result = plot(run, "-o", tmp_path / "img", "--charts", "cache-scale")
    assert result.returncode == 0, result.stderr
    tree = ET.parse(tmp_path / "img" / "cache-scale.svg")
    titles = [t.text for t in tree.iter(f"{SVG}title")]
    assert "inpath 1024 MiB: 48.0 M items" in titles and "memcached 4096 MiB: 19.0 M items" in titles
    assert "memcached 1024 MiB: 13.0 %" in titles, titles
    (run / "cache-scale.json").unlink()
    result = plot(run, "-o", tmp_path / "img", "--charts", "cache-scale")
    assert result.returncode != 0 and "no cache-scale.json" in result.stderr

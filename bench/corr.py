#!/usr/bin/env python3
"""Benchmark of the corr engine (AMNES exact Pearson) against numpy, pandas and DuckDB.

    bash bench/setup.sh && .venv/bin/python bench/corr.py [--quick]

Data (generated here with numpy, written to bench/out/data/ where inpath-bench reads it):
  16 x 2 M u32, 32 x 2 M u16 and 64 x 2 M u8 (the reference's 64-byte lines, 128 MiB each), and
  1024 streams x 100 K f64 (800 MiB).
Ours: every Pearson coefficient from exact statistics, in-process (inpath-bench), 1 and 2 threads.
Peers on the same data in the same run: numpy.corrcoef (rowvar=False), pandas.DataFrame.corr,
and DuckDB's corr() with every pair in one query (the table already loaded in DuckDB).
Targets (issue 3, AVX-512): 16 x 2 M u32 in <= 30 ms on one core and >= 20x numpy.corrcoef;
64 x 2 M u8 in <= 15 ms on two cores. Targets (issue 11, AVX2-only CPUs): 16 x 2 M u32 >= 4x
numpy.corrcoef on one thread, 64 x 2 M u8 >= 10x on one thread, 1024 x 100 K f64 >= 1.0x with
two threads. The kernel that ran is recorded with every figure; `--portable` also times the
portable (INPATH_ISA=portable) kernels in the same run, and INPATH_ISA=avx2 in the environment
caps the whole run at the AVX2 kernels.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import OUT, Report, build, need, run_ours, time_median  # noqa: E402

np = need("numpy")
pd = need("pandas")
duckdb = need("duckdb")

DATA = os.path.join(OUT, "data")


def generate(path, rows, streams, dtype, seed):
    """Correlated streams: a shared signal plus independent noise of growing weight."""
    if os.path.exists(path) and os.path.getsize(path) == rows * streams * np.dtype(dtype).itemsize:
        return
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        top = np.iinfo(dtype).max
        signal = rng.integers(0, top // 2 + 1, size=rows, dtype=np.uint64)
        data = np.empty((rows, streams), dtype=dtype)
        for s in range(streams):
            noise = rng.integers(0, top // 2 + 1, size=rows, dtype=np.uint64)
            w = s % 4
            data[:, s] = ((signal * (3 - w) + noise * (w + 1)) // 4).astype(dtype)
    else:
        signal = rng.normal(size=rows)
        data = np.empty((rows, streams), dtype=dtype)
        for s in range(streams):
            data[:, s] = signal * (s % 7) / 7 + rng.normal(size=rows) + s
    data.tofile(path)


def load(path, rows, streams, dtype):
    return np.fromfile(path, dtype=dtype).reshape(rows, streams)


def duckdb_all_pairs(data):
    con = duckdb.connect()
    frame = pd.DataFrame(data, columns=[f"c{i}" for i in range(data.shape[1])])
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    m = data.shape[1]
    pairs = ", ".join(f"corr(c{i}, c{j})" for i in range(m) for j in range(i + 1, m))
    query = f"SELECT {pairs} FROM t"
    return lambda: con.execute(query).fetchall()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and no 1024-stream case")
    parser.add_argument("--no-build", action="store_true", help="use the release binaries as they are")
    parser.add_argument("--portable", action="store_true", help="also time the portable kernels (INPATH_ISA=portable)")
    parser.add_argument("--only", default=None, help="run only the cases whose label contains this text")
    args = parser.parse_args()
    if not args.no_build:
        build()
    os.makedirs(DATA, exist_ok=True)
    reps = 3 if args.quick else 7
    peer_reps = 2 if args.quick else 5
    report = Report("corr", {"reps": reps, "peer_reps": peer_reps, "numpy": np.__version__, "pandas": pd.__version__, "duckdb": duckdb.__version__})
    cases = [
        ("16 x 2M u32", 2 << 20, 16, np.uint32, "u32"),
        ("32 x 2M u16", 2 << 20, 32, np.uint16, "u16"),
        ("64 x 2M u8", 2 << 20, 64, np.uint8, "u8"),
    ]
    if not args.quick:
        cases.append(("1024 x 100K f64", 100_000, 1024, np.float64, "f64"))
    if args.only:
        cases = [c for c in cases if args.only in c[0]]
    for label, rows, streams, dtype, tname in cases:
        path = os.path.join(DATA, f"corr-{tname}-{streams}x{rows}.bin")
        generate(path, rows, streams, dtype, seed=streams)
        size = os.path.getsize(path)
        ours = run_ours(["corr", "--data", path, "--type", tname, "--streams", str(streams), "--threads", "1,2", "--reps", str(reps)])
        if args.portable:
            saved = os.environ.get("INPATH_ISA")
            os.environ["INPATH_ISA"] = "portable"
            try:
                port = run_ours(["corr", "--data", path, "--type", tname, "--streams", str(streams), "--threads", "1,2", "--reps", str(max(1, reps // 2)), "--label", "portable: "])
            finally:
                if saved is None:
                    del os.environ["INPATH_ISA"]
                else:
                    os.environ["INPATH_ISA"] = saved
            for m in port:
                m["extra"]["portable"] = True
            ours = ours + port
        data = load(path, rows, streams, dtype)
        np_s, _, np_r = time_median(lambda: np.corrcoef(data, rowvar=False), reps=peer_reps)
        expected = float(np.nansum(np_r[np.triu_indices(streams, 1)]))
        peers = [("numpy.corrcoef", np_s)]
        big = streams > 100
        if not big:
            frame = pd.DataFrame(data)
            pd_s, _, _ = time_median(lambda: frame.corr(), reps=max(1, peer_reps - 2), warmup=0)
            peers.append(("pandas.corr", pd_s))
            query = duckdb_all_pairs(data)
            dk_s, _, _ = time_median(query, reps=max(1, peer_reps - 2), warmup=1)
            peers.append(("duckdb corr()", dk_s))
        for m in ours:
            threads = m["extra"]["threads"]
            prefix = "portable: " if m["extra"].get("portable") else ""
            agree = abs(m["extra"]["sum_of_r"] - expected) <= 1e-9 * max(1.0, abs(expected))
            for peer, peer_s in peers:
                report.add(
                    f"{prefix}{label}, {threads} thread(s)",
                    size,
                    m["median_s"],
                    peer,
                    peer_s,
                    extra={"threads": threads, "kernel": m["extra"].get("kernel"), "samples": m["samples"], "sum_of_r_matches_numpy": agree},
                )
            if not agree:
                report.note(f"{label}: sum of r {m['extra']['sum_of_r']} differs from numpy's {expected}")
        if big:
            report.note(f"{label}: pandas.corr and DuckDB skipped (523,776 pairs: minutes for pandas, one aggregate per pair for DuckDB)")
    for label, target_s, threads, case in [("16 x 2M u32", 0.030, 1, "16 x 2M u32"), ("64 x 2M u8", 0.015, 2, "64 x 2M u8")]:
        rows = [r for r in report.rows if r.get("measurement") == f"{case}, {threads} thread(s)" and r.get("peer") == "numpy.corrcoef"]
        if rows:
            r = rows[0]
            met = "met" if r["inpath_s"] <= target_s else "NOT met"
            extra = f", {r['ratio']:.1f}x numpy.corrcoef (target 20x)" if threads == 1 else ""
            report.note(f"target {label} <= {target_s * 1e3:.0f} ms on {threads} core(s): {r['inpath_s'] * 1e3:.1f} ms, {met}{extra}")
    rows = [r for r in report.rows if r.get("measurement") == "16 x 2M u32, 2 thread(s)" and r.get("peer") == "numpy.corrcoef"]
    if rows:
        report.note(f"16 x 2M u32 on 2 cores: {rows[0]['inpath_s'] * 1e3:.1f} ms, {rows[0]['ratio']:.1f}x numpy.corrcoef")
    for label, target, threads in [("16 x 2M u32", 4.0, 1), ("64 x 2M u8", 10.0, 1), ("1024 x 100K f64", 1.0, 2)]:
        rows = [r for r in report.rows if r.get("measurement") == f"{label}, {threads} thread(s)" and r.get("peer") == "numpy.corrcoef"]
        if rows:
            r = rows[0]
            met = "met" if r["ratio"] >= target else "NOT met"
            report.note(f"issue 11 target {label}, {threads} thread(s): {r['ratio']:.2f}x numpy.corrcoef (target {target:.1f}x, kernel {r['extra'].get('kernel')}): {met}")
    report.save()


if __name__ == "__main__":
    main()

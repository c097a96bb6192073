#!/usr/bin/env python3
"""Sketch engine benchmark: inpath next to DuckDB and Apache DataSketches on the same data.

Data: 100 M uniform random u32 items (numpy, seed 42), 400 MB in memory. inpath is timed
in-process by `inpath-bench sketch` (no process start-up or file I/O in the timed region);
DuckDB runs `approx_count_distinct` on a native table (its best case), at 1 and 2 threads;
DataSketches' Python API takes one item per call, so it runs on a 10 M-item prefix.

Accuracy (`--accuracy` runs only this; a full run ends with it unless --no-accuracy): inpath's
HyperLogLog (the Python package's `inpath.Sketch(sketches="hll")`, P = 16, Ertl's estimator)
and DuckDB's `approx_count_distinct` (1 thread) on the same n u64 items, n = 10^3 to 10^7, for
seeds 1-5: splitmix64's finaliser over seed * 2^40 + 0..n-1, a bijection of u64, so the items
look uniformly random and are all distinct (the exact count is n by construction). Each
estimate's relative error against n is saved as sketch-accuracy.json beside the other run
files, with the precision P and the theoretical standard error 1.04/sqrt(2^P). A few seconds.

Usage: bash bench/setup.sh && .venv/bin/python bench/sketch.py [--items N] [--reps R]
       .venv/bin/python bench/sketch.py --accuracy [--accuracy-seeds 5]   (needs pip install ./python)
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=100_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--datasketches-items", type=int, default=10_000_000)
    parser.add_argument("--accuracy", action="store_true",
                        help="only the HyperLogLog accuracy sweep (no build, no DataSketches)")
    parser.add_argument("--no-accuracy", action="store_true", help="skip the accuracy sweep of a full run")
    parser.add_argument("--accuracy-seeds", type=int, default=5, help="data seeds per cardinality (default 5)")
    args = parser.parse_args()
    if args.accuracy:
        accuracy(args.accuracy_seeds, required=True)
        return

    np = common.need("numpy")
    duckdb = common.need("duckdb")
    datasketches = common.need("datasketches")
    common.build()

    n = args.items
    data = np.random.default_rng(42).integers(0, 2**32, n, dtype=np.uint32)
    os.makedirs(common.OUT, exist_ok=True)
    path = os.path.join(common.OUT, "sketch-u32.bin")
    data.tofile(path)
    nbytes = data.nbytes

    report = common.Report("sketch", {"items": n, "bytes": nbytes, "data": "uniform random u32, numpy seed 42"})
    ours = {m["name"]: m for m in common.run_ours(["sketch", "--data", path, "--threads", "1,2", "--reps", str(args.reps)])}
    exact = ours["all three, fast, 1 thread(s)"]["extra"]["exact_distinct"]
    report.note(f"exact distinct items: {exact:,}")

    # DuckDB approx_count_distinct on a native table.
    con = duckdb.connect()
    con.register("arr", {"x": data})
    con.execute("CREATE TABLE t AS SELECT x FROM arr")
    duck = {}
    for threads in (1, 2):
        con.execute(f"SET threads = {threads}")
        seconds, _, estimate = common.time_median(
            lambda: con.execute("SELECT approx_count_distinct(x) FROM t").fetchone()[0], reps=args.reps
        )
        duck[threads] = (seconds, estimate)
        report.note(f"DuckDB {duckdb.__version__} approx_count_distinct, {threads} thread(s): estimate {estimate:,} "
                    f"({(estimate - exact) / exact * 100:+.3f}%)")

    # DataSketches: per-item Python calls on a prefix.
    m = min(args.datasketches_items, n)
    prefix = data[:m].tolist()

    def ds_hll():
        sketch = datasketches.hll_sketch(16, datasketches.tgt_hll_type.HLL_8)
        for v in prefix:
            sketch.update(v)
        return sketch.get_estimate()

    def ds_cm():
        sketch = datasketches.count_min_sketch(6, 8192)
        for v in prefix:
            sketch.update(v)
        return sketch.total_weight

    reps_ds = max(1, min(args.reps, 3))
    ds_hll_s, _, ds_estimate = common.time_median(ds_hll, reps=reps_ds, warmup=0)
    ds_cm_s, _, _ = common.time_median(ds_cm, reps=reps_ds, warmup=0)
    ds_scale = n / m  # DataSketches time extrapolated linearly to the full data set
    report.note(f"DataSketches hll_sketch(lg_k=16, HLL_8) on the first {m:,} items: estimate {ds_estimate:,.0f}; "
                f"its times below are scaled x{ds_scale:g} to {n:,} items")

    def ours_s(name):
        return ours[name]["median_s"]

    hll_err = ours["HLL alone, fast, 1 thread(s)"]["extra"]["hll_relative_error"]
    report.note(f"inpath HLL (P=16, Ertl estimator) relative error: {hll_err * 100:+.3f}%")
    report.add("HLL alone, 1 thread", nbytes, ours_s("HLL alone, fast, 1 thread(s)"), "DuckDB", duck[1][0])
    report.add("HLL alone, 1 thread", nbytes, ours_s("HLL alone, fast, 1 thread(s)"), "DataSketches", ds_hll_s * ds_scale)
    report.add("all three, 1 thread", nbytes, ours_s("all three, fast, 1 thread(s)"), "DuckDB (HLL only)", duck[1][0])
    report.add("all three, 2 threads", nbytes, ours_s("all three, fast, 2 thread(s)"), "DuckDB (HLL only)", duck[2][0])
    report.add("Count-Min alone, 1 thread", nbytes, ours_s("Count-Min alone, fast, 1 thread(s)"), "DataSketches", ds_cm_s * ds_scale)
    report.add("Fast-AGMS alone, 1 thread", nbytes, ours_s("Fast-AGMS alone, fast, 1 thread(s)"), "(no peer)", None)
    report.add("all three, compat hash, 1 thread", nbytes, ours_s("all three, compat, 1 thread(s)"), "DuckDB (HLL only)", duck[1][0])
    report.add("hash only (XXH3-128), 1 thread", nbytes, ours_s("hash only, fast, 1 thread(s)"), "(no peer)", None)
    one, two = ours_s("all three, fast, 1 thread(s)"), ours_s("all three, fast, 2 thread(s)")
    report.note(f"2 threads / 1 thread (all three): {one / two:.2f}x")
    report.note(f"state per lane: {ours['all three, fast, 1 thread(s)']['extra']['state_bytes_per_lane']:,} bytes")
    report.note(f"targets (issue 45): all three >= 0.6 GB/s per core on AVX-512, >= 0.5 on AVX2: {ours['all three, fast, 1 thread(s)']['gb_per_s']:.2f} GB/s; "
                f"HLL alone >= 2x DuckDB per core: {duck[1][0] / ours_s('HLL alone, fast, 1 thread(s)'):.2f}x")
    report.save()
    os.remove(path)
    if not args.no_accuracy:
        accuracy(args.accuracy_seeds, required=False)


CARDINALITIES = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)


def distinct_items(np, n, seed):
    """n distinct, random-looking u64 values: splitmix64's finaliser (xor-shifts and odd
    multipliers, each invertible mod 2^64) over seed * 2^40 + 0..n-1 (n < 2^40)."""
    x = np.arange(n, dtype=np.uint64) + np.uint64(seed << 40)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def accuracy(seeds, required):
    """inpath's HLL and DuckDB's approx_count_distinct against the exact distinct count, per
    cardinality and data seed; saved as the run file sketch-accuracy.json."""
    np = common.need("numpy")
    duckdb = common.need("duckdb")
    try:
        import inpath
    except ImportError:
        if required:
            sys.exit("bench: the inpath Python package is missing (.venv/bin/pip install ./python)")
        print("# accuracy sweep skipped: the inpath Python package is missing (.venv/bin/pip install ./python)")
        return
    params = inpath.Sketch(sketches="hll", kind="u64").summary()["params"]
    p = params["hll_p"]
    std_error = 1.04 / math.sqrt(2**p)
    report = common.Report("sketch-accuracy", {
        "data": "n distinct u64: splitmix64 finaliser of seed * 2^40 + 0..n-1 (a bijection, exact count n)",
        "inpath": f"inpath.Sketch(sketches='hll') {getattr(inpath, '__version__', '')}".strip()
                  + f", hash {params['hash_algorithm']}, estimator ertl",
        "peer": f"DuckDB {duckdb.__version__} approx_count_distinct, 1 thread",
        "hll_p": p,
        "theoretical_rel_std_error": std_error,
        "theoretical_formula": "1.04 / sqrt(2^P)",
        "cardinalities": list(CARDINALITIES),
        "seeds": list(range(1, seeds + 1)),
    })
    report.note(f"inpath HLL precision P = {p}: theoretical relative standard error "
                f"1.04/sqrt(2^{p}) = {std_error * 100:.3f} %")
    con = duckdb.connect()
    con.execute("SET threads = 1")
    for n in CARDINALITIES:
        row = {"measurement": f"HLL relative error, {n:,} items", "cardinality": n, "seeds": [], "exact": [],
               "inpath_estimate": [], "inpath_rel_error": [], "duckdb_estimate": [], "duckdb_rel_error": []}
        for seed in range(1, seeds + 1):
            data = distinct_items(np, n, seed)
            exact = n
            sketch = inpath.Sketch(sketches="hll")
            sketch.update(data)
            ours = float(sketch.cardinality())
            con.register("arr", {"x": data})
            duck = int(con.execute("SELECT approx_count_distinct(x) FROM arr").fetchall()[0][0])
            con.unregister("arr")
            row["seeds"].append(seed)
            row["exact"].append(exact)
            row["inpath_estimate"].append(ours)
            row["inpath_rel_error"].append((ours - exact) / exact)
            row["duckdb_estimate"].append(duck)
            row["duckdb_rel_error"].append((duck - exact) / exact)
        for who in ("inpath", "duckdb"):
            errors = row[f"{who}_rel_error"]
            row[f"{who}_mean_rel_error"] = sum(errors) / len(errors)
            row[f"{who}_max_abs_rel_error"] = max(abs(e) for e in errors)
        report.rows.append(row)
        print(f"{n:>12,} distinct: inpath mean {row['inpath_mean_rel_error'] * 100:+7.3f} % "
              f"(worst {row['inpath_max_abs_rel_error'] * 100:6.3f} %) | DuckDB mean "
              f"{row['duckdb_mean_rel_error'] * 100:+7.3f} % (worst {row['duckdb_max_abs_rel_error'] * 100:6.3f} %) "
              f"| {seeds} seeds", flush=True)
    report.save()


if __name__ == "__main__":
    main()

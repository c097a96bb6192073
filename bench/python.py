#!/usr/bin/env python3
"""Python package benchmark: `inpath` next to the tools Python users reach for, on the same
arrays in one run.

- Sketch.update on a NumPy uint32 array vs DataSketches' per-item Python loop (hll_sketch) and
  DuckDB's approx_count_distinct over the same NumPy array (queried in place, as a Python user
  would), 1 thread each;
- the Python call overhead: Sketch.update against the Rust figure (`inpath-bench`, in-process)
  for the same data.

Usage: bash bench/setup.sh && .venv/bin/pip install ./python && .venv/bin/python bench/python.py
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--datasketches-items", type=int, default=2_000_000)
    args = parser.parse_args()

    np = common.need("numpy")
    duckdb = common.need("duckdb")
    datasketches = common.need("datasketches")
    inpath = common.need("inpath", "run: .venv/bin/pip install ./python")
    common.build()

    n = args.items
    data = np.random.default_rng(7).integers(0, 2**32, n, dtype=np.uint32)
    nbytes = data.nbytes
    report = common.Report("python", {"items": n, "bytes": nbytes, "data": "uniform random u32, numpy seed 7"})

    def ours():
        s = inpath.Sketch()
        s.update(data)
        return s.cardinality()

    ours_s, _, estimate = common.time_median(ours, reps=args.reps)

    # The same data through the Rust API in-process: the Python overhead is the difference.
    os.makedirs(common.OUT, exist_ok=True)
    path = os.path.join(common.OUT, "python-u32.bin")
    data.tofile(path)
    rust = {m["name"]: m for m in common.run_ours(["sketch", "--data", path, "--threads", "1", "--reps", str(args.reps), "--quick"])}
    os.remove(path)
    rust_s = rust["all three, fast, 1 thread(s)"]["median_s"]

    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("arr", {"x": data})
    duck_s, _, duck_estimate = common.time_median(
        lambda: con.execute("SELECT approx_count_distinct(x) FROM arr").fetchone()[0], reps=args.reps
    )

    m = min(args.datasketches_items, n)
    prefix = data[:m].tolist()

    def ds():
        sketch = datasketches.hll_sketch(16, datasketches.tgt_hll_type.HLL_8)
        for v in prefix:
            sketch.update(v)
        return sketch.get_estimate()

    ds_s, _, _ = common.time_median(ds, reps=min(args.reps, 3), warmup=0)
    ds_scaled = ds_s * n / m

    exact = len(np.unique(data))
    report.note(f"exact distinct {exact:,}; inpath {estimate:,.0f} ({(estimate - exact) / exact * 100:+.3f}%), "
                f"DuckDB {duck_estimate:,} ({(duck_estimate - exact) / exact * 100:+.3f}%)")
    report.add("Sketch.update (all three) vs Rust API", nbytes, ours_s, "inpath Rust", rust_s)
    report.add("Sketch.update (all three) vs DuckDB", nbytes, ours_s, "DuckDB approx_count_distinct", duck_s)
    report.add("Sketch.update (all three) vs DataSketches", nbytes, ours_s, f"DataSketches hll loop (x{n / m:g})", ds_scaled)
    overhead = (ours_s - rust_s) / rust_s * 100
    report.note(f"Python call overhead vs the Rust figure: {overhead:+.1f}% (target < 5%)")
    report.note(f"targets: >= 100x DataSketches' loop: {ds_scaled / ours_s:.0f}x; >= 2x DuckDB: {duck_s / ours_s:.2f}x")
    report.save()


if __name__ == "__main__":
    main()

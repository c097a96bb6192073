#!/usr/bin/env python3
"""Python package benchmark: `inpath` next to the tools Python users reach for, on the same
arrays in one run.

- Sketch.update on a NumPy uint32 array vs DataSketches' per-item Python loop (hll_sketch) and
  DuckDB's approx_count_distinct over the same NumPy array (queried in place, as a Python user
  would), 1 thread each, then 2 threads each (`Sketch.update(data, threads=2)`);
- the Python call overhead: Sketch.update against the Rust figure (`inpath-bench`, in-process)
  for the same data;
- inpath.corr on 16 x 2 M uint32 next to numpy.corrcoef, pandas.DataFrame.corr and DuckDB's
  corr (all pairs in one query);
- inpath.seal_batch (no compression, AES-256-CTR and -CBC) next to `cryptography` on 64 KiB pages.

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

    def ours(threads=1):
        s = inpath.Sketch()
        s.update(data, threads=threads)
        return s.cardinality()

    ours_s, _, estimate = common.time_median(ours, reps=args.reps)
    ours2_s, _, _ = common.time_median(lambda: ours(2), reps=args.reps)

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
    con.execute("SET threads = 2")
    duck2_s, _, _ = common.time_median(
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
    report.add("Sketch.update (all three) 2 threads vs DuckDB 2 threads", nbytes, ours2_s,
               "DuckDB approx_count_distinct", duck2_s, {"threads": 2})
    report.add("Sketch.update (all three) vs DataSketches", nbytes, ours_s, f"DataSketches hll loop (x{n / m:g})", ds_scaled)
    overhead = (ours_s - rust_s) / rust_s * 100
    report.note(f"Python call overhead vs the Rust figure: {overhead:+.1f}% (target < 5%)")
    report.note(f"targets: >= 100x DataSketches' loop: {ds_scaled / ours_s:.0f}x; >= 2x DuckDB: {duck_s / ours_s:.2f}x")
    corr_section(report, np, duckdb, inpath, args.reps)
    seal_section(report, np, inpath, args.reps)
    report.save()


def corr_section(report, np, duckdb, inpath, reps):
    pd = common.need("pandas")
    rows, streams = 2_000_000, 16
    x = np.random.default_rng(11).integers(0, 2**32, (rows, streams), dtype=np.uint32)
    nbytes = x.nbytes
    ours_s, _, result = common.time_median(lambda: inpath.corr(x, threads=1), reps=reps)
    ours2_s, _, _ = common.time_median(lambda: inpath.corr(x, threads=2), reps=reps)
    numpy_s, _, expected = common.time_median(lambda: np.corrcoef(x, rowvar=False), reps=reps)
    report.note(f"corr: max |inpath - numpy.corrcoef| = {np.abs(result.pearson - expected).max():.2e}")
    df = pd.DataFrame(x)
    pandas_s, _, _ = common.time_median(lambda: df.corr(), reps=1)
    con = duckdb.connect()
    con.execute("SET threads = 1")
    cols = [f"c{i}" for i in range(streams)]
    con.register("frame", pd.DataFrame(x.astype(np.int64), columns=cols))
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    query = "SELECT " + ", ".join(f"corr({a}, {b})" for i, a in enumerate(cols) for b in cols[i + 1:]) + " FROM t"
    duck_s, _, _ = common.time_median(lambda: con.execute(query).fetchall(), reps=1, warmup=0)
    report.add("corr 16x2M u32, 1 thread", nbytes, ours_s, "numpy.corrcoef", numpy_s)
    report.add("corr 16x2M u32, 2 threads", nbytes, ours2_s, "numpy.corrcoef", numpy_s)
    report.add("corr 16x2M u32, 1 thread", nbytes, ours_s, "pandas.DataFrame.corr", pandas_s)
    report.add("corr 16x2M u32, 1 thread", nbytes, ours_s, "DuckDB corr (120 pairs, 1 query)", duck_s)
    report.note(f"target inpath.corr >= 20x numpy.corrcoef: {numpy_s / ours_s:.1f}x")


def seal_section(report, np, inpath, reps):
    crypto = common.need("cryptography")
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    page_size, pages_n = 64 << 10, 1024
    rng = np.random.default_rng(12)
    pages = [rng.integers(0, 256, page_size, dtype=np.uint8).tobytes() for _ in range(pages_n)]
    nbytes = page_size * pages_n
    key, iv = bytes(range(32)), bytes(16)

    def crypto_ctr():
        return [Cipher(algorithms.AES(key), modes.CTR(iv)).encryptor().update(p) for p in pages]

    def crypto_cbc():
        return [Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor().update(p) for p in pages]

    for name, cipher, peer in (("AES-256-CTR", "aes256-ctr", crypto_ctr), ("AES-256-CBC", "aes256-cbc", crypto_cbc)):
        ours_s, _, _ = common.time_median(
            lambda: inpath.seal_batch(pages, key=key, compress="none", cipher=cipher, threads=1), reps=reps
        )
        peer_s, _, _ = common.time_median(peer, reps=reps)
        report.add(f"seal_batch none+{name}, 64 KiB pages, 1 thread", nbytes, ours_s, f"cryptography {crypto.__version__}", peer_s)


if __name__ == "__main__":
    main()

"""scale-out benchmark: inpath inside Spark and on Dask against Spark's own functions and
one-process runs (issue 16).

    bash bench/setup.sh && .venv/bin/python bench/scaleout.py [--only spark,dask,grep] [--reps 3]

spark: 50M distinct int64 values (x = id * 2654435761 mod 2^61, every value distinct), Spark
in local[2]. Spark's `approx_count_distinct` (default rsd 5 %), warm: one run, then the median
of --reps; inpath standalone: `inpath.Sketch(sketches="hll")` over the same values in a NumPy
array, two threads (halves, merged), median; `inpath.spark.approx_count_distinct(df, "x",
sketches="hll")` through `mapInArrow` in the same Spark session. Targets: standalone >= 8x
Spark's function, error <= 0.5 %; the mapInArrow path >= 2x Spark's function at equal or
better error.

dask: a LocalCluster of 1 and then 2 worker processes (1 thread each), 2 shards of 256 MiB
(u64 items for the sketch, rows of 8 float64 for corr) generated on the workers and held in
their memory; the median time of `inpath.dask.sketch` and `inpath.dask.corr` on each. The
scaling is t(1 worker) / t(2 workers) / 2 (target >= 85 %).

grep: TPC-H lineitem text (SF 2.7, about 2 GB; `--grep-sf`), sharded over 2 workers'
stores with `inpath.dask.ShardedStore` (1 GB each), `grep(count=True)` wall time against
`rg -c -F` over the whole file on one node (page cache warm, median of --reps). Target: wall
<= 0.6x ripgrep; bytes returned <= 1 % of bytes scanned.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

DATA = os.path.join(common.OUT, "data")
N_SPARK = 50_000_000


def median_time(fn, reps):
    """(median seconds, last result) of `fn` over `reps` runs after one warm-up."""
    seconds, _, result = common.time_median(fn, reps=reps)
    return seconds, result


def bench_spark(args, report):
    import numpy as np
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import inpath
    import inpath.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    n = args.spark_items
    spark = (SparkSession.builder.master("local[2]").appName("inpath-bench")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.memory", "4g").config("spark.sql.shuffle.partitions", "2")
             # Large Arrow batches for mapInArrow (the default 10,000 rows makes 5,000 batches).
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.range(0, n, numPartitions=2).select(
            ((F.col("id") * F.lit(2654435761)) % F.lit(1 << 61)).alias("x")).cache()
        df.count()
        values = (np.arange(n, dtype=np.int64) * 2654435761) % (1 << 61)

        spark_s, est = median_time(
            lambda: df.agg(F.approx_count_distinct("x")).collect()[0][0], args.reps)
        spark_err = abs(est - n) / n

        def standalone():
            halves = np.array_split(values, 2)
            sketches = [inpath.Sketch(sketches="hll") for _ in halves]
            threads = [threading.Thread(target=s.update, args=(h,)) for s, h in zip(sketches, halves)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            sketches[0].merge(sketches[1])
            return sketches[0].cardinality()
        ours_s, ours_est = median_time(standalone, args.reps)
        ours_err = abs(ours_est - n) / n
        report.add("distinct 50M int64: inpath standalone (2 threads) vs spark approx_count_distinct",
                   n * 8, ours_s, "spark local[2]", spark_s,
                   {"inpath_error": ours_err, "spark_error": spark_err})

        map_s, map_est = median_time(
            lambda: inpath.spark.approx_count_distinct(df, "x", sketches="hll"), args.reps)
        map_err = abs(map_est - n) / n
        report.add("distinct 50M int64: inpath.spark (mapInArrow) vs spark approx_count_distinct",
                   n * 8, map_s, "spark local[2]", spark_s,
                   {"inpath_error": map_err, "spark_error": spark_err})
        # What the hand-off alone costs: a mapInArrow that only counts its rows.
        import pyarrow as pa

        def count_rows(batches):
            rows = 0
            for b in batches:
                rows += b.num_rows
            yield pa.RecordBatch.from_pydict({"n": [rows]})
        noop_s, rows = median_time(
            lambda: sum(r[0] for r in df.mapInArrow(count_rows, "n long").collect()), args.reps)
        if rows != n:
            sys.exit(f"scaleout.py: mapInArrow saw {rows} rows, expected {n}")
        report.add("50M int64: mapInArrow that only counts rows vs spark approx_count_distinct",
                   n * 8, noop_s, "spark local[2]", spark_s)
        # Spark at inpath's error: rsd 0.004 (about hll_p 16).
        tight_s, tight = median_time(
            lambda: df.agg(F.approx_count_distinct("x", 0.004)).collect()[0][0], args.reps)
        report.add("distinct 50M int64: inpath.spark vs spark approx_count_distinct(rsd=0.004)",
                   n * 8, map_s, "spark rsd 0.004", tight_s,
                   {"inpath_error": map_err, "spark_error": abs(tight - n) / n})
        report.note(f"errors: inpath {ours_err * 100:.3f} % (standalone), {map_err * 100:.3f} % "
                    f"(mapInArrow); spark {spark_err * 100:.2f} % (rsd 0.05), "
                    f"{abs(tight - n) / n * 100:.3f} % (rsd 0.004)")
    finally:
        spark.stop()


def _gen_u64(block_id, n):
    import numpy as np
    return np.random.default_rng(block_id).integers(0, 1 << 40, n, dtype=np.uint64)


def _gen_rows(block_id, n):
    import numpy as np
    return np.random.default_rng(100 + block_id).random((n, 8))


def bench_dask(args, report):
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    import inpath.dask

    shard = args.shard_mib << 20
    times = {}
    for workers in (1, 2):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, host="127.0.0.1", memory_limit="6GiB")
        client = Client(cluster)
        try:
            import dask

            n = shard // 8
            items = da.concatenate([
                da.from_delayed(dask.delayed(_gen_u64)(i, n), (n,), dtype="u8") for i in range(2)])
            rows = da.concatenate([
                da.from_delayed(dask.delayed(_gen_rows)(i, shard // 64), (shard // 64, 8), dtype="f8")
                for i in range(2)])
            items, rows = client.persist([items, rows])
            wait([items, rows])
            s_t, s = median_time(lambda: inpath.dask.sketch(items, sketches="hll"), args.reps)
            c_t, c = median_time(lambda: inpath.dask.corr(rows), args.reps)
            times[workers] = (s_t, c_t, s.count, c.count)
        finally:
            client.close()
            cluster.close()
    for i, what in ((0, "sketch u64"), (1, "corr 8 x f64")):
        one, two = times[1][i], times[2][i]
        scaling = one / two / 2
        report.add(f"dask {what}, 2 x {args.shard_mib} MiB: 2 workers vs 1", 2 * shard, two,
                   "1 worker", one, {"scaling_of_ideal_2x": scaling})
        report.note(f"{what}: 1 worker {one:.3f} s, 2 workers {two:.3f} s: {scaling * 100:.0f} % of ideal 2x")


def bench_grep(args, report):
    from distributed import Client, LocalCluster

    import inpath.dask

    gen = os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
    if not os.path.exists(gen):
        sys.exit("scaleout.py: tpchgen-cli is missing; run bash bench/setup.sh")
    os.makedirs(DATA, exist_ok=True)
    text = os.path.join(DATA, f"lineitem-sf{args.grep_sf}.tbl")
    if not os.path.exists(text):
        with tempfile.TemporaryDirectory(dir=DATA) as tmp:
            subprocess.run([gen, "tbl", "-s", args.grep_sf, "--tables=lineitem", f"--output-dir={tmp}"],
                           check=True, capture_output=True)
            os.replace(os.path.join(tmp, "lineitem.tbl"), text)
    size = os.path.getsize(text)
    with open(text, "rb") as f:
        data = f.read()
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None, host="127.0.0.1", memory_limit="8GiB")
        client = Client(cluster)
        try:
            sharded = inpath.dask.ShardedStore(client, {i: os.path.join(tmp, f"s{i}") for i in (0, 1)})
            sharded.put("lineitem", data)
            del data
            pattern = "furiously"
            ours_s, r = median_time(lambda: sharded.grep("lineitem", pattern, count=True), args.reps)
            if shutil.which("rg"):
                def rg():
                    out = subprocess.run(["rg", "-c", "-F", "--no-config", "--mmap", pattern, text],
                                         capture_output=True, text=True, check=True)
                    return int(out.stdout)
                rg_s, lines = median_time(rg, args.reps)
                if lines != r["lines"]:
                    sys.exit(f"scaleout.py: sharded grep counted {r['lines']} lines, rg {lines}")
                report.add(f"grep 2 workers x {size / 2e9:.2f} GB vs rg -c -F (1 node)", size, ours_s,
                           "rg", rg_s, {"wall_ratio": ours_s / rg_s,
                                        "bytes_returned_share": r["bytes_returned"] / r["bytes_scanned"]})
            report.note(f"sharded grep: {r['bytes_returned']} bytes returned of {r['bytes_scanned']} scanned "
                        f"({r['bytes_returned'] / r['bytes_scanned'] * 100:.5f} %); "
                        f"placement {sum(a == b for a, b in r['placement'])}/{len(r['placement'])} on the owner")
        finally:
            client.close()
            cluster.close()


SECTIONS = {"spark": bench_spark, "dask": bench_dask, "grep": bench_grep}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="spark,dask,grep")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--spark-items", type=int, default=N_SPARK)
    parser.add_argument("--shard-mib", type=int, default=256)
    parser.add_argument("--arrow-batch", type=int, default=1 << 20,
                        help="spark: spark.sql.execution.arrow.maxRecordsPerBatch for mapInArrow")
    parser.add_argument("--grep-sf", default="2.7", help="grep: TPC-H scale factor (2.7: about 2 GB)")
    args = parser.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SECTIONS]
    if unknown:
        sys.exit(f"scaleout.py: unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    report = common.Report("scaleout", {"sections": only, "started": time.strftime("%H:%M:%S")})
    for name in only:
        SECTIONS[name](args, report)
    report.save()


if __name__ == "__main__":
    main()

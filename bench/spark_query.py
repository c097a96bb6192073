"""Spark over inpath nodes against Spark over Parquet (issue 58): the 22 TPC-H queries in Spark
SQL, on the same data in one run.

    python3 bench/spark_query.py [--sf 10] [--nodes 2] [--reps 1] [--queries 1,6] [--clean]

Data (under bench/out/spark-query/sf<SF>/, kept for the next run; --clean deletes it at the end):
`inpath query gen --sf SF`, `inpath query split` into --nodes directories, one `inpath query
serve --offload --threads 1` per node on loopback; and each table in Parquet, written by
streaming `SELECT * FROM t` from the first server through pyarrow.flight into pyarrow's
ParquetWriter (Snappy, Spark's default codec; row groups of 1 M rows), so both sides hold the
very same rows. Spark runs `local[2]` (spark.sql.shuffle.partitions 2, driver memory 4 GiB),
tables as temp views over the connector (`partitions_per_server` 2) and over the Parquet files.

Per query and side, after one warm-up run of the query on that side (page cache warm):
- wall seconds of `spark.sql(q).collect()` (median of --reps);
- bytes that crossed into Spark: over Flight, the Arrow IPC bytes the servers sent (their
  `inpath.status` counter); from Parquet, the growth of `rchar` in /proc/<JVM>/io (what the
  JVM's read calls returned; Netty's socket reads are not counted there, so the Flight side
  needs the servers' count);
- Spark's CPU seconds (the JVM's user + system) and, for inpath, the servers' CPU seconds.

Answers are compared (rows sorted, floats to 1e-9 relative). "inpath" is Spark over inpath,
"peer" Spark over Parquet; ratio = Parquet time / inpath time (above 1: inpath is faster).
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

QUERIES = os.path.join(common.ROOT, "crates/inpath-query/tpch/queries")
TABLES = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]


def cli():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(common.ROOT, "target"))
    return os.path.join(target, "release", "inpath")


def statement_command(sql):
    """CommandStatementQuery in a protobuf Any (pyarrow.flight knows Flight, not Flight SQL)."""
    def varint(n):
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def field(num, data):
        return varint(num << 3 | 2) + varint(len(data)) + data

    url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return field(1, url) + field(2, field(1, sql.encode()))


def rchar(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def rows_of(rows):
    return sorted((tuple(r) for r in rows), key=lambda r: tuple((v is None, str(v)) for v in r))


def same(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(rows_of(a), rows_of(b)):
        for u, v in zip(x, y):
            if isinstance(v, float):
                if abs(u - v) > 1e-9 * max(1.0, abs(v)):
                    return False
            elif u != v:
                return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", type=float, default=10.0)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--queries", default=",".join(str(n) for n in range(1, 23)))
    ap.add_argument("--clean", action="store_true")
    args = ap.parse_args()
    common.need("pyarrow")
    common.need("pyspark")
    import pyarrow.flight as flight
    import pyarrow.parquet as pq

    common.build_cli()
    jar = subprocess.run(["bash", os.path.join(common.ROOT, "connectors/spark/build.sh")], check=True,
                         capture_output=True, text=True).stdout.strip().splitlines()[-1]
    base = os.path.join(common.OUT, "spark-query", f"sf{args.sf:g}")
    whole = os.path.join(base, "tpch")
    nodes = [os.path.join(base, f"node{i + 1}") for i in range(args.nodes)]
    if not all(os.path.isdir(n) for n in nodes):
        for n in nodes:
            shutil.rmtree(n, ignore_errors=True)
        if not os.path.isdir(whole):
            subprocess.run([cli(), "query", "gen", "--sf", f"{args.sf:g}", whole, "--quiet"], check=True)
        subprocess.run([cli(), "query", "split", whole, "--out", ",".join(nodes)], check=True,
                       stdout=subprocess.DEVNULL)
        # The whole tables are not served: the nodes hold them.
        shutil.rmtree(whole, ignore_errors=True)

    servers = []
    try:
        for n in nodes:
            p = subprocess.Popen([cli(), "query", "serve", n, "--listen", "127.0.0.1:0", "--offload",
                                  "--threads", "1"], stdout=subprocess.PIPE, text=True)
            uri = re.match(r"listening on (\S+)", p.stdout.readline()).group(1)
            servers.append((p, uri))
        parquet = os.path.join(base, "parquet")
        if not os.path.isdir(parquet):
            tmp = parquet + ".part"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            for t in TABLES:
                writer = None
                for _, uri in servers:
                    client = flight.FlightClient(uri)
                    info = client.get_flight_info(
                        flight.FlightDescriptor.for_command(statement_command(f"SELECT * FROM {t}")))
                    reader = client.do_get(info.endpoints[0].ticket)
                    for chunk in reader:
                        if writer is None:
                            writer = pq.ParquetWriter(os.path.join(tmp, f"{t}.parquet"), chunk.data.schema,
                                                      compression="snappy")
                        writer.write_batch(chunk.data, row_group_size=1 << 20)
                    client.close()
                writer.close()
            os.rename(tmp, parquet)
        parquet_bytes = sum(os.path.getsize(os.path.join(parquet, f)) for f in os.listdir(parquet))

        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[2]").appName("inpath-spark-bench")
                 .config("spark.jars", jar)
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "4g")
                 .config("spark.driver.host", "127.0.0.1")
                 .config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.sql.shuffle.partitions", "2")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
        uris = ",".join(u for _, u in servers)
        for t in TABLES:
            (spark.read.format("inpath").option("uri", uris).option("table", t)
             .option("partitions_per_server", 2).load().createOrReplaceTempView(t))
            spark.read.parquet(os.path.join(parquet, f"{t}.parquet")).createOrReplaceTempView(f"pq_{t}")

        report = common.Report("spark-query", {"sf": args.sf, "nodes": args.nodes, "reps": args.reps,
                                               "spark": spark.version, "parquet_bytes": parquet_bytes})

        import json

        def served_bytes():
            total = 0
            for _, uri in servers:
                c = flight.FlightClient(uri)
                r = list(c.do_action(flight.Action("inpath.status", b"{}")))
                total += json.loads(r[0].body.to_pybytes())["bytes"]
                c.close()
            return total

        def measure(sql, with_servers):
            times, reads, cpus, server_cpus, rows = [], [], [], [], None
            flight_bytes = []
            rows = spark.sql(sql).collect()  # warm-up
            for _ in range(args.reps):
                r0, c0 = rchar(jvm), common.cpu_seconds(jvm)
                s0 = sum(common.cpu_seconds(p.pid) for p, _ in servers) if with_servers else 0.0
                b0 = served_bytes() if with_servers else 0
                t0 = time.perf_counter()
                rows = spark.sql(sql).collect()
                times.append(time.perf_counter() - t0)
                reads.append(rchar(jvm) - r0)
                cpus.append(common.cpu_seconds(jvm) - c0)
                if with_servers:
                    server_cpus.append(sum(common.cpu_seconds(p.pid) for p, _ in servers) - s0)
                    flight_bytes.append(served_bytes() - b0)
            med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
            return med(times), med(reads), med(cpus), med(server_cpus), med(flight_bytes), rows

        totals = {"inpath_s": 0.0, "parquet_s": 0.0, "inpath_read": 0, "parquet_read": 0, "flight_bytes": 0,
                  "inpath_cpu": 0.0, "parquet_cpu": 0.0, "server_cpu": 0.0}
        for n in [int(q) for q in args.queries.split(",")]:
            sql = open(os.path.join(QUERIES, f"q{n:02}.sql")).read().strip().rstrip(";")
            pq_sql = sql
            for t in TABLES:
                pq_sql = re.sub(rf"\b{t}\b", f"pq_{t}", pq_sql)
            i_t, i_r, i_c, s_c, f_b, i_rows = measure(sql, True)
            p_t, p_r, p_c, _, _, p_rows = measure(pq_sql, False)
            ok = same(i_rows, p_rows)
            totals["inpath_s"] += i_t
            totals["parquet_s"] += p_t
            totals["inpath_read"] += i_r
            totals["parquet_read"] += p_r
            totals["inpath_cpu"] += i_c
            totals["parquet_cpu"] += p_c
            totals["server_cpu"] += s_c
            totals["flight_bytes"] += f_b
            report.add(f"Q{n:02} SF {args.sf:g}", 1, i_t, "Spark over Parquet", p_t, unit=("queries/s", 1),
                       extra={"equal": ok, "flight_bytes": f_b, "spark_read_bytes": i_r, "parquet_spark_read_bytes": p_r,
                              "spark_cpu_s": i_c, "parquet_spark_cpu_s": p_c, "servers_cpu_s": s_c})
            report.note(f"Q{n:02}: into Spark {f_b / 1e6:10.3f} MB over Flight vs {p_r / 1e6:10.1f} MB of Parquet "
                        f"read; Spark CPU {i_c:6.2f} vs {p_c:6.2f} s; servers' CPU {s_c:6.2f} s; "
                        f"answers {'equal' if ok else 'DIFFER'}")
        report.add(f"22-query total SF {args.sf:g}", 1, totals["inpath_s"], "Spark over Parquet",
                   totals["parquet_s"], unit=("runs/s", 1), extra=totals)
        report.note(f"total: into Spark {totals['flight_bytes'] / 1e9:.3f} GB over Flight vs "
                    f"{totals['parquet_read'] / 1e9:.2f} GB of Parquet read; Spark CPU {totals['inpath_cpu']:.1f} vs "
                    f"{totals['parquet_cpu']:.1f} s; servers' CPU {totals['server_cpu']:.1f} s")
        report.save()
        spark.stop()
    finally:
        for p, _ in servers:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
            p.stdout.close()
    if args.clean:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

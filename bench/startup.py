#!/usr/bin/env python3
"""What a whole `inpath` command costs before and around its work, against the tool a user
would otherwise run, on this machine (its CPU and L2 size in the first line).

    .venv/bin/python bench/startup.py [--reps 31] [--no-build]

Each row times whole processes, A and B in turn (A B A B ...), the median of `--reps` pairs,
and counts each command's minor page faults (the kernel's accounting of the finished child):

  inpath --version            against  rg --version
  inpath store grep, 1 MB text, a pattern that never matches, --count, 1 thread
                              against  rg -c -F --mmap on the same text
  inpath query sql on TPC-H SF 0.01 (`SELECT count(*) FROM nation`)
                              against  inpath --version (the floor every command pays)
  inpath query sql Q6 at SF 1 with --offload, whole process
                              against  DuckDB's Q6 in process on its own database file (warm)
  inpath corr, 16 x 2 M u32 (bench/corr.py's data), whole process, 1 and 2 threads
                              against  numpy.corrcoef in process on the array in memory

Data is generated under bench/out/startup/ (about 0.7 GB at SF 1 for both engines) and removed
at the end unless `--keep`. Needs ripgrep, numpy and duckdb (bash bench/setup.sh) and
tpchgen-cli for DuckDB's side of Q6.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import corr  # noqa: E402 - its data generator; needs numpy, pandas and duckdb (bench/setup.sh)

QUERIES = os.path.join(common.ROOT, "crates", "inpath-query", "tpch", "queries")


def child(cmd):
    """Runs `cmd` to completion; returns (wall seconds, minor faults, stdout)."""
    wall, _, faults, out = common.run_child(cmd, ok=(0, 1))  # grep and rg exit 1 on no match
    return wall, faults, out


def paired(a, b, reps):
    """Medians of A's and B's wall seconds and faults over `reps` alternating pairs."""
    child(a), child(b)
    aw, bw, af, bf = [], [], [], []
    for _ in range(reps):
        w, f, _ = child(a)
        aw.append(w)
        af.append(f)
        w, f, _ = child(b)
        bw.append(w)
        bf.append(f)
    return statistics.median(aw), statistics.median(bw), statistics.median(af), statistics.median(bf)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=31, help="pairs per row (default 31)")
    parser.add_argument("--no-build", action="store_true", help="use the built target/release/inpath")
    parser.add_argument("--keep", action="store_true", help="keep bench/out/startup/")
    args = parser.parse_args()
    if not shutil.which("rg"):
        sys.exit("startup.py: ripgrep (rg) not found: run bash bench/setup.sh")
    np = common.need("numpy")
    duckdb = common.need("duckdb")
    if not args.no_build:
        common.build_cli()
    inpath = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(common.ROOT, "target")),
                          "release", "inpath")
    work = os.path.join(common.OUT, "startup")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    report = common.Report("startup", {"reps": args.reps, "what": "whole processes, alternating pairs"})
    try:
        # --version: the floor of every command.
        a, b, fa, fb = paired([inpath, "--version"], ["rg", "--version"], args.reps)
        report.add("inpath --version vs rg --version", 1, a, "rg --version", b,
                   {"faults": fa, "peer_faults": fb}, unit=("runs/s", 1))

        # A match-free search of a small file.
        text = os.path.join(work, "small.txt")
        with open(text, "w") as f:
            line = "|".join(str(i) for i in range(12)) + "|furiously regular deposits\n"
            f.write(line * (1_000_000 // len(line)))
        store = os.path.join(work, "store")
        subprocess.run([inpath, "store", "put", store, text], check=True, capture_output=True)
        a, b, fa, fb = paired([inpath, "store", "grep", store, "1", "zzqx", "--count", "--threads", "1"],
                              ["rg", "-c", "-F", "--no-config", "--mmap", "zzqx", text], args.reps)
        report.add("store grep 1 MB, no match vs rg -c -F", os.path.getsize(text), a, "rg -c -F --mmap", b,
                   {"faults": fa, "peer_faults": fb})

        # SQL on a tiny table.
        tiny = os.path.join(work, "sf001")
        subprocess.run([inpath, "query", "gen", "--sf", "0.01", tiny, "--quiet"], check=True)
        a, b, fa, fb = paired([inpath, "query", "sql", tiny, "SELECT count(*) FROM nation"],
                              [inpath, "--version"], args.reps)
        report.add("query sql count(*) nation vs inpath --version", 1, a, "inpath --version", b,
                   {"faults": fa, "peer_faults": fb}, unit=("runs/s", 1))

        # Q6 at SF 1: the whole process against DuckDB warm in process.
        sf1 = os.path.join(work, "sf1")
        subprocess.run([inpath, "query", "gen", "--sf", "1", sf1, "--quiet"], check=True)
        q6 = open(os.path.join(QUERIES, "q06.sql")).read()
        tpchgen = shutil.which("tpchgen-cli") or os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
        pq = os.path.join(work, "pq")
        subprocess.run([tpchgen, "parquet", "-s", "1", "-o", pq, "-T", "lineitem"], check=True,
                       capture_output=True)
        con = duckdb.connect(os.path.join(work, "duck.db"))
        con.execute(f"CREATE TABLE lineitem AS SELECT * FROM '{pq}/lineitem.parquet'")
        con.execute("SET threads = 2")
        duck_s, _, duck_rows = common.time_median(lambda: con.execute(q6).fetchall(), reps=args.reps)
        con.close()
        walls, faults = [], []
        child([inpath, "query", "sql", sf1, "--offload", "--csv", q6])
        for _ in range(args.reps):
            w, f, out = child([inpath, "query", "sql", sf1, "--offload", "--csv", q6])
            walls.append(w)
            faults.append(f)
        ours = out.strip().splitlines()[-1]
        if abs(float(ours) - float(duck_rows[0][0])) > 1e-4:
            sys.exit(f"startup.py: Q6 gave {ours}, DuckDB {duck_rows[0][0]}")
        report.add("Q6 SF 1 offload, whole process vs DuckDB in process", 1, statistics.median(walls),
                   f"DuckDB {duckdb.__version__} in process, 2 threads", duck_s,
                   {"faults": statistics.median(faults)}, unit=("runs/s", 1))

        # corr as a whole command against numpy.corrcoef on the array in memory: bench/corr.py's
        # 16 x 2 M u32 (the reference's 64-byte lines), made by its generator with its seed.
        lines = os.path.join(work, "c16.bin")
        rows = 2 << 20
        corr.generate(lines, rows, 16, np.uint32, seed=16)
        data = corr.load(lines, rows, 16, np.uint32)
        numpy_s, _, _ = common.time_median(lambda: np.corrcoef(data, rowvar=False), reps=7)
        for threads in (1, 2):
            cmd = [inpath, "corr", "--layout", "lines", "--type", "u32", "--threads", str(threads), lines]
            child(cmd)
            walls = [child(cmd)[0] for _ in range(args.reps)]
            report.add(f"corr 16 x 2M u32 whole command t{threads} vs numpy.corrcoef", data.nbytes,
                       statistics.median(walls), "numpy.corrcoef in process", numpy_s, {"threads": threads})
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report.save()


if __name__ == "__main__":
    main()

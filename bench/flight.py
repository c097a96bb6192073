"""Flight SQL benchmark (issue 58): what crossing the network costs, against the engine in
process, on the same tables in one run.

    python3 bench/flight.py [--sf 1] [--reps 3] [--threads 2]

TPC-H tables at --sf (made by `inpath query gen` under bench/out/flight/, kept for the next
run; delete them with --clean) are served by `inpath query serve --offload` on loopback. Rows:

- a whole `SELECT * FROM lineitem` read by pyarrow.flight (C++ gRPC) and by ADBC's Flight SQL
  driver (Go), against `inpath.query.sql` in this process: GB/s of Arrow data delivered
  (the result's `nbytes`), median of --reps runs after a warm-up;
- the 22 TPC-H queries over ADBC against in process with offload, total seconds (small
  results: the per-statement cost of planning twice, GetFlightInfo then DoGet, and gRPC).

Client and server share the machine's cores. "inpath" is the Flight figure, "peer" the
in-process one (ratio = in-process time / Flight time: below 1 means the network path is
slower).
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clean", action="store_true", help="delete the generated tables at the end")
    args = ap.parse_args()
    common.need("pyarrow")
    common.need("adbc_driver_flightsql", "pip install adbc-driver-flightsql (scripts/requirements-test.txt)")
    import adbc_driver_flightsql.dbapi as flight_sql
    import pyarrow.flight as flight

    import inpath.query

    common.build_cli()
    tables = os.path.join(common.OUT, "flight", f"sf{args.sf:g}")
    if not os.path.isdir(tables):
        subprocess.run([cli(), "query", "gen", "--sf", f"{args.sf:g}", tables, "--quiet"], check=True)
    report = common.Report("flight", {"sf": args.sf, "reps": args.reps, "threads": args.threads})
    server = subprocess.Popen([cli(), "query", "serve", tables, "--listen", "127.0.0.1:0", "--offload",
                               "--threads", str(args.threads)], stdout=subprocess.PIPE, text=True)
    try:
        uri = re.match(r"listening on (\S+)", server.stdout.readline()).group(1)
        scan = "SELECT * FROM lineitem"

        client = flight.FlightClient(uri)

        def over_pyarrow():
            info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_command(scan)))
            return client.do_get(info.endpoints[0].ticket).read_all()

        def over_adbc():
            with flight_sql.connect(uri) as conn:
                cur = conn.cursor()
                cur.execute(scan)
                return cur.fetch_arrow_table()

        def in_process():
            return inpath.query.sql(tables, scan, threads=args.threads)

        local_s, _, table = common.time_median(in_process, reps=args.reps)
        size = table.nbytes
        rows = table.num_rows
        del table
        for name, fn in [("pyarrow.flight", over_pyarrow), ("ADBC Flight SQL", over_adbc)]:
            t, _, got = common.time_median(fn, reps=args.reps)
            assert got.num_rows == rows, (name, got.num_rows, rows)
            del got
            report.add(f"lineitem scan SF {args.sf:g}, {name}", size, t, "in process", local_s,
                       extra={"rows": rows})
        client.close()

        texts = [open(os.path.join(QUERIES, f"q{n:02}.sql")).read() for n in range(1, 23)]

        def all_adbc():
            with flight_sql.connect(uri) as conn:
                cur = conn.cursor()
                for text in texts:
                    cur.execute(text)
                    cur.fetch_arrow_table()

        def all_local():
            for text in texts:
                inpath.query.sql(tables, text, threads=args.threads, offload=True)

        local_t, _, _ = common.time_median(all_local, reps=args.reps)
        adbc_t, _, _ = common.time_median(all_adbc, reps=args.reps)
        report.add(f"TPC-H 22 queries SF {args.sf:g}, ADBC", 22, adbc_t, "in process, offload", local_t,
                   unit=("queries/s", 1))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        server.stdout.close()
    report.save()
    if args.clean:
        shutil.rmtree(tables, ignore_errors=True)


if __name__ == "__main__":
    main()

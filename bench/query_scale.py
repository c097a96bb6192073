"""The TPC-H scale sweep of bench/query.py (`--scale 1,3,10,30,100`): DuckDB, inpath without and
with offload at each scale factor, warm and cold, on the same machine in one run.

    .venv/bin/python bench/query.py --scale 1,3,10,30,100 [--threads 2] [--runs 1] [--lean]
                                    [--data DIR] [--resume] [--parts duckdb,gen,on,off]

Per scale factor, in this order (each part is saved to bench/out/query-scale.json as soon as it
is done; `--resume` skips the parts already there, so a long sweep can run in pieces):
1. DuckDB: tpchgen-cli's Parquet loaded into DuckDB's own database file, table by table in
   parts of about SF 5 (each part made, loaded and deleted before the next, so the disk never
   holds all the Parquet files beside the database); the answers pinned from it
   (crates/inpath-query/tpch/pin_answers.py --duckdb); the 22 queries warm (one
   process: a warm-up run, then --runs timed runs, medians) and cold (each query in a fresh
   process after `echo 3 > /proc/sys/vm/drop_caches`: its time, the bytes it read from storage
   (the child's rusage ru_inblock, 512-byte blocks) and its peak anonymous memory (RssAnon,
   sampled every 2 ms)). With --lean the database goes once measured, so that the largest
   scale factors fit the disk one engine at a time.
2. `inpath query gen`: seconds, bytes written, and the process's peak RssAnon.
3. inpath with offload (`--offload`, the default device memory: 16 MiB per SF, at least 40 MiB)
   and 4. without it: warm (`inpath query tpch --runs`, medians, every answer checked against
   the pinned ones) and cold (each query in a fresh process after dropping the page cache,
   checked, with its bytes read and peak RssAnon). Without offload the host's memory is capped
   (`--memory-limit`, default half the machine) and joins over tables larger than that are
   sort-merge joins, which spill.
Cold runs need root (to drop the page cache); without it they are skipped with a note.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import common

TABLES = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]
RESULTS = os.path.join(common.OUT, "query-scale.json")


def inpath_bin():
    return os.path.join(os.path.dirname(common.bench_bin()), "inpath")


def can_drop_caches():
    return os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK)


def drop_caches(program_files=()):
    """Drops the page cache, then reads the engine's own program files back in (the
    executable, its libraries): a cold run then reads only its data from storage, as a server
    whose program is loaded would."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    for path in program_files:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def program_files(engine):
    """The files an engine's process maps to run: inpath's binary; for DuckDB, the Python
    interpreter, its library and DuckDB's extension modules."""
    if engine == "inpath":
        return [inpath_bin()]
    import sysconfig
    files = [os.path.realpath(sys.executable)]
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    ldlib = sysconfig.get_config_var("LDLIBRARY") or ""
    if ldlib and os.path.exists(os.path.join(libdir, ldlib)):
        files.append(os.path.join(libdir, ldlib))
    duck = common.need("duckdb")
    root = os.path.dirname(duck.__file__)
    for base in {root, os.path.dirname(root)}:
        for name in os.listdir(base):
            if name.startswith(("_duckdb", "duckdb")) and name.endswith(".so"):
                files.append(os.path.join(base, name))
    return files


def measured(cmd, env=None):
    """Runs `cmd` to its end: (stdout, wall seconds, peak RssAnon bytes, bytes read from
    storage by it and its children (ru_inblock), exit code, stderr's tail)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    anon = 0
    out_chunks = []
    os.set_blocking(proc.stdout.fileno(), False)
    while True:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        anon = max(anon, int(line.split()[1]) * 1024)
                        break
        except OSError:
            pass
        try:
            chunk = proc.stdout.read()
            if chunk:
                out_chunks.append(chunk)
        except (BlockingIOError, TypeError):
            pass
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.002)
    wall = time.perf_counter() - start
    rest = proc.stdout.read()
    if rest:
        out_chunks.append(rest)
    err = proc.stderr.read().decode(errors="replace")
    return (b"".join(out_chunks).decode(), wall, anon, usage.ru_inblock * 512,
            os.waitstatus_to_exitcode(status), err[-2000:])


def load(path=RESULTS):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def save(results):
    os.makedirs(common.OUT, exist_ok=True)
    tmp = RESULTS + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=2)
    os.replace(tmp, RESULTS)


DUCK_WARM = r"""
import duckdb, json, statistics, sys, time
db, threads, runs, qdir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
con = duckdb.connect(db, read_only=True)
con.execute(f"SET threads = {threads}"); con.execute("SET enable_progress_bar = false")
out = {}
for n in range(1, 23):
    text = open(f"{qdir}/q{n:02}.sql").read()
    con.execute(text).fetchall()
    samples = []
    for _ in range(runs):
        t = time.perf_counter(); con.execute(text).fetchall(); samples.append(time.perf_counter() - t)
    out[n] = statistics.median(samples)
    print(f"duckdb warm Q{n}: {out[n]:.3f} s", file=sys.stderr, flush=True)
print(json.dumps(out))
"""

DUCK_ONE = r"""
import duckdb, json, sys, time
db, threads, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
con = duckdb.connect(db, read_only=True)
con.execute(f"SET threads = {threads}"); con.execute("SET enable_progress_bar = false")
text = open(path).read()
t = time.perf_counter(); cur = con.execute(text); rows = cur.fetchall(); wall = time.perf_counter() - t
if len(sys.argv) > 4:  # pin the answer as pin_answers.py writes it (after the clock stopped)
    import csv
    sys.path.insert(0, sys.argv[5])
    from pin_answers import canonical
    with open(sys.argv[4], "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow([d[0] for d in cur.description])
        for row in rows:
            w.writerow([canonical(v) for v in row])
print(json.dumps({"seconds": wall, "rows": len(rows)}))
"""


def duckdb_part(sf, base, args, entry):
    """DuckDB's database, the pinned answers, its warm and cold runs."""
    py = sys.executable
    gen = os.path.join(os.path.dirname(py), "tpchgen-cli")
    parquet = os.path.join(base, "parquet")
    db = os.path.join(base, "tpch.duckdb")
    answers = os.path.join(base, "answers")
    qdir = os.path.join(common.ROOT, "crates/inpath-query/tpch/queries")
    if not os.path.exists(db):
        # Each table in parts of about SF 5 (tpchgen-cli --parts/--part: the same rows, in
        # order), each part loaded and deleted before the next is made: the disk holds the
        # database and one part, never all the Parquet files beside it (SF 100's are ~37 GB).
        duckdb = common.need("duckdb")
        parts = max(1, round(sf / 5))
        gen_s = load_s = pq_bytes = 0.0
        if os.path.exists(db + ".tmp"):
            os.remove(db + ".tmp")
        con = duckdb.connect(db + ".tmp")
        con.execute(f"SET threads = {max(args.thread_list)}")
        con.execute("SET enable_progress_bar = false")
        for table in TABLES:
            n = parts if table not in ("nation", "region") else 1
            for k in range(1, n + 1):
                shutil.rmtree(parquet, ignore_errors=True)
                t = time.perf_counter()
                cmd = [gen, "parquet", "-s", str(sf), f"--tables={table}", f"--output-dir={parquet}"]
                if n > 1:
                    cmd += [f"--parts={n}", f"--part={k}"]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                gen_s += time.perf_counter() - t
                files = [os.path.join(dp, f) for dp, _, fs in os.walk(parquet) for f in fs
                         if f.endswith(".parquet")]
                pq_bytes += sum(os.path.getsize(f) for f in files)
                t = time.perf_counter()
                source = ", ".join(f"'{f}'" for f in sorted(files))
                if k == 1:
                    con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet([{source}])")
                else:
                    con.execute(f"INSERT INTO {table} SELECT * FROM read_parquet([{source}])")
                load_s += time.perf_counter() - t
        shutil.rmtree(parquet, ignore_errors=True)
        con.execute("CHECKPOINT")
        con.close()
        os.replace(db + ".tmp", db)
        entry.update({"parquet_gen_s": gen_s, "duckdb_load_s": load_s, "parquet_bytes": pq_bytes})
    entry["duckdb_bytes"] = os.path.getsize(db)
    tpch_dir = os.path.join(common.ROOT, "crates/inpath-query/tpch")
    # Cold runs pin the answers as they go (each query's rows, written after its clock stops),
    # which spares a whole pass over the largest scale factors; otherwise pin_answers.py runs.
    pin_cold = "cold" in args.modes and can_drop_caches() and not os.path.exists(
        os.path.join(answers, "q22.csv"))
    if pin_cold:
        os.makedirs(answers, exist_ok=True)
    elif not os.path.exists(os.path.join(answers, "q22.csv")):
        subprocess.run([py, os.path.join(common.ROOT, "crates/inpath-query/tpch/pin_answers.py"),
                        "--sf", str(sf), "--out", answers, "--duckdb", db], check=True,
                       stdout=subprocess.DEVNULL)
    threads = args.thread_list[-1]
    if "warm" in args.modes:
        out, wall, anon, read, rc, err = measured([py, "-c", DUCK_WARM, db, str(threads), str(args.runs), qdir])
        if rc != 0:
            sys.exit(f"query.py --scale: DuckDB's warm run failed at SF {sf}: {err}")
        warm = {int(k): v for k, v in json.loads(out).items()}
        entry["warm"] = warm
        entry["warm_anon_peak"] = anon
        print(f"SF {sf}: DuckDB warm total {sum(warm.values()):.2f} s, peak RssAnon {anon / 2**20:.0f} MiB",
              flush=True)
    if "cold" in args.modes:
        pin = (lambda n: [os.path.join(answers, f"q{n:02}.csv"), tpch_dir]) if pin_cold else (lambda n: [])
        entry["cold"] = cold_runs(lambda n: [py, "-c", DUCK_ONE, db, str(threads), os.path.join(qdir, f"q{n:02}.sql"),
                                             *pin(n)],
                                  lambda out: json.loads(out)["seconds"], f"SF {sf} DuckDB",
                                  program_files("duckdb"))
        if pin_cold:
            with open(os.path.join(answers, "meta.json"), "w") as f:
                json.dump({"scale_factor": f"{sf:g}", "oracle": "duckdb (bench/query_scale.py's cold runs)",
                           "database": os.path.basename(db)}, f, indent=2)
    if args.lean:
        os.remove(db)


# Saves the sweep's results so far (set by sweep()): cold runs save after each query, so a
# long part cut short keeps what it measured and `--resume` goes on from the next query.
CHECKPOINT = None


def cold_runs(command, seconds_of, what, programs, cold=None):
    """Each query in a fresh process after the page cache is dropped (and the engine's
    `programs` read back in): its seconds, bytes read from storage and peak RssAnon. `cold`
    holds the queries measured before (kept) and is filled as they run."""
    if not can_drop_caches():
        print(f"{what}: cold runs skipped: dropping the page cache needs root", flush=True)
        return None
    cold = {} if cold is None else cold
    for n in range(1, 23):
        if str(n) in cold or n in cold:
            continue
        drop_caches(programs)
        out, wall, anon, read, rc, err = measured(command(n))
        if rc != 0:
            # Recorded, not fatal: a query that fails at a scale (an engine out of memory) is a
            # result of the sweep; the others still run. The totals leave the scale out.
            cold[str(n)] = {"error": err.strip().splitlines()[-1] if err.strip() else f"exit {rc}",
                            "read_bytes": read, "anon_peak": anon, "wall": wall}
            print(f"{what} cold Q{n}: FAILED after {wall:.1f} s: {cold[str(n)]['error']}", flush=True)
            if CHECKPOINT:
                CHECKPOINT()
            continue
        cold[str(n)] = {"seconds": seconds_of(out), "read_bytes": read, "anon_peak": anon, "wall": wall}
        print(f"{what} cold Q{n}: {cold[str(n)]['seconds']:.3f} s, read {read / 1e9:.2f} GB, "
              f"RssAnon {anon / 2**20:.0f} MiB", flush=True)
        if CHECKPOINT:
            CHECKPOINT()
    return cold


def inpath_seconds(out):
    q = json.loads(out)["queries"][0]
    if q["check"] not in (None, "equal"):
        sys.exit(f"query.py --scale: Q{q['query']} differs from DuckDB's: {q['check']}")
    return q["times"][0]


def gen_part(sf, base, args, entry):
    plain = os.path.join(base, "plain")
    if os.path.exists(os.path.join(plain, "region", "manifest")) and "gen_s" in entry:
        return
    out, wall, anon, read, rc, err = measured(
        [inpath_bin(), "query", "gen", "--sf", str(sf), plain, "--force", "--json", "--threads",
         str(args.thread_list[-1])])
    if rc != 0:
        sys.exit(f"query.py --scale: inpath query gen --sf {sf} failed: {err}")
    summary = json.loads(out)
    entry.update({"gen_s": summary["seconds"], "gen_bytes": summary["bytes"], "gen_anon_peak": anon,
                  "gen_rows": summary["rows"]})
    print(f"SF {sf}: inpath query gen {summary['seconds']:.1f} s, {summary['bytes'] / 2**30:.2f} GiB, "
          f"peak RssAnon {anon / 2**20:.0f} MiB", flush=True)


def inpath_part(sf, base, args, entry, offload):
    plain = os.path.join(base, "plain")
    answers = os.path.join(base, "answers")
    threads = args.thread_list[-1]
    extra = ["--offload"] if offload else []
    if args.memory_limit and not offload:
        extra += ["--memory-limit", args.memory_limit]
    if args.spill_dir:
        extra += ["--spill-dir", args.spill_dir]
    name = "inpath offload" if offload else "inpath"
    cmd = [inpath_bin(), "query", "tpch", plain, "--json", "--threads", str(threads),
           "--runs", str(args.runs + 1), "--answers", answers, *extra]
    if "warm" in args.modes:
        inpath_warm(sf, cmd, name, entry)
    if "cold" in args.modes:
        entry["cold"] = entry.get("cold") or {}
        cold_runs(
            lambda n: [inpath_bin(), "query", "tpch", plain, "--json", "--threads", str(threads), "--runs", "1",
                       "--queries", str(n), "--answers", answers, *extra],
            inpath_seconds, f"SF {sf} {name}", program_files("inpath"), entry["cold"])


def inpath_warm(sf, cmd, name, entry):
    """inpath's warm runs: one process, a warm-up run and --runs timed ones per query."""
    out, wall, anon, read, rc, err = measured(cmd)
    if rc != 0:
        sys.exit(f"query.py --scale: {name} at SF {sf} failed: {err}")
    warm, device = {}, {}
    for q in json.loads(out)["queries"]:
        if q["check"] not in (None, "equal"):
            sys.exit(f"query.py --scale: {name} Q{q['query']} at SF {sf} differs: {q['check']}")
        times = sorted(q["times"])
        # The slowest run is the first, which warmed the page cache: the median of the others.
        warm[q["query"]] = statistics.median(times[:-1] if len(times) > 1 else times)
        if q.get("device"):
            device[q["query"]] = q["device"]
    entry["warm"] = warm
    entry["warm_anon_peak"] = anon
    entry["device"] = device
    print(f"SF {sf}: {name} warm total {sum(warm.values()):.2f} s, process peak RssAnon "
          f"{anon / 2**20:.0f} MiB", flush=True)


def sweep(args):
    """Runs the sweep; returns the results (also in bench/out/query-scale.json)."""
    results = load() if args.resume else {}
    results.setdefault("setup", {})
    report = common.Report("query-scale", {"threads": args.thread_list[-1], "runs": args.runs})
    results["setup"] = report.setup
    global CHECKPOINT
    CHECKPOINT = lambda: save(results)  # noqa: E731
    parts = args.parts.split(",")
    data = os.path.abspath(args.data or os.path.join(common.OUT, "query-scale"))
    for sf_text in args.scale.split(","):
        sf = float(sf_text)
        key = f"{sf:g}"
        base = os.path.join(data, f"sf{key}")
        os.makedirs(base, exist_ok=True)
        entry = results.setdefault("scale_factors", {}).setdefault(key, {})
        for part, run in [("duckdb", lambda e: duckdb_part(sf, base, args, e)),
                          ("gen", lambda e: gen_part(sf, base, args, e)),
                          ("on", lambda e: inpath_part(sf, base, args, e, True)),
                          ("off", lambda e: inpath_part(sf, base, args, e, False))]:
            if part not in parts or (args.resume and entry.get(part, {}).get("done")):
                continue
            free = shutil.disk_usage(data).free
            print(f"# SF {sf:g}: {part} ({free / 2**30:.0f} GiB free)", flush=True)
            run(entry.setdefault(part, {}))
            entry[part]["done"] = True
            save(results)
        if args.lean and "off" in parts and entry.get("off", {}).get("done"):
            shutil.rmtree(os.path.join(base, "plain"), ignore_errors=True)
    report.rows.append(results)
    common.save_run("query-scale", {"engine": "query-scale", "setup": report.setup, "rows": [results]})
    return results


def summary(results):
    """One line per scale factor: the 22-query totals, warm and cold, and the peaks."""
    print(f"{'SF':>5} | {'duck warm':>9} {'off warm':>9} {'on warm':>9} {'on/duck':>7} | "
          f"{'duck cold':>9} {'off cold':>9} {'on cold':>9} {'on/duck':>7} | "
          f"{'duck read':>9} {'on read':>9} | {'anon duck':>9} {'off':>9} {'on':>9}")
    for key, e in sorted(results.get("scale_factors", {}).items(), key=lambda kv: float(kv[0])):
        def total(part, kind):
            d = e.get(part, {}).get(kind)
            if not d or any(isinstance(v, dict) and "seconds" not in v for v in d.values()):
                return None  # not run, or a query failed: no total
            return sum(v["seconds"] if isinstance(v, dict) else v for v in d.values())

        def peak(part):
            c = e.get(part, {}).get("cold")
            return max((v["anon_peak"] for v in c.values()), default=None) if c else e.get(part, {}).get("warm_anon_peak")

        def read(part):
            c = e.get(part, {}).get("cold")
            return sum(v["read_bytes"] for v in c.values()) if c else None

        def f(v, scale=1.0, w=9, p=2):
            return f"{v / scale:{w}.{p}f}" if v is not None else f"{'-':>{w}}"

        dw, fw, ow = total("duckdb", "warm"), total("off", "warm"), total("on", "warm")
        dc, fc, oc = total("duckdb", "cold"), total("off", "cold"), total("on", "cold")
        print(f"{key:>5} | {f(dw)} {f(fw)} {f(ow)} {f(ow / dw if ow and dw else None, w=7)} | "
              f"{f(dc)} {f(fc)} {f(oc)} {f(oc / dc if oc and dc else None, w=7)} | "
              f"{f(read('duckdb'), 1e9)} {f(read('on'), 1e9)} | "
              f"{f(peak('duckdb'), 2**30)} {f(peak('off'), 2**30)} {f(peak('on'), 2**30)}")


def markdown(results):
    """docs/PERFORMANCE.md's tables: one per scale factor, a row per query and the totals."""
    lines = []
    for key, e in sorted(results.get("scale_factors", {}).items(), key=lambda kv: float(kv[0])):
        def sec(part, kind, n):
            d = (e.get(part) or {}).get(kind) or {}
            v = d.get(str(n), d.get(n))
            if v is None:
                return None
            if isinstance(v, dict):
                return v.get("seconds", "failed")
            return v

        def cell(v):
            return "–" if v is None else (v if isinstance(v, str) else f"{v:.3f}")

        def cold_field(part, n, field):
            d = (e.get(part) or {}).get("cold") or {}
            v = d.get(str(n), d.get(n))
            return v.get(field) if v else None

        lines.append(f"**SF {key}**" + (f" (tables: DuckDB {e['duckdb']['duckdb_bytes'] / 1e9:.1f} GB, "
                                        f"inpath {e['gen']['gen_bytes'] / 1e9:.1f} GB)"
                                        if e.get("duckdb", {}).get("duckdb_bytes") and e.get("gen") else ""))
        lines.append("")
        lines.append("| query | DuckDB warm | no offload warm | offload warm | DuckDB cold | no offload cold "
                     "| offload cold | read GB DuckDB / offload | peak RssAnon MiB DuckDB / no offload / offload |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        tot = {}
        for n in range(1, 23):
            row = [sec(p, k, n) for k in ("warm", "cold") for p in ("duckdb", "off", "on")]
            for i, v in enumerate(row):
                if isinstance(v, (int, float)) and tot.get(i, 0) is not None:
                    tot[i] = tot.get(i, 0) + v
                else:
                    tot[i] = None
            rd = [cold_field(p, n, "read_bytes") for p in ("duckdb", "on")]
            an = [cold_field(p, n, "anon_peak") for p in ("duckdb", "off", "on")]
            lines.append(f"| Q{n} | " + " | ".join(cell(v) for v in row) + " | "
                         + " / ".join("–" if v is None else f"{v / 1e9:.2f}" for v in rd) + " | "
                         + " / ".join("–" if v is None else f"{v / 2**20:.0f}" for v in an) + " |")
        reads = [sum(cold_field(p, n, "read_bytes") or 0 for n in range(1, 23)) for p in ("duckdb", "on")]
        peaks = [max((cold_field(p, n, "anon_peak") or 0 for n in range(1, 23)), default=0)
                 for p in ("duckdb", "off", "on")]
        lines.append("| **total** | " + " | ".join(f"**{cell(tot.get(i))}**" for i in range(6)) + " | "
                     + " / ".join(f"{v / 1e9:.1f}" if v else "–" for v in reads) + " | "
                     + " / ".join(f"{v / 2**20:.0f}" if v else "–" for v in peaks) + " (max) |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    # python3 bench/query_scale.py [RUN.json]: PERFORMANCE.md's tables from a sweep's file.
    path = sys.argv[1] if len(sys.argv) > 1 else RESULTS
    data = load(path)
    if "rows" in data:  # a run file: {"engine", "setup", "rows": [results]}
        data = data["rows"][0]
    print(markdown(data))

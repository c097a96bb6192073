#!/usr/bin/env python3
"""Cache engine benchmark: `inpath cache serve` against memcached 1.6 (Debian package) on
loopback, same threads and DRAM budget, same load generator (`inpath cache bench`), one run.

Measurements (issue 12):
  (1) working set in DRAM (20k keys x 1 KiB, 64 MiB): server CPU time per 1000 operations
      (utime+stime from /proc/PID/stat around the measured run) next to operations per second;
  (2) working set 10x the DRAM budget (640k keys x 1 KiB against 64 MiB; inpath gets 640 MiB of
      flash, 10x the DRAM), every key set once (random order), then Zipf s=0.99, 95% gets,
      look-aside: on a miss the client waits a fixed backend delay, then sets the value. After a
      warm-up, the miss ratio and end-to-end request rate;
  (3) from inpath's stats: DRAM bytes of index per item, flash reads per index miss (0) and per
      flash hit (1), and whether the flash file is read with O_DIRECT (page cache bypassed).

  (4) an independent load generator, libmemcached's `memcslap` (Debian's libmemcached-tools):
      single gets, multigets and sets, 4 client threads, against memcached, inpath with a flash
      tier and inpath from DRAM alone (no --flash), same server threads and memory; the server's
      CPU per 1000 requests over the whole memcslap run (its load phase included) and the
      requests per second memcslap reports for the measured phase; rounds alternate the servers
      and the median is reported, with every run's figure;
  (5) a large-multiget workload: 100 keys per `get` line (20k keys of 1 KiB in DRAM), 4 client
      connections (a plain socket client), server CPU per 1000 keys returned.

Two cores are shared by the load generator and the server, so rates are a floor; the server's
CPU per operation is the figure to compare.

Usage: python3 bench/cache.py [--ops 200000] [--warmup-big 1000000] [--backend-us 100] [--reps 3]
       python3 bench/cache.py --only memcslap     (just (4) and (5))
Never run it while a build or another benchmark runs.
"""

import argparse
import json
import statistics
import threading
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402



def target_dir():
    return os.environ.get("CARGO_TARGET_DIR", os.path.join(common.ROOT, "target"))


def inpath_bin():
    return os.path.join(target_dir(), "release", "inpath")





class Proc:
    def __init__(self, args):
        self.p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def start_inpath(port, memory_mib, flash, flash_mib, threads, extra=()):
    p = Proc([inpath_bin(), "cache", "serve", "--listen", f"127.0.0.1:{port}", "--memory", f"{memory_mib}MiB",
              "--flash", flash, "--flash-size", f"{flash_mib}MiB", "-t", str(threads), *extra])
    common.wait_port(port)
    return p


def start_inpath_dram(port, memory_mib, threads):
    p = Proc([inpath_bin(), "cache", "serve", "-l", "127.0.0.1", "-p", str(port), "-m", str(memory_mib),
              "-t", str(threads), "-c", "4096"])
    common.wait_port(port)
    return p


def start_memcached(port, memory_mib, threads):
    args = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", str(memory_mib),
            "-t", str(threads), "-c", "4096"]
    if os.geteuid() == 0:
        args += ["-u", "root"]
    p = Proc(args)
    common.wait_port(port)
    return p


def bench_args(port, keys, n, seed, backend_us, conns, get_ratio=0.95, extra=()):
    a = [inpath_bin(), "cache", "bench", "--server", f"127.0.0.1:{port}", "--keys", str(keys),
         "--ops", str(n), "--value-size", "1024", "--zipf", "0.99", "--get-ratio", str(get_ratio),
         "--conns", str(conns), "--seed", str(seed), "--json", *extra]
    if backend_us is not None:
        a += ["--backend-delay-us", str(backend_us)]
    return a


def warm(port, keys, warmup, backend_us, conns):
    """Every key set once (random order), then `warmup` look-aside requests."""
    subprocess.run(bench_args(port, keys, warmup, 1, backend_us, conns, extra=["--prefill"]),
                   check=True, capture_output=True)


def measure(port, pid, keys, ops, backend_us, conns, seed=2):
    # The server's CPU is read around the measured run alone.
    c0 = common.cpu_seconds(pid)
    out = subprocess.run(bench_args(port, keys, ops, seed, backend_us, conns), check=True,
                         capture_output=True, text=True)
    c1 = common.cpu_seconds(pid)
    r = json.loads(out.stdout)
    r["server_cpu_us_per_1000_ops_proc"] = (c1 - c0) * 1e6 / r["ops"] * 1000
    return r


def stats(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"stats\r\n")
    data = b""
    while not data.endswith(b"END\r\n"):
        data += s.recv(65536)
    s.close()
    return {m.group(1).decode(): m.group(2).decode() for m in re.finditer(rb"STAT (\S+) (\S+)\r\n", data)}


def line(report, name, ours, peer, unit, better, extra=None):
    ratio = (peer / ours if better == "lower" else ours / peer) if ours and peer else None
    row = {"measurement": name, "inpath": ours, "peer": "memcached", "peer_value": peer, "unit": unit,
           "ratio_in_inpath_favour": ratio, "extra": extra or {}}
    report.rows.append(row)
    rt = f"{ratio:6.2f}x" if ratio else "     -"
    print(f"{name:<52} inpath {ours:12.3f} {unit:<14} | memcached {peer:12.3f} | {rt}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--warmup-small", type=int, default=100_000)
    ap.add_argument("--warmup-big", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--big-keys", type=int, default=640_000)
    ap.add_argument("--backend-us", default="100,1000",
                    help="fixed backend delays in microseconds, comma-separated (warm-up uses the first)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--memory-mib", type=int, default=64)
    ap.add_argument("--flash-dir", default=None, help="directory for the flash file (an SSD; default: a temp dir)")
    ap.add_argument("--slap-n", type=int, default=50_000, help="memcslap --execute-number (per thread)")
    ap.add_argument("--slap-memory-mib", type=int, default=256, help="(4)/(5): every server's memory")
    ap.add_argument("--mget-rounds", type=int, default=2_000, help="(5): get lines per connection")
    ap.add_argument("--only", choices=["memcslap"], help="run only (4) and (5)")
    ap.add_argument("--scale", action="store_true",
                    help="instead: the scale run against memcached + extstore (docstring of scale())")
    ap.add_argument("--scale-items", type=int, default=100_000_000, help="--scale: items set")
    ap.add_argument("--scale-mib", default="1024,4096", help="--scale: DRAM budgets in MiB")
    ap.add_argument("--scale-flash-gib", type=int, default=20, help="--scale: flash file of each server")
    ap.add_argument("--scale-ops", type=int, default=400_000, help="--scale: requests per measured run")
    ap.add_argument("--scale-piece", default=None,
                    help="--scale: run one piece, BUDGET_MIB:SERVER (e.g. 1024:inpath); the pieces' "
                         "files in bench/out/scale/ are joined into one report by --scale-join")
    ap.add_argument("--scale-join", action="store_true", help="--scale: join the pieces into the report")
    ap.add_argument("--seal-cost", action="store_true",
                    help="instead: run (2) on inpath without and with --seal-key (the cost of sealing)")
    args = ap.parse_args()
    if args.scale:
        return scale(args)
    if args.seal_cost:
        return seal_cost(args)
    if not shutil.which("memcached"):
        sys.exit("bench: memcached is not installed (apt-get install memcached)")
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "inpath-cli"], cwd=common.ROOT, check=True)
    version = subprocess.run(["memcached", "-V"], capture_output=True, text=True).stdout.strip()
    report = common.Report("cache", {
        "peer": version, "threads": args.threads, "memory_mib": args.memory_mib, "conns": args.conns,
        "value_bytes": 1024, "zipf": 0.99, "backend_delay_us": args.backend_us, "ops": args.ops,
        "command": " ".join(sys.argv),
    })
    tmp = tempfile.mkdtemp(prefix="inpath-cache-bench-", dir=args.flash_dir)
    flash_mib = 10 * args.memory_mib
    results = {}
    if args.only == "memcslap":
        report.run_name = "cache-memcslap" + ("" if args.slap_memory_mib == 256 else f"-{args.slap_memory_mib}mib")
        try:
            memcslap_section(args, report, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        report.save()
        return
    try:
        memcslap_section(args, report, tmp)
        # (1) Both servers up at once; measured runs alternate, medians reported.
        pi, pm = common.free_port(), common.free_port()
        si = start_inpath(pi, args.memory_mib, os.path.join(tmp, "dram.flash"), flash_mib, args.threads)
        sm = start_memcached(pm, args.memory_mib, args.threads)
        try:
            runs = {"inpath": [], "memcached": []}
            for port in (pi, pm):
                warm(port, 20_000, args.warmup_small, 0, args.conns)
            for rep in range(args.reps):
                for who, port, proc in (("inpath", pi, si), ("memcached", pm, sm)):
                    runs[who].append(measure(port, proc.p.pid, 20_000, args.ops, 0, args.conns, seed=10 + rep))
            for who in runs:
                rs = sorted(runs[who], key=lambda r: r["server_cpu_us_per_1000_ops_proc"])
                med = dict(rs[len(rs) // 2])
                med["all_cpu_us_per_1000_ops"] = [r["server_cpu_us_per_1000_ops_proc"] for r in runs[who]]
                med["all_ops_per_sec"] = [r["ops_per_sec"] for r in runs[who]]
                results[("dram", who)] = med
        finally:
            si.stop()
            sm.stop()
        # (2) and (3): one server at a time (the page cache must not help inpath's flash file).
        for who in ("inpath", "memcached"):
            port = common.free_port()
            if who == "inpath":
                p = start_inpath(port, args.memory_mib, os.path.join(tmp, "big.flash"), flash_mib, args.threads)
            else:
                p = start_memcached(port, args.memory_mib, args.threads)
            try:
                delays = [int(x) for x in str(args.backend_us).split(",")]
                warm(port, args.big_keys, args.warmup_big, delays[0], args.conns)
                r = measure(port, p.p.pid, args.big_keys, args.ops, delays[0], args.conns)
                r["by_delay"] = {delays[0]: r.copy()}
                for i, dl in enumerate(delays[1:]):
                    r["by_delay"][dl] = measure(port, p.p.pid, args.big_keys, args.ops, dl, args.conns, seed=3 + i)
                r["stats"] = stats(port)
                if who == "inpath":
                    probes = {}
                    for prefix in ("absent:", "key:"):
                        s0 = stats(port)
                        run = subprocess.run(bench_args(port, 20_000, 20_000, 99, None, 1, get_ratio=1,
                                                        extra=["--key-prefix", prefix]),
                                             check=True, capture_output=True, text=True)
                        probes[prefix] = {"before": s0, "after": stats(port), "run": json.loads(run.stdout)}
                    r["probes"] = probes
                results[("big", who)] = r
            finally:
                p.stop()
        d_i, d_m = results[("dram", "inpath")], results[("dram", "memcached")]
        line(report, "(1) DRAM working set: server CPU per 1000 ops", d_i["server_cpu_us_per_1000_ops_proc"],
             d_m["server_cpu_us_per_1000_ops_proc"], "us", "lower")
        line(report, "(1) DRAM working set: ops/s (client-bound)", d_i["ops_per_sec"], d_m["ops_per_sec"],
             "ops/s", "higher")
        line(report, "(1) DRAM working set: hit rate", d_i["hit_rate"], d_m["hit_rate"], "", "higher")
        b_i, b_m = results[("big", "inpath")], results[("big", "memcached")]
        line(report, f"(2) 10x DRAM, Zipf .99, backend {list(b_i['by_delay'])[0]} us: miss ratio", b_i["miss_ratio"], b_m["miss_ratio"],
             "", "lower")
        line(report, "(2) 10x DRAM: end-to-end requests/s", b_i["ops_per_sec"], b_m["ops_per_sec"], "req/s",
             "higher")
        line(report, "(2) 10x DRAM: p50 latency", b_i["p50_us"], b_m["p50_us"], "us", "lower")
        line(report, "(2) 10x DRAM: p99 latency", b_i["p99_us"], b_m["p99_us"], "us", "lower")
        line(report, "(2) 10x DRAM: server CPU per 1000 ops", b_i["server_cpu_us_per_1000_ops_proc"],
             b_m["server_cpu_us_per_1000_ops_proc"], "us", "lower")
        for dl in list(b_i["by_delay"])[1:]:
            ri, rm = b_i["by_delay"][dl], b_m["by_delay"][dl]
            line(report, f"(2) backend {dl} us: miss ratio", ri["miss_ratio"], rm["miss_ratio"], "", "lower")
            line(report, f"(2) backend {dl} us: end-to-end requests/s", ri["ops_per_sec"], rm["ops_per_sec"],
                 "req/s", "higher")
            line(report, f"(2) backend {dl} us: p99 latency", ri["p99_us"], rm["p99_us"], "us", "lower")
        s = b_i["stats"]
        flash_hits = float(s["flash_hits"])
        per_item = float(s["index_bytes"]) / max(1.0, float(s["curr_items"]))
        report.note(f"(1) server CPU per 1000 ops, all runs: inpath {d_i['all_cpu_us_per_1000_ops']}, "
                    f"memcached {d_m['all_cpu_us_per_1000_ops']}")
        report.note(f"(3) index DRAM per item: {per_item:.2f} bytes ({s['index_bytes']} bytes of index, "
                    f"{s['curr_items']} items, {s['flash_items']} of them on flash only)")
        report.note(f"(3) flash reads per flash hit over run (2): {float(s['flash_reads']) / max(1.0, flash_hits):.4f} "
                    f"({s['flash_reads']} reads, {s['flash_hits']} flash hits)")
        for prefix, pr in b_i["probes"].items():
            d = lambda k: float(pr["after"][k]) - float(pr["before"][k])  # noqa: E731
            misses = pr["run"]["gets"] * (1 - pr["run"]["hit_rate"])
            report.note(f"(3) probe: {pr['run']['gets']} gets of '{prefix}N' keys: {misses:.0f} misses, "
                        f"{d('flash_reads'):.0f} flash reads, {d('flash_hits'):.0f} flash hits, "
                        f"{d('index_false_positives'):.0f} index false positives")
        report.note(f"flash file read with O_DIRECT: {'yes' if s['flash_direct_io'] == '1' else 'no (buffered)'}; "
                    f"DRAM values {s['dram_items']} items; evictions {s['evictions']}; "
                    f"chunks reclaimed {s['flash_chunks_reclaimed']}")
        report.note(f"memcached evictions in (2): {b_m['stats'].get('evictions')}; "
                    f"curr_items {b_m['stats'].get('curr_items')}")
        report.setup["raw"] = {f"{k[0]}/{k[1]}": v for k, v in results.items()}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.save()


MEMCSLAP_PHASE = re.compile(r"Time to (get|mget|set)\s+(\d+) keys by\s+(\d+) threads:\s+([0-9.]+) seconds")


def memcslap(port, test, threads, n, binary=False, flush=True):
    """One memcslap run; returns (requests in the measured phase, its seconds)."""
    # --flush: each run starts from an empty cache (memcslap's keys are new every run).
    args = ["memcslap", f"--servers=127.0.0.1:{port}", f"--test={test}", f"--concurrency={threads}",
            f"--execute-number={n}", "--tcp-nodelay"] + (["--flush"] if flush else [])
    if binary:
        args.append("--binary")
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=600).stdout
    m = MEMCSLAP_PHASE.search(out)
    if not m:
        raise RuntimeError(f"memcslap printed no timing: {out}")
    return int(m.group(2)), float(m.group(4))


def multiget_client(port, keys, batch, rounds, conns):
    """`conns` connections each send `rounds` get lines of `batch` keys and read the replies;
    returns the keys answered and the seconds."""
    names = [f"key:{i}".encode() for i in range(keys)]
    got = [0] * conns

    def one(c):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = s.makefile("rb")
        for r in range(rounds):
            start = (r * batch * 7 + c * 997) % (keys - batch)
            s.sendall(b"get " + b" ".join(names[start:start + batch]) + b"\r\n")
            while True:
                line = f.readline()
                if line == b"END\r\n":
                    break
                if not line.startswith(b"VALUE "):
                    raise RuntimeError(f"unexpected reply {line[:80]!r}")
                f.read(int(line.split()[3]) + 2)
                got[c] += 1
        s.close()

    t0 = time.perf_counter()
    ts = [threading.Thread(target=one, args=(c,)) for c in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(got), time.perf_counter() - t0


def memcslap_section(args, report, tmp):
    """(4) memcslap single gets, multigets and sets; (5) 100-key multigets."""
    if not shutil.which("memcslap"):
        report.note("(4) skipped: memcslap is not installed (apt-get install libmemcached-tools)")
        return
    servers = {}
    ports = {"memcached": common.free_port(), "inpath": common.free_port(), "inpath-dram": common.free_port()}
    # memcslap's values average about 2.6 KB: its 50k keys take ~130 MB, so the DRAM budget is
    # --slap-memory-mib (256 by default) to keep the working set in DRAM for every server.
    mem = args.slap_memory_mib
    servers["memcached"] = start_memcached(ports["memcached"], mem, args.threads)
    servers["inpath"] = start_inpath(ports["inpath"], mem, os.path.join(tmp, "slap.flash"), 4 * mem,
                                     args.threads)
    servers["inpath-dram"] = start_inpath_dram(ports["inpath-dram"], mem, args.threads)
    order = ["inpath", "inpath-dram", "memcached"]

    def rounds(run):
        """`run(who)` -> (operations, seconds), alternated over the servers for --reps rounds:
        per server the server CPU per 1000 operations and the operations per second."""
        per = {w: [] for w in order}
        rate = {w: [] for w in order}
        for _ in range(args.reps):
            for who in order:
                pid = servers[who].p.pid
                c0 = common.cpu_seconds(pid)
                ops, secs, cpu_ops = run(who)
                c1 = common.cpu_seconds(pid)
                per[who].append((c1 - c0) * 1e6 / cpu_ops * 1000)
                rate[who].append(ops / secs)
        return per, rate

    def lines(name, per, cpu_unit, rate, rate_unit):
        for who in ("inpath", "inpath-dram"):
            label = "" if who == "inpath" else " (inpath DRAM only)"
            line(report, f"{name}: server CPU per 1000 {cpu_unit}{label}", statistics.median(per[who]),
                 statistics.median(per["memcached"]), "us", "lower",
                 extra={"runs_inpath": per[who], "runs_memcached": per["memcached"]})
            line(report, f"{name}: {rate_unit}{label}", statistics.median(rate[who]),
                 statistics.median(rate["memcached"]), rate_unit, "higher",
                 extra={"runs_inpath": rate[who], "runs_memcached": rate["memcached"]})

    try:
        for test in ("get", "mget", "set"):
            def slap(who, test=test):
                reqs, secs = memcslap(ports[who], test, 4, args.slap_n)
                # The CPU covers the whole run: the load phase sets the n keys first.
                return reqs, secs, reqs + (0 if test == "set" else args.slap_n)
            per, rate = rounds(slap)
            lines(f"(4) memcslap {test}", per, "requests", rate, "requests/s")
        for who in order:
            st = stats(ports[who])
            report.note(f"(4) {who} after memcslap: get_hits {st.get('get_hits')}, get_misses "
                        f"{st.get('get_misses')}, evictions {st.get('evictions')}, flash_hits "
                        f"{st.get('flash_hits', '-')}, dram_hits {st.get('dram_hits', '-')}")
        # (5) 100 keys per get, the keys set first by the project's load generator.
        for who in order:
            subprocess.run(bench_args(ports[who], 20_000, 1, 1, None, 1, extra=["--prefill"]),
                           check=True, capture_output=True)

        def mget(who):
            keys, secs = multiget_client(ports[who], 20_000, 100, args.mget_rounds, 4)
            return keys, secs, keys
        per, rate = rounds(mget)
        lines("(5) 100-key multigets", per, "keys", rate, "keys/s")
    finally:
        for p in servers.values():
            p.stop()


def seal_cost(args):
    """(2) on inpath twice: plain flash records, then records sealed by the seal engine."""
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "inpath-cli"], cwd=common.ROOT, check=True)
    report = common.Report("cache-seal", {"threads": args.threads, "memory_mib": args.memory_mib,
                                          "command": " ".join(sys.argv)})
    tmp = tempfile.mkdtemp(prefix="inpath-cache-bench-", dir=args.flash_dir)
    delay = int(str(args.backend_us).split(",")[0])
    out = {}
    try:
        keys = os.path.join(tmp, "keys.txt")
        subprocess.run([inpath_bin(), "seal", "keygen", "-o", keys], check=True, capture_output=True)
        for name, extra in (("plain", []), ("sealed", ["--seal-key", keys])):
            port = common.free_port()
            p = start_inpath(port, args.memory_mib, os.path.join(tmp, f"{name}.flash"), 10 * args.memory_mib,
                             args.threads, extra)
            try:
                warm(port, args.big_keys, args.warmup_big, delay, args.conns)
                r = measure(port, p.p.pid, args.big_keys, args.ops, delay, args.conns)
                r["stats"] = stats(port)
                out[name] = r
            finally:
                p.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    pl, se = out["plain"], out["sealed"]
    print(f"{'measurement':<44} {'plain':>12} {'sealed':>12}")
    for label, key in (("server CPU per 1000 ops (us)", "server_cpu_us_per_1000_ops_proc"),
                       ("end-to-end requests/s", "ops_per_sec"), ("miss ratio", "miss_ratio"),
                       ("p99 latency (us)", "p99_us")):
        print(f"{label:<44} {pl[key]:12.3f} {se[key]:12.3f}")
        report.rows.append({"measurement": label, "plain": pl[key], "sealed": se[key]})
    per = lambda r: float(r["stats"]["flash_bytes_written"]) / max(1.0, float(r["stats"]["total_items"]))  # noqa: E731
    report.note(f"flash bytes written per stored item: plain {per(pl):.0f}, sealed {per(se):.0f} "
                f"({se['stats']['flash_sealed']}; the benchmark's values are random bytes, so compression gains nothing)")
    report.save()


def rss_anon_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("RssAnon:"):
                return int(ln.split()[1])
    return 0


def disk_written(pid):
    """Bytes the process caused to be written to storage (/proc/PID/io write_bytes: O_DIRECT
    and page-cache writes alike)."""
    with open(f"/proc/{pid}/io") as f:
        return int(next(ln for ln in f if ln.startswith("write_bytes:")).split()[1])


def ask(port, line):
    """One text command; its whole reply up to END (or its one line)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    s.sendall(line.encode() + b"\r\n")
    data = b""
    while not (data.endswith(b"END\r\n") or (data.endswith(b"\r\n") and not data.startswith(b"STAT")
                                                and not data.startswith(b"VALUE"))):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def wait_serving(port, key, deadline_s=900):
    """Seconds until `get KEY` answers (the server has recovered and serves)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < deadline_s:
        try:
            ask(port, f"get {key}")
            return time.perf_counter() - t0
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"port {port} did not serve within {deadline_s} s")


def scale_bench(port, pid, n, ops, zipf, conns, get_ratio, seed):
    args = [inpath_bin(), "cache", "bench", "--server", f"127.0.0.1:{port}", "--keys", str(n),
            "--ops", str(ops), "--value-dist", "etc", "--zipf", str(zipf), "--get-ratio", str(get_ratio),
            "--conns", str(conns), "--seed", str(seed), "--json"]
    c0 = common.cpu_seconds(pid)
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=3600)
    c1 = common.cpu_seconds(pid)
    r = json.loads(out.stdout)
    r["server_cpu_ms_per_1000"] = (c1 - c0) * 1e3 / max(1, r["ops"]) * 1000
    return r


def scale_start(who, port, mib, flash, flash_gib, threads, log=None):
    if who == "inpath":
        # memcached's extstore command line, unchanged but for the binary.
        args = [inpath_bin(), "cache", "serve", "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", str(mib),
                "-t", str(threads), "-c", "4096", "-o", f"ext_path={flash}:{flash_gib}G,ext_item_size=64",
                "--avg-item-size", "384", "-v"]
    else:
        args = ["memcached", "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", str(mib), "-t", str(threads),
                "-c", "4096", "-o", f"ext_path={flash}:{flash_gib}G,ext_item_size=64"]
        if os.geteuid() == 0:
            args += ["-u", "root"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log or subprocess.DEVNULL)
    return p


def scale_piece(args, mib, who, out_dir, tmp):
    """One server at one DRAM budget: load, measure, restart, kill -9, restart."""
    n, ops = args.scale_items, args.scale_ops
    flash = os.path.join(tmp, f"{who}.flash")
    port = common.free_port()
    r = {"server": who, "memory_mib": mib, "items_set": n, "flash_gib": args.scale_flash_gib}
    log = open(os.path.join(out_dir, f"{mib}-{who}.log"), "a")
    p = scale_start(who, port, mib, flash, args.scale_flash_gib, args.threads, log)
    try:
        wait_serving(port, "none")
        pid = p.pid
        w0, c0 = disk_written(pid), common.cpu_seconds(pid)
        load = subprocess.run([inpath_bin(), "cache", "bench", "--server", f"127.0.0.1:{port}", "--keys", str(n),
                               "--ops", "0", "--value-dist", "etc", "--prefill", "--json"],
                              check=True, capture_output=True, text=True, timeout=7200)
        load = json.loads(load.stdout)
        time.sleep(10)  # what the servers still write after the last set
        r["load_seconds"] = load["prefill_seconds"]
        r["load_sets_per_s"] = n / load["prefill_seconds"]
        r["load_server_cpu_ms_per_1000"] = (common.cpu_seconds(pid) - c0) * 1e3 / n * 1000
        r["bytes_set"] = load["prefill_bytes"]
        r["disk_bytes_written"] = disk_written(pid) - w0
        r["write_amplification"] = r["disk_bytes_written"] / load["prefill_bytes"]
        st = stats(port)
        r["stats_after_load"] = st
        r["items_held"] = int(st["curr_items"])
        r["rss_anon_kib"] = rss_anon_kib(pid)
        r["dram_bytes_per_item"] = r["rss_anon_kib"] * 1024 / max(1, r["items_held"])
        print(f"  {who} {mib} MiB: loaded {n} in {r['load_seconds']:.0f} s, holds {r['items_held']}, "
              f"anon {r['rss_anon_kib'] >> 10} MiB = {r['dram_bytes_per_item']:.1f} B/item, "
              f"WA {r['write_amplification']:.2f}", flush=True)
        runs = {}
        for name, zipf, conns, ratio in (("get_zipf_c4", 0.99, 4, 1.0), ("get_uniform_c4", 0.0, 4, 1.0),
                                         ("get_zipf_c64", 0.99, 64, 1.0), ("set_zipf_c4", 0.99, 4, 0.0),
                                         ("set_zipf_c64", 0.99, 64, 0.0)):
            runs[name] = scale_bench(port, pid, n, ops, zipf, conns, ratio, seed=len(runs) + 3)
            x = runs[name]
            print(f"  {who} {mib} MiB {name}: {x['ops_per_sec']:.0f}/s hit {x['hit_rate']:.4f} "
                  f"p50/p99/p99.9 {x['p50_us']:.0f}/{x['p99_us']:.0f}/{x['p999_us']:.0f} us, "
                  f"server CPU {x['server_cpu_ms_per_1000']:.1f} ms/1000", flush=True)
        r["runs"] = runs
        r["stats_end"] = stats(port)
        r["rss_anon_kib_end"] = rss_anon_kib(pid)
        # Restart after a clean stop, then after kill -9.
        probe_key = "key:1"
        t0 = time.perf_counter()
        p.terminate()
        p.wait(timeout=900)
        r["stop_seconds"] = time.perf_counter() - t0
        for how in ("restart", "kill9"):
            t0 = time.perf_counter()
            p = scale_start(who, port, mib, flash, args.scale_flash_gib, args.threads, log)
            r[f"{how}_seconds"] = wait_serving(port, probe_key) + 0 * t0
            st = stats(port)
            r[f"{how}_items"] = int(st["curr_items"])
            print(f"  {who} {mib} MiB {how}: serving after {r[f'{how}_seconds']:.1f} s, "
                  f"{r[f'{how}_items']} items", flush=True)
            if how == "restart":
                # Some sets after the restart, then kill -9 (what the log flushed must come back).
                subprocess.run([inpath_bin(), "cache", "bench", "--server", f"127.0.0.1:{port}", "--keys",
                                str(n), "--ops", "20000", "--value-dist", "etc", "--get-ratio", "0.5", "--json"],
                               check=True, capture_output=True, timeout=600)
                time.sleep(1)
                p.kill()
                p.wait()
        # Last, on the server back from kill -9: memcslap (its own keys, no flush).
        pid = p.pid
        slap = {}
        for test in ("get", "set"):
            for conc in (4, 64):
                c0 = common.cpu_seconds(pid)
                reqs, secs = memcslap(port, test, conc, max(1000, 200_000 // conc), flush=False)
                slap[f"{test}_c{conc}"] = {"requests": reqs, "seconds": secs, "per_s": reqs / secs,
                                           "server_cpu_ms_per_1000": (common.cpu_seconds(pid) - c0) * 1e3 / reqs * 1000}
        r["memcslap"] = slap
    finally:
        p.kill()
        p.wait()
        log.close()
        try:
            os.remove(flash)
            os.remove(flash + ".ckpt")
        except OSError:
            pass
    with open(os.path.join(out_dir, f"{mib}-{who}.json"), "w") as f:
        json.dump(r, f, indent=1)
    return r


def scale(args):
    """The scale run (issue 56): inpath against memcached 1.6.18 with extstore, both started
    with the same extstore command line (`-m MIB -o ext_path=FILE:SIZEG,ext_item_size=64`; inpath
    adds only --avg-item-size), one server at a time on the same disk. Per DRAM budget and server:
    every key set once (values of Facebook's ETC mix, 100 B to 4 KiB, by `inpath cache bench
    --prefill`, one pipelined connection); then items held (curr_items), the whole process's
    anonymous memory per item held (RssAnon), write amplification (/proc/PID/io write_bytes per
    key and value byte set), gets under Zipf 0.99 and uniform keys at 4 connections and Zipf at
    64, sets at 4 and 64 (`inpath cache bench`: hit ratio, rate, p50/p99/p99.9, server CPU from
    /proc/PID/stat), memcslap get and set at 4 and 64 (its own keys: the independent load
    generator), then the time to serve again after a clean stop and after kill -9.
    Run it in pieces (each under its own cpulock): --scale-piece 1024:inpath, ... then
    --scale-join."""
    out_dir = os.path.join(common.ROOT, "bench", "out", "scale")
    os.makedirs(out_dir, exist_ok=True)
    budgets = [int(x) for x in args.scale_mib.split(",")]
    if not args.scale_join:
        pieces = ([tuple(args.scale_piece.split(":"))] if args.scale_piece
                  else [(str(m), w) for m in budgets for w in ("memcached", "inpath")])
        subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "inpath-cli"], cwd=common.ROOT, check=True)
        for mib, who in pieces:
            tmp = tempfile.mkdtemp(prefix="inpath-scale-", dir=args.flash_dir)
            try:
                free = shutil.disk_usage(tmp).free
                if free < (args.scale_flash_gib + 4) << 30:
                    sys.exit(f"bench: {free >> 30} GiB free in {tmp}: too little for a "
                             f"{args.scale_flash_gib} GiB flash file")
                scale_piece(args, int(mib), who, out_dir, tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        if args.scale_piece:
            return
    version = subprocess.run(["memcached", "-V"], capture_output=True, text=True).stdout.strip()
    report = common.Report("cache", {"peer": version + " with extstore", "threads": args.threads,
                                     "items": args.scale_items, "flash_gib": args.scale_flash_gib,
                                     "value_dist": "ETC (generalized Pareto 214.476/0.348238) held to 100..4096 B",
                                     "command": " ".join(sys.argv)}, run_name="cache-scale")
    for mib in budgets:
        got = {}
        for who in ("inpath", "memcached"):
            path = os.path.join(out_dir, f"{mib}-{who}.json")
            if os.path.exists(path):
                with open(path) as f:
                    got[who] = json.load(f)
        if len(got) < 2:
            report.note(f"{mib} MiB: pieces missing ({sorted(got)})")
            continue
        i, m = got["inpath"], got["memcached"]
        tag = f"[{mib} MiB]"
        line(report, f"{tag} items held", i["items_held"], m["items_held"], "items", "higher")
        line(report, f"{tag} DRAM (anon) per item held", i["dram_bytes_per_item"], m["dram_bytes_per_item"],
             "B", "lower", extra={"rss_anon_kib": [i["rss_anon_kib"], m["rss_anon_kib"]]})
        line(report, f"{tag} write amplification (disk/set)", i["write_amplification"],
             m["write_amplification"], "x", "lower")
        line(report, f"{tag} bulk load sets/s (1 conn)", i["load_sets_per_s"], m["load_sets_per_s"], "sets/s",
             "higher")
        for run, label in (("get_zipf_c4", "gets Zipf .99, 4 conns"), ("get_uniform_c4", "gets uniform, 4 conns"),
                           ("get_zipf_c64", "gets Zipf .99, 64 conns"), ("set_zipf_c4", "sets, 4 conns"),
                           ("set_zipf_c64", "sets, 64 conns")):
            a, b = i["runs"][run], m["runs"][run]
            if run.startswith("get"):
                line(report, f"{tag} {label}: hit ratio", a["hit_rate"], b["hit_rate"], "", "higher")
            line(report, f"{tag} {label}: per s", a["ops_per_sec"], b["ops_per_sec"], "/s", "higher")
            for q in ("p50_us", "p99_us", "p999_us"):
                line(report, f"{tag} {label}: {q}", a[q], b[q], "us", "lower")
            line(report, f"{tag} {label}: server CPU per 1000", a["server_cpu_ms_per_1000"],
                 b["server_cpu_ms_per_1000"], "ms", "lower")
        for k in ("get_c4", "get_c64", "set_c4", "set_c64"):
            a, b = i["memcslap"][k], m["memcslap"][k]
            line(report, f"{tag} memcslap {k}: per s", a["per_s"], b["per_s"], "/s", "higher")
            line(report, f"{tag} memcslap {k}: server CPU per 1000", a["server_cpu_ms_per_1000"],
                 b["server_cpu_ms_per_1000"], "ms", "lower")
        for how in ("restart", "kill9"):
            report.note(f"{tag} {how}: inpath serves after {i[how + '_seconds']:.1f} s with {i[how + '_items']} "
                        f"items; memcached after {m[how + '_seconds']:.1f} s with {m[how + '_items']}")
        report.setup[f"raw_{mib}"] = got
    report.save()


if __name__ == "__main__":
    main()

"""store benchmark: kernels inside the page store against the tools a user would run.

    bash bench/setup.sh && .venv/bin/python bench/store.py [--sf 1.35] [--reps 5] [--only grep]

grep: TPC-H lineitem as pipe-separated text from `tpchgen-cli` (bench requirements; SF 1.35 is
about 1 GB), put into an `inpath store` directory as raw 8 KiB pages and as AES-256-GCM sealed
pages. Every measurement is the wall time of a whole process, median of --reps runs after a
warm-up, page cache warm: `inpath store grep DIR 1 PATTERN --count [--regex] --threads N`
against `grep -c -F|-E` and `rg -c [-F]` (ripgrep, one file: one thread, memory-mapped) over
the same bytes; the counts must agree. Then cold: the file evicted from the page cache before
each run, `--direct` (O_DIRECT) against `dd iflag=direct bs=1M` and the CPU cores each tool
uses. Issue 15's targets: literal search >= 1.0x ripgrep on 1 thread, >= 1.6x on 2; regex
>= 1.0x ripgrep; cold >= 90% of dd at <= 0.15 core; bytes returned <= 0.1% of bytes scanned.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROOT = common.ROOT
DATA = os.path.join(common.OUT, "data")


def inpath_bin():
    return os.path.join(os.path.dirname(common.bench_bin()), "inpath")


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def run_peer(cmd):
    """grep and rg exit 1 when nothing matches; that is a count of 0, not a failure."""
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise subprocess.CalledProcessError(out.returncode, cmd, out.stdout, out.stderr)
    return out.stdout


def child_run(cmd, ok=(0,)):
    """Runs `cmd`; returns (wall seconds, CPU seconds of the child, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode not in ok:
        raise subprocess.CalledProcessError(out.returncode, cmd, out.stdout, out.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout


def evict(path):
    """Drops a file's pages from the page cache (posix_fadvise DONTNEED after fsync)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def median_of(fn, reps):
    runs = [fn() for _ in range(reps)]
    runs.sort(key=lambda r: r[0])
    return runs[len(runs) // 2]


def corpus(sf):
    """TPC-H lineitem.tbl at scale `sf` (pipe-separated text; SF 1.35 is about 1 GB)."""
    gen = os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
    if not os.path.exists(gen):
        sys.exit("store.py: tpchgen-cli is missing; run bash bench/setup.sh")
    os.makedirs(DATA, exist_ok=True)
    text = os.path.join(DATA, f"lineitem-sf{sf}.tbl")
    if not os.path.exists(text):
        with tempfile.TemporaryDirectory(dir=DATA) as tmp:
            run([gen, "tbl", "-s", sf, "--tables=lineitem", f"--output-dir={tmp}"])
            os.replace(os.path.join(tmp, "lineitem.tbl"), text)
    return text


def bench_grep(args, report, inpath):
    text = corpus(args.sf)
    size = os.path.getsize(text)
    report.note(f"grep: lineitem.tbl SF {args.sf}, {size / 1e9:.2f} GB, 8 KiB pages")
    peers = [("grep -c -F", ["grep", "-c", "-F"])]
    regex_peers = [("grep -c -E", ["grep", "-c", "-E"])]
    have_rg = shutil.which("rg") is not None
    if have_rg:
        # One file: ripgrep searches it on one thread, memory-mapped.
        peers.append(("rg -c -F", ["rg", "-c", "-F", "--no-config", "--mmap"]))
        regex_peers.append(("rg -c", ["rg", "-c", "--no-config", "--mmap"]))
    else:
        report.note("ripgrep not found (bash bench/setup.sh installs it): grep only")
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        raw = os.path.join(tmp, "raw")
        sealed = os.path.join(tmp, "sealed")
        keys = os.path.join(tmp, "keys.txt")
        run([inpath, "store", "put", raw, text])
        run([inpath, "seal", "keygen", "-o", keys])
        run([inpath, "store", "put", sealed, text, "--seal-tier", "aes256-gcm", "--key-file", keys])
        searches = [("furiously", "common word", False, peers),
                    ("zzqx", "no match", False, peers),
                    ("fur[a-z]+ly", "regex word", True, regex_peers),
                    (r"\|0\.10\|0\.0[0-2]\|[AR]\|", "regex fields", True, regex_peers)]
        for pattern, what, is_regex, peer_list in searches:
            peer_times = {}
            expected = None
            for name, cmd in peer_list:
                t, _, out = common.time_median(lambda c=cmd: run_peer([*c, pattern, text]), reps=args.reps)
                count = int(out.strip() or 0)
                expected = count if expected is None else expected
                if count != expected:
                    sys.exit(f"store.py: {name} counted {count}, expected {expected}")
                peer_times[name] = t
            flag = ["--regex"] if is_regex else []
            for store, label, extra in [(raw, "raw", []), (sealed, "gcm", ["--key-file", keys])]:
                for threads in (1, 2):
                    cmd = [inpath, "store", "grep", store, "1", pattern, "--count", *flag,
                           "--threads", str(threads), *extra]
                    t, _, out = common.time_median(lambda c=cmd: run(c), reps=args.reps)
                    count = int(out.strip().split()[-1])
                    if count != expected:
                        sys.exit(f"store.py: inpath store grep counted {count}, expected {expected}")
                    for name, pt in peer_times.items():
                        report.add(f"grep {what} {label} t{threads} vs {name}", size, t, name, pt,
                                   {"lines": count, "threads": threads, "pages": label})
            counters = json.loads(run([inpath, "store", "grep", raw, "1", pattern, "--count", *flag,
                                       "--json"]))
            report.note(f"  {pattern!r}: bytes returned {counters['bytes_returned']} of "
                        f"{counters['bytes_scanned']} scanned "
                        f"({counters['bytes_returned'] / counters['bytes_scanned'] * 100:.6f} %)")
        # Cold: the data file out of the page cache before every run. O_DIRECT reads against
        # dd iflag=direct (throughput), and the CPU each search uses (cores = CPU s / wall s).
        data_file = os.path.join(raw, "pages", "1-1.pages")

        def cold(cmd, path, ok=(0,)):
            evict(path)
            return child_run(cmd, ok)

        dd = ["dd", f"if={data_file}", "of=/dev/null", "bs=1M", "iflag=direct"]
        direct = [inpath, "store", "grep", raw, "1", "furiously", "--count", "--direct", "--json"]
        # dd and inpath alternate, so both see the same state of the disk (a virtual disk's
        # host cache makes back-to-back blocks of runs drift apart).
        dd_runs, runs = [], []
        for _ in range(args.reps):
            dd_runs.append(cold(dd, data_file))
            runs.append(cold(direct, data_file))
        dd_wall, dd_cpu, _ = sorted(dd_runs, key=lambda r: r[0])[len(dd_runs) // 2]
        wall, cpu, out = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
        info = json.loads(out)
        report.add("cold grep O_DIRECT raw t1 vs dd iflag=direct", size, wall, "dd iflag=direct bs=1M",
                   dd_wall, {"cores": cpu / wall, "dd_cores": dd_cpu / dd_wall,
                             "cpu_seconds_per_gb": info["cpu_seconds_per_gb"],
                             "read_path": info["read_path"]})
        report.note(f"  cold O_DIRECT: {size / wall / 1e9:.2f} GB/s at {cpu / wall:.2f} cores "
                    f"({cpu / (size / 1e9):.3f} CPU s/GB); dd iflag=direct {size / dd_wall / 1e9:.2f} GB/s "
                    f"= {dd_wall / wall * 100:.0f} % of dd")
        for name, cmd in peers:
            w, c, _ = median_of(lambda c=cmd: cold([*c, "furiously", text], text, ok=(0, 1)), args.reps)
            report.note(f"  cold {name}: {size / w / 1e9:.2f} GB/s at {c / w:.2f} cores")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sf", default="1.35", help="TPC-H scale factor of lineitem (1.35: ~1 GB)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--only", default="grep", help="comma-separated sections: grep")
    args = parser.parse_args()
    common.build()
    inpath = inpath_bin()
    report = common.Report("store", {"sf": args.sf})
    only = set(args.only.split(","))
    if "grep" in only:
        bench_grep(args, report, inpath)
    report.save()


if __name__ == "__main__":
    main()

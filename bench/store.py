"""store benchmark: literal search inside the page store against grep and ripgrep.

    bash bench/setup.sh && .venv/bin/python bench/store.py [--sf 0.3] [--reps 5]

Data: TPC-H lineitem as pipe-separated text from `tpchgen-cli` (bench requirements), put into
an `inpath store` directory as raw 8 KiB pages (and, for one row, sealed with AES-256-GCM).
Every measurement is the wall time of a whole process, median of --reps runs after a warm-up,
page cache warm: `inpath store grep DIR 1 PATTERN --count --threads N` against `grep -c -F`
and `rg -c -F` (ripgrep, one file: one thread, memory-mapped) over the same bytes. The counts
must agree. Issue 15's targets: literal search >= 1.0x ripgrep on 1 thread, >= 1.6x on 2.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sf", default="0.3", help="TPC-H scale factor of lineitem (0.3: ~220 MB)")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    common.build()
    gen = os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
    if not os.path.exists(gen):
        sys.exit("store.py: tpchgen-cli is missing; run bash bench/setup.sh")
    os.makedirs(DATA, exist_ok=True)
    text = os.path.join(DATA, f"lineitem-sf{args.sf}.tbl")
    if not os.path.exists(text):
        with tempfile.TemporaryDirectory(dir=DATA) as tmp:
            run([gen, "tbl", "-s", args.sf, "--tables=lineitem", f"--output-dir={tmp}"])
            os.replace(os.path.join(tmp, "lineitem.tbl"), text)
    size = os.path.getsize(text)
    report = common.Report("store", {"data": f"lineitem.tbl SF {args.sf}", "bytes": size})
    inpath = inpath_bin()
    peers = [("grep -c -F", ["grep", "-c", "-F"])]
    if shutil.which("rg"):
        peers.append(("rg -c -F", ["rg", "-c", "-F", "--no-config"]))
    else:
        report.note("ripgrep not found (bash bench/setup.sh installs it): grep only")
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        raw = os.path.join(tmp, "raw")
        sealed = os.path.join(tmp, "sealed")
        keys = os.path.join(tmp, "keys.txt")
        run([inpath, "store", "put", raw, text])
        run([inpath, "seal", "keygen", "-o", keys])
        run([inpath, "store", "put", sealed, text, "--seal-tier", "aes256-gcm", "--key-file", keys])
        for pattern, what in [("furiously", "common word"), ("zzqx", "no match")]:
            peer_times = {}
            expected = None
            for name, cmd in peers:
                t, _, out = common.time_median(lambda c=cmd: run_peer([*c, pattern, text]), reps=args.reps)
                count = int(out.strip() or 0)
                expected = count if expected is None else expected
                if count != expected:
                    sys.exit(f"store.py: {name} counted {count}, expected {expected}")
                peer_times[name] = t
            for store, label, extra in [(raw, "raw", []), (sealed, "gcm", ["--key-file", keys])]:
                for threads in (1, 2):
                    cmd = [inpath, "store", "grep", store, "1", pattern, "--count",
                           "--threads", str(threads), *extra]
                    t, _, out = common.time_median(lambda c=cmd: run(c), reps=args.reps)
                    count = int(out.strip().split()[-1])
                    if count != expected:
                        sys.exit(f"store.py: inpath store grep counted {count}, expected {expected}")
                    for name, pt in peer_times.items():
                        report.add(f"grep {what} {label} t{threads} vs {name}", size, t, name, pt,
                                   {"lines": count, "threads": threads, "pages": label})
    report.save()


if __name__ == "__main__":
    main()

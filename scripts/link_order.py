#!/usr/bin/env python3
"""Regenerate crates/inpath-cli/link/symbol-order.txt, the `inpath` binary's code layout.

Why: the binary holds about 75 MB of machine code (DataFusion, Arrow, sqlparser and the
engines), and a query touches some 9 MB of it, scattered. Linux maps file-backed code 64 KiB
around each page fault (fault-around), so a scattered 9 MB costs a process 40-50 MiB of resident
memory: more than the offloaded host's own data. Laid out together at the front of `.text`, the
same functions cost about 10 MiB. crates/inpath-cli/build.rs hands this file to the linker
(lld's --symbol-ordering-file); symbols it lists that the binary lacks are skipped, so a stale
file only loses memory, never correctness.

How: run the release binary under valgrind's callgrind, which records every function a process
executes, over the 22 TPC-H queries at scale factor 0.01, plain and sealed pages, 1 and 2
threads:
  - each query alone (plain pages at 1 thread, sealed at 2), offload off, and with the device
    in a process of its own (the host and the device traced apart);
  - all 22 in one process: offload off, the device local, the device in its own process.
The order, in three parts:
  1. the functions the host of a fully offloaded query runs (`query explain --offload` says
     which are full; the device in its own process), those run by the most single-query hosts
     first, so the code every query runs (start-up, parsing, planning, the final merge) comes
     first and each query's own functions follow together;
  2. the other host functions (offload off, or the host's share of a partly offloaded query:
     DataFusion's operators), in the same way;
  3. the ones only the device runs (its lanes, local or in its own process).
Ties keep the order in which the functions first ran (in an offloaded host, for part 1).
Fully offloaded hosts come first because theirs is the footprint that must stay small (issue
14: 60 % below offload off); elsewhere a query's resident memory is mostly its data.

Usage (repository root; about 12 minutes):
  cargo build --release -p inpath-cli && python3 scripts/link_order.py
then rebuild (`cargo build --release -p inpath-cli`) and commit the file. Rerun it when a
dependency or the Rust toolchain changes (symbol names carry a hash of the crate's version and
build), or when a query path changes much; it prints how many of the listed symbols the current
binary holds.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "inpath-cli", "link", "symbol-order.txt")
DEFINITION = re.compile(r"^c?fn=\(\d+\) (.+)$")


def executed_functions(path):
    """The command line a callgrind output file traced, and the functions it names in the
    order they first appear (callgrind names a function when it first records it, so this
    follows first execution closely). Mangled names only: C symbols and addresses without a
    symbol are left out, and callgrind's recursion suffix ('2) is dropped."""
    command, names, seen = "", [], set()
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("cmd:"):
                command = line[4:].strip()
                continue
            m = DEFINITION.match(line.rstrip("\n"))
            if not m:
                continue
            name = re.sub(r"'\d+$", "", m.group(1))
            if name.startswith(("_ZN", "_R")) and name not in seen:
                seen.add(name)
                names.append(name)
    return command, names


def traced(binary, args, workdir, stem):
    """Run `binary args` under callgrind, children too; return [(command line, functions)]."""
    prefix = os.path.join(workdir, stem)
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--demangle=no",
           "--dump-instr=no", f"--callgrind-out-file={prefix}.%p", binary, *args]
    run = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.exit(f"link_order.py: {' '.join(args)} failed under valgrind:\n{run.stderr[-2000:]}")
    out = []
    for name in sorted(os.listdir(workdir)):
        if name.startswith(stem + "."):
            path = os.path.join(workdir, name)
            out.append(executed_functions(path))
            os.remove(path)
    return out


def binary_symbols(binary):
    """The function symbols the binary defines (for the coverage report)."""
    nm = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True)
    return {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "inpath"))
    ap.add_argument("--output", default=OUT)
    ap.add_argument("--sf", default="0.01", help="TPC-H scale factor of the traced runs")
    args = ap.parse_args()
    if shutil.which("valgrind") is None and shutil.which("apt-get"):
        print("link_order.py: installing valgrind (Debian package)", file=sys.stderr)
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "valgrind"],
                       stdout=subprocess.DEVNULL, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if shutil.which("valgrind") is None:
        sys.exit("link_order.py: valgrind not found and not installable here (Debian: apt-get install valgrind)")
    if not os.path.exists(args.binary):
        sys.exit(f"link_order.py: {args.binary} not found; cargo build --release -p inpath-cli first")
    binary = os.path.abspath(args.binary)

    with tempfile.TemporaryDirectory(prefix="inpath-link-order-") as tmp:
        keys = os.path.join(tmp, "keys.txt")
        plain, sealed = os.path.join(tmp, "plain"), os.path.join(tmp, "sealed")
        subprocess.run([binary, "seal", "keygen", "-o", keys], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([binary, "query", "gen", "--sf", args.sf, plain, "-q"], check=True)
        subprocess.run([binary, "query", "gen", "--sf", args.sf, "--tier", "lz4+aes256-gcm",
                        "--key-file", keys, sealed, "-q"], check=True)
        traces = os.path.join(tmp, "traces")
        os.mkdir(traces)
        explain = subprocess.run([binary, "query", "explain", plain, "--offload", "--json"],
                                 check=True, capture_output=True, text=True)
        full = {int(q["query"][1:]) for q in json.loads(explain.stdout)["queries"]
                if q["class"] == "full"}

        host_runs = defaultdict(int)  # host function -> single-query host processes that ran it
        offloaded_runs = defaultdict(int)  # the same, counting offloaded hosts only
        first = {}                    # function -> rank of its first execution over all runs
        first_offloaded = {}          # function -> rank of its first run in an offloaded host
        device = set()                # functions a device process or local lanes ran

        data = [("plain", plain, []), ("sealed", sealed, ["--key-file", keys])]
        runs = []
        for q in range(1, 23):
            # Plain pages at 1 thread, sealed at 2, so both thread counts' start-up is traced.
            for (pages, directory, key), threads in zip(data, ("1", "2")):
                for mode in ([], ["--offload", "--device", "process"]):
                    runs.append((["query", "tpch", directory, *key, "--queries", str(q),
                                  "--threads", threads, "--runs", "1", *mode], q,
                                 f"Q{q} {pages} {threads} thread(s) {' '.join(mode) or 'offload off'}"))
        for threads in ("1", "2"):
            for pages, directory, key in data:
                for mode in ([], ["--offload"], ["--offload", "--device", "process"]):
                    runs.append((["query", "tpch", directory, *key, "--threads", threads,
                                  "--runs", "1", *mode], None,
                                 f"Q1-22 {pages} {threads} threads {' '.join(mode) or 'offload off'}"))
        for i, (run_args, query, label) in enumerate(runs):
            single = query is not None
            print(f"\r[{i + 1}/{len(runs)}] {label:60}", end="", file=sys.stderr, flush=True)
            local = "--offload" in run_args and "process" not in run_args
            for command, functions in traced(binary, run_args, traces, f"run{i}"):
                for name in functions:
                    first.setdefault(name, len(first))
                if local or "serve-device" in command:
                    # The device's own process, or local lanes in the host's: what these run
                    # and no host process does is the device's (filtered below).
                    device.update(functions)
                else:
                    # The host of a query the device runs whole: parts 1 and 2 below.
                    offloaded = "--offload" in run_args and query in full
                    for name in functions:
                        host_runs[name] += int(single)
                        if offloaded:  # a single-query run, so it counts
                            first_offloaded.setdefault(name, len(first_offloaded))
                            offloaded_runs[name] += 1
        print(file=sys.stderr)

    # A fully offloaded host's code first and dense, as it is the one that must stay small:
    # what every such host runs (start-up, parsing, planning, the final merge), then what fewer
    # queries run, each query's own functions together. Then the other hosts' (DataFusion's
    # operators over Arrow), then the device's.
    offloaded_host = sorted(offloaded_runs, key=lambda f: (-offloaded_runs[f], first_offloaded[f]))
    host_off = sorted((f for f in host_runs if f not in offloaded_runs),
                      key=lambda f: (-host_runs[f], first[f]))
    host = offloaded_host + host_off
    rest = sorted((f for f in device if f not in host_runs), key=lambda f: first[f])
    order = host + rest
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    tmp_out = args.output + ".tmp"
    with open(tmp_out, "w") as f:
        f.write("\n".join(order) + "\n")
    os.replace(tmp_out, args.output)
    have = binary_symbols(binary)
    found = sum(1 for f in order if f in have)
    print(f"link_order.py: wrote {len(order)} functions ({len(offloaded_host)} offloaded host, "
          f"{len(host_off)} other host, {len(rest)} device only) "
          f"to {os.path.relpath(args.output, ROOT)}; {found} of them are in {os.path.relpath(binary, ROOT)}")


if __name__ == "__main__":
    main()

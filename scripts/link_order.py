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
  - all 22 in one process: offload off, the device local, the device in its own process;
  - each fully offloaded query's host again at scale factor 1 (`--host-sf`), the device not
    traced: paths small tables never take (a hash table's growth) are listed too.
Each fully offloaded query's host is also run at SF 1 with offload off (not traced), for its
peak resident set.
The order, in three parts:
  1. the functions the host of a fully offloaded query runs (`query explain --offload` says
     which are full; the device in its own process), sorted by the set of those queries that
     run each one, read as a bit string whose first bit is the query with the smallest host
     without offload (its 60 % budget is the tightest and the code is most of it): that
     query's functions lie in one run, the next one's in at most two, and so on, with what
     every host runs (start-up, parsing, planning, the final merge) first;
  2. the other host functions (offload off, or the host's share of a partly offloaded query:
     DataFusion's operators), those run by the most single-query hosts first;
  3. the ones only the device runs (its lanes, local or in its own process).
Ties keep the order in which the functions first ran (in an offloaded host, for part 1).
Fully offloaded hosts come first because theirs is the footprint that must stay small (issue
14: 60 % below offload off); elsewhere a query's resident memory is mostly its data.

Usage (repository root; about 16 minutes):
  cargo build --release -p inpath-cli && python3 scripts/link_order.py
then rebuild (`cargo build --release -p inpath-cli`) and commit the file. Rerun it when a
dependency or the Rust toolchain changes (symbol names carry a hash of the crate's version and
build), or when a query path changes much; it prints how many of the listed symbols the current
binary holds. `--save-traces FILE` keeps the traced function lists, and `--traces FILE` lays
out from them again without tracing (to try another order).

After an edit to the engines' code (seconds, no tracing):
  cargo build --release -p inpath-cli && python3 scripts/link_order.py --refresh
An edit renames functions it did not touch: a new impl block renumbers the blocks after it in
the module, which changes their symbols' hashes, and any change to a codegen unit renames the
local functions ThinLTO promoted from it (the `.llvm.N` suffix). The linker skips the stale
names, and the hosts hold 3 MiB more code (Q2's offloaded host: 19.5 MiB instead of 16.5).
`--refresh` puts the binary's current name in each stale name's place, matched on the name
without its hash and suffix (where that matches few enough functions to be the same ones).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
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


def traced(binary, args, workdir, stem, skip_device=False):
    """Run `binary args` under callgrind, children too (the device's process left out where
    `skip_device`); return [(command line, functions)]."""
    prefix = os.path.join(workdir, stem)
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--demangle=no",
           "--dump-instr=no", f"--callgrind-out-file={prefix}.%p"]
    if skip_device:
        cmd.append("--trace-children-skip-by-arg=serve-device")
    run = subprocess.run([*cmd, binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    if run.returncode != 0:
        sys.exit(f"link_order.py: {' '.join(args)} failed under valgrind:\n{run.stderr[-2000:]}")
    out = []
    for name in sorted(os.listdir(workdir)):
        if name.startswith(stem + "."):
            path = os.path.join(workdir, name)
            out.append(executed_functions(path))
            os.remove(path)
    return out


LLVM_SUFFIX = re.compile(r"\.llvm\.(\d+)$")


def unsuffixed(name):
    """A symbol's name without ThinLTO's `.llvm.N` suffix (N hashes the codegen unit the
    function was promoted from, so any change to that unit renames all of them)."""
    return LLVM_SUFFIX.sub("", name)


def stable_key(name):
    """A symbol's name without what an unrelated edit changes: the `.llvm.N` suffix and, for
    the legacy mangling (`_ZN...17h<hash>E`), the hash (which covers the impl block's index in
    its module and the generic arguments). The v0 mangling (`_R`, the standard library's)
    names generic arguments itself; only its suffix goes."""
    name = unsuffixed(name)
    if name.startswith("_ZN"):
        name = re.sub(r"17h[0-9a-f]{16}E$", "E", name)
    return name


def text_symbols(binary):
    """The binary's function symbols in address order (`nm`)."""
    try:
        nm = subprocess.run(["nm", "--defined-only", "--numeric-sort", binary],
                            capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("link_order.py: nm not found (binutils; Debian: apt-get install binutils)")
    if nm.returncode != 0:
        sys.exit(f"link_order.py: nm failed on {binary}: {nm.stderr.strip()}")
    return [p[2] for p in (line.split() for line in nm.stdout.splitlines())
            if len(p) == 3 and p[1] in ("t", "T")]


def write_aside(path, text):
    """Write `text` to `path` through a file beside it renamed into place: a failure leaves the
    old file whole."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def refresh(order, binary):
    """`order` with each name the binary lacks replaced by the binary's name for the same
    function, among those the list does not hold yet:
      1. the same name with another `.llvm.N` suffix. Copies of one function promoted from
         several codegen units differ only there, so where more than one is left, the one
         whose suffix the stale name's unit now has (learnt from the stale names of that unit
         that match one function only) is taken;
      2. else the same name without its hash (a renumbered impl block). The legacy mangling
         gives every instance of a generic function that name, so where more are left than
         twice the stale names of that name (and more than 4), which were meant cannot be told
         and the stale name is dropped.
    Returns (new order, stale names, names put in their place)."""
    symbols = text_symbols(binary)
    have = set(symbols)
    listed = set(order)
    stale = [name for name in order if name not in have]
    stale_keys = defaultdict(int)
    for name in stale:
        stale_keys[stable_key(name)] += 1
    by_unsuffixed, by_key = defaultdict(list), defaultdict(list)
    for name in symbols:
        key = stable_key(name)
        if key in stale_keys and name not in listed:
            by_unsuffixed[unsuffixed(name)].append(name)
            by_key[key].append(name)
    # The unit each stale suffix now carries, by vote of its unambiguous names.
    votes = defaultdict(lambda: defaultdict(int))
    for name in stale:
        old = LLVM_SUFFIX.search(name)
        found = by_unsuffixed.get(unsuffixed(name), [])
        new = LLVM_SUFFIX.search(found[0]) if len(found) == 1 else None
        if old and new:
            votes[old.group(1)][new.group(1)] += 1
    unit = {old: max(new, key=new.get) for old, new in votes.items()}

    def renamed(name):
        same = by_unsuffixed.get(unsuffixed(name), [])
        old = LLVM_SUFFIX.search(name)
        if old and old.group(1) in unit:
            moved = f"{unsuffixed(name)}.llvm.{unit[old.group(1)]}"
            if moved in same:
                return [moved]
        if len(same) == 1:
            return same
        key = stable_key(name)
        found = by_key.get(key, [])
        return found if len(found) <= max(4, 2 * stale_keys[key]) else []

    out, placed = [], set()
    for name in order:
        for new in [name] if name in have else renamed(name):
            if new not in placed:
                placed.add(new)
                out.append(new)
    return out, len(stale), len(out) - (len(order) - len(stale))


def peak_rss(cmd):
    """The peak resident set (VmHWM, bytes) of a process running `cmd`, polled from /proc
    every millisecond (wait4's ru_maxrss would count this script's own, kept across exec)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                hwm = next((line for line in f if line.startswith("VmHWM:")), "VmHWM: 0 kB")
            peak = max(peak, int(hwm.split()[1]) * 1024)
        except (OSError, ValueError):
            pass
        time.sleep(0.001)
    if proc.returncode != 0:
        sys.exit(f"link_order.py: {' '.join(cmd)} failed (exit {proc.returncode})")
    return peak


def gen_tables(binary, tmp, sf, keys):
    """Plain and sealed TPC-H tables at `sf` under `tmp`: their (label, directory, key args)."""
    plain, sealed = os.path.join(tmp, f"plain-{sf}"), os.path.join(tmp, f"sealed-{sf}")
    subprocess.run([binary, "query", "gen", "--sf", sf, plain, "-q"], check=True)
    subprocess.run([binary, "query", "gen", "--sf", sf, "--tier", "lz4+aes256-gcm",
                    "--key-file", keys, sealed, "-q"], check=True)
    return [("plain", plain, []), ("sealed", sealed, ["--key-file", keys])]


def trace_runs(binary, sf, host_sf):
    """Every traced run: {"full": the fully offloaded queries, "runs": [{"label", "query" (None
    for all 22 in one process), "mode" ("off", "local" or "process"), "processes": [[command
    line, functions in first-run order]]}]}."""
    with tempfile.TemporaryDirectory(prefix="inpath-link-order-") as tmp:
        keys = os.path.join(tmp, "keys.txt")
        subprocess.run([binary, "seal", "keygen", "-o", keys], check=True, stdout=subprocess.DEVNULL)
        data = gen_tables(binary, tmp, sf, keys)
        explain = subprocess.run([binary, "query", "explain", data[0][1], "--offload", "--json"],
                                 check=True, capture_output=True, text=True)
        full = sorted(int(q["query"][1:]) for q in json.loads(explain.stdout)["queries"]
                      if q["class"] == "full")
        traces = os.path.join(tmp, "traces")
        os.mkdir(traces)
        modes = {"off": [], "local": ["--offload"], "process": ["--offload", "--device", "process"]}
        # (arguments, query, mode, label, device left out)
        runs = []
        for q in range(1, 23):
            # Plain pages at 1 thread, sealed at 2, so both thread counts' start-up is traced.
            for (pages, directory, key), threads in zip(data, ("1", "2")):
                for mode in ("off", "process"):
                    runs.append((["query", "tpch", directory, *key, "--queries", str(q),
                                  "--threads", threads, "--runs", "1", *modes[mode]], q, mode,
                                 f"Q{q} {pages} {threads} thread(s) {mode}", False))
        for threads in ("1", "2"):
            for pages, directory, key in data:
                for mode in ("off", "local", "process"):
                    runs.append((["query", "tpch", directory, *key, "--threads", threads,
                                  "--runs", "1", *modes[mode]], None, mode,
                                 f"Q1-22 {pages} {threads} threads {mode}", False))
        big = data
        if host_sf != sf:
            # The fully offloaded hosts again at a larger scale, where paths that small tables
            # never take run (a hash table's growth, a second batch); the device, not traced
            # (its code is the SF `sf` runs').
            big = gen_tables(binary, tmp, host_sf, keys)
            for (pages, directory, key), threads in zip(big, ("1", "2")):
                for q in full:
                    runs.append((["query", "tpch", directory, *key, "--queries", str(q),
                                  "--threads", threads, "--runs", "1", *modes["process"]], q,
                                 "process", f"Q{q} {pages} SF {host_sf} {threads} thread(s) host",
                                 True))
        # Each fully offloaded query's host peak RSS with offload off (plain pages, 1 thread):
        # the smaller it is, the tighter that query's budget (60 % below it) and the larger
        # the share of it the code takes.
        baseline = {q: peak_rss([binary, "query", "tpch", big[0][1], "--queries", str(q),
                                 "--threads", "1", "--runs", "1"]) for q in full}
        record = {"sf": sf, "host_sf": host_sf, "full": full,
                  "offload_off_peak_rss": {str(q): b for q, b in baseline.items()}, "runs": []}
        for i, (run_args, query, mode, label, skip_device) in enumerate(runs):
            print(f"\r[{i + 1}/{len(runs)}] {label:60}", end="", file=sys.stderr, flush=True)
            record["runs"].append({
                "label": label, "query": query, "mode": mode,
                "processes": [[c, f] for c, f in traced(binary, run_args, traces, f"run{i}",
                                                        skip_device)]})
        print(file=sys.stderr)
    return record


def layout(record):
    """The order, from the traced runs: (offloaded host, other host, device only) functions."""
    full = set(record["full"])
    host_runs = defaultdict(int)  # host function -> single-query host processes that ran it
    first = {}                    # function -> rank of its first execution over all runs
    offloaded = defaultdict(set)  # host function -> the fully offloaded queries whose host ran it
    first_offloaded = {}          # function -> rank of its first run in an offloaded host
    device = set()                # functions a device process or local lanes ran
    for run in record["runs"]:
        query, mode = run["query"], run["mode"]
        for command, functions in run["processes"]:
            for name in functions:
                first.setdefault(name, len(first))
            if mode == "local" or "serve-device" in command:
                # The device's own process, or local lanes in the host's: what these run
                # and no host process does is the device's (filtered below).
                device.update(functions)
                continue
            for name in functions:
                host_runs[name] += query is not None
                if mode == "process" and query in full:
                    first_offloaded.setdefault(name, len(first_offloaded))
                    offloaded[name].add(query)
    # A fully offloaded host's code first, as it is the footprint that must stay small (60 %
    # below offload off). Sorted by the set of queries that run each function, as a bit string
    # whose first bit is the query with the tightest budget (the smallest host without
    # offload): that query's functions all lie in one run, the next one's in at most two, and
    # so on; what every host runs (start-up, parsing, planning, the final merge) leads. Ranking
    # by how many hosts ran a function instead interleaves each query's own functions with the
    # others' at every count: Q2's host held 1.6 MiB more code that way (Zen 3).
    baseline = record["offload_off_peak_rss"]
    priority = sorted(full, key=lambda q: (baseline[str(q)], q))
    offloaded_host = sorted(offloaded, key=lambda f: (
        [q not in offloaded[f] for q in priority], first_offloaded[f]))
    # Then the other hosts' (DataFusion's operators over Arrow), then the device's.
    host_off = sorted((f for f in host_runs if f not in offloaded),
                      key=lambda f: (-host_runs[f], first[f]))
    rest = sorted((f for f in device if f not in host_runs), key=lambda f: first[f])
    return offloaded_host, host_off, rest


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "inpath"))
    ap.add_argument("--output", default=OUT)
    ap.add_argument("--sf", default="0.01", help="TPC-H scale factor of the traced runs")
    ap.add_argument("--host-sf", default="1",
                    help="scale factor at which the fully offloaded hosts are traced again")
    ap.add_argument("--save-traces", metavar="FILE",
                    help="also write the traced runs' function lists to FILE (JSON)")
    ap.add_argument("--traces", metavar="FILE",
                    help="lay out from a --save-traces FILE instead of tracing again")
    ap.add_argument("--refresh", action="store_true",
                    help="only rename the listed functions the binary lacks (after an edit)")
    args = ap.parse_args()
    if (args.refresh or not args.traces) and not os.path.exists(args.binary):
        sys.exit(f"link_order.py: {args.binary} not found; "
                 "cargo build --release -p inpath-cli first")
    if args.refresh:
        if not os.path.exists(args.output):
            sys.exit(f"link_order.py: {args.output} not found: there is no layout to refresh "
                     "(run without --refresh to trace one)")
        with open(args.output) as f:
            order = [line for line in f.read().split("\n") if line]
        new_order, stale, put = refresh(order, args.binary)
        write_aside(args.output, "\n".join(new_order) + "\n")
        print(f"link_order.py: {stale} of the {len(order)} listed functions were not in "
              f"{os.path.relpath(args.binary, ROOT)}; {put} of its functions put in their place "
              f"({len(new_order)} listed); rebuild to apply it")
        return
    if args.traces:
        with open(args.traces) as f:
            record = json.load(f)
    else:
        if shutil.which("valgrind") is None and shutil.which("apt-get"):
            print("link_order.py: installing valgrind (Debian package)", file=sys.stderr)
            sudo = [] if os.geteuid() == 0 else ["sudo"]
            subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "valgrind"],
                           stdout=subprocess.DEVNULL,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if shutil.which("valgrind") is None:
            sys.exit("link_order.py: valgrind not found and not installable here "
                     "(Debian: apt-get install valgrind)")
        record = trace_runs(os.path.abspath(args.binary), args.sf, args.host_sf)
        if args.save_traces:
            write_aside(args.save_traces, json.dumps(record))
    offloaded_host, host_off, rest = layout(record)
    order = offloaded_host + host_off + rest
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    write_aside(args.output, "\n".join(order) + "\n")
    if os.path.exists(args.binary):
        have = set(text_symbols(args.binary))
        found = sum(1 for f in order if f in have)
        held = f"; {found} of them are in {os.path.relpath(args.binary, ROOT)}"
    else:
        held = ""
    print(f"link_order.py: wrote {len(order)} functions ({len(offloaded_host)} offloaded host, "
          f"{len(host_off)} other host, {len(rest)} device only) "
          f"to {os.path.relpath(args.output, ROOT)}{held}")


if __name__ == "__main__":
    main()

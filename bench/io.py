"""I/O path benchmark: whole `inpath` commands on files against the same engines in memory,
pipes against files, file-to-file sealing against cp+sync and openssl, and a cold cache.

    bash bench/setup.sh && .venv/bin/python bench/io.py [--quick] [--no-cold]

What it measures, each in one run on the same files (generated under bench/out/data):
- `inpath corr F` (16 x 2M u32 and 64 x 2M u8, 64-byte lines) and `inpath sketch F` (32M u32,
  all three sketches and HyperLogLog alone), file in the page cache, at 1 and 2 threads: the
  command's own `--json` seconds against `inpath-bench` timing the same engine on the bytes
  already in memory (target: >= 0.9x), and 2 threads against 1 (target: >= 1.7x where the
  kernel is compute-bound). Wall-clock seconds of the whole process are shown beside them.
- `cat F | inpath corr -` against `inpath corr F`, both as wall-clock pipelines (target: >= 0.8x).
- `inpath seal F -o G --compress none --cipher aes256-gcm` (written aside, fsynced, renamed)
  against `cp F G && sync G` (target: >= 0.9x) and `openssl enc -aes-256-ctr` (target: >= 2x).
- Cold cache (`--no-cold` skips it; needs root): the page cache dropped before each run, then
  `inpath corr F` against `dd if=F of=/dev/null bs=1M`; then the first measurement again with
  the file cached by one cold `inpath corr F` (in 2 MiB folios) instead of by its writer.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROOT = common.ROOT
DATA = os.path.join(common.OUT, "data")


def inpath_bin():
    return os.path.join(os.path.dirname(common.bench_bin()), "inpath")


def make_data():
    """16 x 2M u32 lines, 64 x 2M u8 lines (128 MB each) and 32M u32 items (128 MB)."""
    np = common.need("numpy")
    os.makedirs(DATA, exist_ok=True)
    files = {}
    rng = np.random.default_rng(18)
    for name, make in [
        ("io-u32-lines.bin", lambda: rng.integers(0, 1 << 20, 16 * 2_000_000, dtype=np.uint32)),
        ("io-u8-lines.bin", lambda: rng.integers(0, 256, 64 * 2_000_000, dtype=np.uint8)),
        ("io-items.u32", lambda: rng.integers(0, 1 << 32, 32_000_000, dtype=np.uint64).astype(np.uint32)),
    ]:
        path = os.path.join(DATA, name)
        if not os.path.exists(path):
            make().tofile(path)
        files[name] = path
    return files


def warm(path):
    """Reads the file once so that it is in the page cache."""
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def run_json(args, env=None):
    """Runs `inpath ARGS --json`; returns (its JSON, wall seconds)."""
    start = time.perf_counter()
    out = subprocess.run([inpath_bin(), *args], check=True, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    return json.loads(out.stdout), wall


def median_shell(command, reps, before=None):
    """Median wall seconds of a shell command (`before` runs first each time, untimed)."""
    samples = []
    for _ in range(reps):
        if before:
            before()
        start = time.perf_counter()
        subprocess.run(["bash", "-c", command], check=True, stdout=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def alternate(commands, reps):
    """Median wall seconds of each named shell command, run in turn round after round."""
    samples = {name: [] for name in commands}
    for _ in range(reps):
        for name, command in commands.items():
            start = time.perf_counter()
            subprocess.run(["bash", "-c", command], check=True, stdout=subprocess.DEVNULL)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(v) for name, v in samples.items()}


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-cache runs")
    args = parser.parse_args()
    reps = 3 if args.quick else 7
    common.build()
    files = make_data()
    report = common.Report("io", {"reps": reps, "openssl": subprocess.run(
        ["openssl", "version"], capture_output=True, text=True).stdout.strip()})

    # 1. Whole commands on a cached file against the engine on the bytes in memory. The two
    # alternate, round after round, so that a noisy neighbour slows both alike; the figure is
    # the median over every round's runs.
    u32, u8, items = files["io-u32-lines.bin"], files["io-u8-lines.bin"], files["io-items.u32"]
    jobs = [
        ("corr u32", u32, ["corr", u32, "--layout", "lines", "--type", "u32", "--json", "-q"],
         ["corr", "--data", u32, "--type", "u32", "--streams", "16"]),
        ("corr u8", u8, ["corr", u8, "--layout", "lines", "--type", "u8", "--json", "-q"],
         ["corr", "--data", u8, "--type", "u8", "--streams", "64"]),
        ("sketch all three", items, ["sketch", items, "--format", "u32", "--json", "-q"],
         ["sketch", "--data", items, "--quick"]),
        ("sketch HLL alone", items, ["sketch", items, "--format", "u32", "--sketches", "hll", "--json", "-q"],
         ["sketch", "--data", items, "--quick", "--sketches", "hll"]),
    ]
    rounds = 2 if args.quick else 4
    for label, path, cmd, in_memory in jobs:
        warm(path)
        size = os.path.getsize(path)
        mem_s, cmd_s, wall_s = {1: [], 2: []}, {1: [], 2: []}, {1: [], 2: []}
        for _ in range(rounds):
            for threads in (1, 2):
                for m in common.run_ours(in_memory + ["--threads", str(threads), "--reps", "3"]):
                    mem_s[threads].append(m["median_s"])
                for _ in range(3):
                    result, wall = run_json(cmd + ["--threads", str(threads)])
                    # corr puts its timing at the top level, sketch under "input".
                    cmd_s[threads].append(result["seconds"] if "seconds" in result else result["input"]["seconds"])
                    wall_s[threads].append(wall)
        med = {t: (statistics.median(mem_s[t]), statistics.median(cmd_s[t]), statistics.median(wall_s[t])) for t in (1, 2)}
        for threads in (1, 2):
            mem, inside, wall = med[threads]
            report.add(f"{label}, file, {threads} thread(s) vs in memory", size, inside,
                       "inpath-bench (in memory)", mem, {"wall_s": wall, "target": 0.9})
        report.note(f"{label}: 2 threads / 1 thread = {med[1][1] / med[2][1]:.2f}x whole command, "
                    f"{med[1][0] / med[2][0]:.2f}x in memory (target 1.7x where compute-bound)")

    # 2. A pipe against the file, both wall clock, alternating.
    size = os.path.getsize(u32)
    for threads in (1, 2):
        cmd = f"{inpath_bin()} corr {{src}} --layout lines --type u32 --threads {threads} -q --json"
        t = alternate({"file": cmd.format(src=u32), "pipe": f"cat {u32} | " + cmd.format(src="-"),
                       "wc": f"cat {u32} | wc -c"}, reps)
        report.add(f"cat F | inpath corr -, {threads} thread(s) vs file", size, t["pipe"],
                   "inpath corr F (wall)", t["file"], {"target": 0.8})
        # The pipe's own ceiling on this machine: cat into a pipe that wc drains.
        report.add(f"cat F | inpath corr -, {threads} thread(s) vs the bare pipe", size, t["pipe"],
                   "cat F | wc -c", t["wc"])

    # 3. File-to-file sealing against cp + sync and openssl enc, alternating.
    key_file = os.path.join(DATA, "io-keys.txt")
    if not os.path.exists(key_file):
        subprocess.run([inpath_bin(), "seal", "keygen", "-o", key_file], check=True, capture_output=True)
    out = os.path.join(DATA, "io-out.bin")
    warm(u32)
    key, iv = "11" * 32, "22" * 16
    seal = (f"{inpath_bin()} seal {u32} -o {out} --compress none --cipher aes256-gcm "
            f"--key-file {key_file} -q --threads ")
    t = alternate({
        "seal1": seal + "1",
        "seal2": seal + "2",
        "cp": f"cp {u32} {out} && sync {out}",
        "openssl": f"openssl enc -aes-256-ctr -K {key} -iv {iv} -in {u32} -out {out}",
        "openssl+sync": f"openssl enc -aes-256-ctr -K {key} -iv {iv} -in {u32} -out {out} && sync {out}",
    }, reps)
    for threads in (1, 2):
        report.add(f"seal none+aes256-gcm file->file, {threads} thread(s)", size, t[f"seal{threads}"],
                   "cp F G && sync G", t["cp"], {"target": 0.9})
    report.add("seal none+aes256-gcm, 1 thread vs openssl enc", size, t["seal1"],
               "openssl enc -aes-256-ctr (no fsync)", t["openssl"], {"target": 2.0})
    report.add("seal none+aes256-gcm, 1 thread vs openssl+sync", size, t["seal1"],
               "openssl enc -aes-256-ctr && sync", t["openssl+sync"])
    os.remove(out)

    # 4. Cold cache.
    if args.no_cold:
        report.note("cold cache skipped (--no-cold)")
    elif os.geteuid() != 0:
        report.note("cold cache skipped: dropping the page cache needs root")
    else:
        cold_reps = 3
        dd_s = median_shell(f"dd if={u32} of=/dev/null bs=1M status=none", cold_reps, before=drop_caches)
        for threads in (1, 2):
            corr_s = median_shell(f"{inpath_bin()} corr {u32} --layout lines --type u32 --threads {threads} -q --json",
                                  cold_reps, before=drop_caches)
            report.add(f"cold cache: inpath corr F, {threads} thread(s)", size, corr_s,
                       "dd if=F of=/dev/null bs=1M", dd_s)
        # 5. The file path against the engine in memory once the page cache holds the file as
        # inpath's own cold read left it (2 MiB folios, mapped a folio at a time), rather than
        # as the writer of section 1 left it. Alternating rounds, medians.
        drop_caches()
        run_json(["corr", u32, "--layout", "lines", "--type", "u32", "--threads", "1", "--json", "-q"])
        mem_s, cmd_s = {1: [], 2: []}, {1: [], 2: []}
        for _ in range(2 if args.quick else 4):
            for threads in (1, 2):
                for m in common.run_ours(["corr", "--data", u32, "--type", "u32", "--streams", "16",
                                          "--threads", str(threads), "--reps", "3"]):
                    mem_s[threads].append(m["median_s"])
                for _ in range(3):
                    result, _ = run_json(["corr", u32, "--layout", "lines", "--type", "u32",
                                          "--threads", str(threads), "--json", "-q"])
                    cmd_s[threads].append(result["seconds"])
        for threads in (1, 2):
            report.add(f"corr u32, file cached by inpath's cold read, {threads} thread(s) vs in memory",
                       size, statistics.median(cmd_s[threads]), "inpath-bench (in memory)",
                       statistics.median(mem_s[threads]), {"target": 0.9})
        warm(u32)
    report.save()


if __name__ == "__main__":
    main()

"""Shared plumbing for the per-engine benchmark scripts in bench/.

Conventions (every engine's script follows them):
- one entry point per engine: `python3 bench/<engine>.py` (run `bench/setup.sh` once first);
- the script generates its data, then runs inpath (through `inpath-bench`, timed in-process) and
  the peer tools on the *same* data in the *same* run;
- one line per measurement with our figure, the peer's figure and the ratio;
- all measurements are also written to `bench/out/<engine>.json` (overwritten by the next run)
  and kept in `bench/runs/<YYYY-MM-DD>-<cpu>/<engine>.json` (one directory per day and CPU, see
  `run_dir`; `bench/plot.py` draws docs/img's charts from it);
- timings are medians of several repetitions; never run two benchmarks or a build at once.
"""

import json
import os
import platform
import re
import resource
import statistics
import shutil
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")
RUNS = os.path.join(ROOT, "bench", "runs")
# The version of the JSON layout every run file has (`"schema": 1`): {"engine", "schema",
# "setup": {cpu, cpu_flags, isa_cap, cores, python, date, ...}, "rows": [...]}; see Report.add
# for the rows of a side-by-side measurement. bench/plot.py refuses a file of another schema.
SCHEMA = 1


def isal_available():
    """Whether ISA-L can be built here (nasm and autotools, installed by bench/setup.sh)."""
    return all(shutil.which(t) for t in ("nasm", "autoreconf", "libtoolize"))


def build():
    """Builds the release binaries the benchmarks drive, with ISA-L for DEFLATE level 1 pages
    where its build tools are present (inpath-seal's `isal` feature)."""
    features = ["--features", "inpath-bench/isal,inpath-cli/isal"] if isal_available() else []
    if not features:
        print("# note: nasm/autotools not found: building without ISA-L (run bench/setup.sh)", file=sys.stderr)
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "-p", "inpath-bench", "-p", "inpath-cli", *features],
        cwd=ROOT,
        check=True,
    )


def build_cli():
    """Builds the `inpath` binary as a user does (`cargo build --release -p inpath-cli`, no
    features), so its figures are a user's."""
    subprocess.run(["cargo", "build", "--release", "--quiet", "-p", "inpath-cli"], cwd=ROOT, check=True)


def bench_bin():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "inpath-bench")


def run_ours(args):
    """Runs `inpath-bench ARGS...` and returns its list of measurements (dicts)."""
    result = subprocess.run([bench_bin(), *args], cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(result.stdout)


def run_child(cmd, ok=(0,)):
    """Runs `cmd` to completion; returns (wall seconds, CPU seconds, minor page faults, stdout),
    the CPU and faults from the kernel's accounting of the finished child. An exit status not
    in `ok` raises (grep and rg exit 1 when nothing matches: pass ok=(0, 1))."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode not in ok:
        raise subprocess.CalledProcessError(out.returncode, cmd, out.stdout, out.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_minflt - before.ru_minflt, out.stdout


def time_median(fn, reps=5, warmup=1):
    """Median wall seconds of `fn()` over `reps` runs after `warmup` runs; also returns the last result."""
    result = None
    for _ in range(warmup):
        result = fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), samples, result


class Report:
    """Collects side-by-side measurements, prints one line each, saves JSON."""

    def __init__(self, engine, setup, run_name=None):
        """`run_name` names the file in the run directory when it must differ from
        `bench/out/<engine>.json` (a partial run that would otherwise replace the full run's
        file of the same day)."""
        self.engine = engine
        self.run_name = run_name or engine
        self.rows = []
        self.setup = dict(setup)
        self.setup.update(
            {
                "cpu": _cpu_model(),
                "cpu_flags": _cpu_flags(),
                "l2_per_core": _l2_size(),
                "isa_cap": os.environ.get("INPATH_ISA", "none"),
                "cores": os.cpu_count(),
                "python": platform.python_version(),
                "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            }
        )
        print(
            f"# {engine} benchmark on {self.setup['cpu']} ({self.setup['cores']} cores, "
            f"L2 {self.setup['l2_per_core'] or 'unknown'} per core); "
            f"flags: {' '.join(self.setup['cpu_flags']) or '-'}; INPATH_ISA={self.setup['isa_cap']}"
        )

    def add(self, name, bytes_, ours_s, peer, peer_s, extra=None, unit=("GB/s", 1e9)):
        """One line: our median seconds against a peer's on the same `bytes_` of input.
        ratio = peer time / our time (above 1 means inpath is faster). `unit` names what
        `bytes_` counts and its scale, for figures that are not bytes: ("M edges/s", 1e6) makes
        `bytes_` a count of edges; the JSON then has `unit` and the rates under the same keys."""
        label, scale = unit
        ours_gbs = bytes_ / ours_s / scale
        peer_gbs = bytes_ / peer_s / scale if peer_s else None
        ratio = peer_s / ours_s if peer_s else None
        row = {
            "measurement": name,
            "bytes": bytes_,
            "inpath_s": ours_s,
            "inpath_gb_s": ours_gbs,
            "peer": peer,
            "peer_s": peer_s,
            "peer_gb_s": peer_gbs,
            "ratio": ratio,
            "extra": extra or {},
        }
        if unit != ("GB/s", 1e9):
            row["unit"] = label
        self.rows.append(row)
        peer_text = f"{peer} {peer_gbs:7.3f} {label} ({peer_s * 1e3:9.1f} ms)" if peer_s else f"{peer} -"
        ratio_text = f"{ratio:7.2f}x" if ratio else "      -"
        print(
            f"{name:<44} inpath {ours_gbs:7.3f} {label} ({ours_s * 1e3:8.1f} ms) | {peer_text} | {ratio_text}",
            flush=True,
        )
        return row

    def note(self, text):
        print(f"  {text}", flush=True)
        self.rows.append({"note": text})

    def save(self):
        """Writes `bench/out/<engine>.json` and the same JSON to the run directory."""
        obj = {"engine": self.engine, "schema": SCHEMA, "setup": self.setup, "rows": self.rows}
        os.makedirs(OUT, exist_ok=True)
        path = os.path.join(OUT, f"{self.engine}.json")
        with open(path, "w") as f:
            json.dump(obj, f, indent=2)
        print(f"# wrote {os.path.relpath(path, ROOT)}")
        save_run(self.run_name, obj)


def run_dir(date=None):
    """Where this machine's run files go: `bench/runs/<YYYY-MM-DD>-<cpu slug>/` (`date`: a
    "YYYY-MM-DD..." string, default today), or `$INPATH_BENCH_RUN_DIR` where it is set."""
    override = os.environ.get("INPATH_BENCH_RUN_DIR")
    if override:
        return os.path.abspath(override)
    day = (date or time.strftime("%Y-%m-%d"))[:10]
    return os.path.join(RUNS, f"{day}-{cpu_slug()}")


def save_run(name, obj):
    """Writes `obj` (a dict: engine, setup, rows) as `<run_dir>/<name>.json`, with "schema"
    added, and returns the path. The run directory is named after the day in `obj`'s
    setup["date"] (today where it has none) and this machine's CPU."""
    obj = {"engine": obj.get("engine", name), "schema": obj.get("schema", SCHEMA),
           **{k: v for k, v in obj.items() if k not in ("engine", "schema")}}
    directory = run_dir((obj.get("setup") or {}).get("date"))
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{name}.json")
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    print(f"# wrote {os.path.relpath(path, ROOT)}")
    return path


def _cpuinfo_field(name):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == name:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model():
    """The model name plus family/model numbers (some cloud guests name only "AMD EPYC")."""
    name = _cpuinfo_field("model name") or platform.processor() or "unknown CPU"
    family, model = _cpuinfo_field("cpu family"), _cpuinfo_field("model")
    if family and model:
        name += f" (family {family} model {model})"
    return name


def _l2_size():
    """CPU 0's level-2 cache as Linux reports it (`1024K`), or None: the sketch's and the
    kernels' figures depend on it (a 512 KiB L2 on Zen 1-3, 1 MiB on Zen 4, 2 MiB on Sapphire
    Rapids)."""
    base = "/sys/devices/system/cpu/cpu0/cache"

    def read(index, name):
        with open(os.path.join(base, index, name)) as f:
            return f.read().strip()

    try:
        for index in sorted(i for i in os.listdir(base) if i.startswith("index")):
            if read(index, "level") == "2" and read(index, "type") in ("Unified", "Data"):
                return read(index, "size")
    except OSError:
        pass
    return None


# AMD's core generation by family and model range (family 0x19 holds both Zen 3 and Zen 4).
_AMD_ZEN = {
    23: [(0x00, 0x2F, "zen"), (0x30, 0xFF, "zen2")],
    25: [(0x00, 0x0F, "zen3"), (0x10, 0x1F, "zen4"), (0x20, 0x5F, "zen3"), (0x60, 0x7F, "zen4"),
         (0xA0, 0xAF, "zen4")],
    26: [(0x00, 0xFF, "zen5")],
}


def cpu_slug():
    """A short, stable, lowercase name for this machine's CPU, for run directories: the model
    name without trademarks, clock and core count, AMD's core generation where the family and
    model tell it, and the family/model numbers: `amd-epyc-zen4-f25m17`,
    `intel-xeon-platinum-8481c-f6m143`."""
    name = _cpuinfo_field("model name") or platform.processor() or platform.machine() or "cpu"
    name = re.sub(r"\((r|tm)\)|\bcpu\b|\bprocessor\b|@.*$|\d+-core", " ", name, flags=re.I)
    parts = [p for p in re.split(r"[^a-z0-9]+", name.lower()) if p]
    family, model = _cpuinfo_field("cpu family"), _cpuinfo_field("model")
    if family and model and family.isdigit() and model.isdigit():
        vendor = (_cpuinfo_field("vendor_id") or "").lower()
        if "amd" in vendor or (parts and parts[0] == "amd"):
            for low, high, zen in _AMD_ZEN.get(int(family), []):
                if low <= int(model) <= high and zen not in parts:
                    parts.append(zen)
                    break
        parts.append(f"f{family}m{model}")
    else:
        implementer, part = _cpuinfo_field("CPU implementer"), _cpuinfo_field("CPU part")
        if implementer and part:
            parts.append(f"{implementer.lower()}-{part.lower()}")
    return "-".join(parts)[:60].strip("-") or "cpu"


# The CPU features that decide which kernels run (every run file's setup lists the ones present).
KERNEL_FLAGS = ("avx2", "fma", "bmi2", "aes", "pclmulqdq", "vaes", "vpclmulqdq", "avx512f",
                "avx512bw", "avx512ifma", "avx512_vnni", "avx512vbmi", "amx_int8", "sha_ni")


def _cpu_flags():
    """The kernel-relevant flags this CPU has, in KERNEL_FLAGS order."""
    flags = set((_cpuinfo_field("flags") or _cpuinfo_field("Features") or "").split())
    return [f for f in KERNEL_FLAGS if f in flags]


def need(module, hint="run bench/setup.sh first"):
    try:
        return __import__(module)
    except ImportError:
        sys.exit(f"bench: Python module {module!r} is missing ({hint})")


# Servers under benchmark: a free loopback port, waiting for one to listen, a process's CPU.
TICKS = os.sysconf("SC_CLK_TCK")


def free_port():
    """A TCP port nothing on loopback listens on now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, tries=400):
    """Returns once something accepts on loopback's `port` (every 0.05 s, `tries` times)."""
    for _ in range(tries):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def cpu_seconds(pid):
    """User plus system CPU seconds of process `pid` so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS

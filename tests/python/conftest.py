"""Shared fixtures: the release `inpath` binary (scripts/test.sh builds it)."""

import os
import signal
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "inpath")


@pytest.fixture(scope="session")
def inpath_bin():
    if not os.path.exists(BINARY):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "inpath-cli"], cwd=ROOT, check=True)
    return BINARY


def run_cli(binary, *args, **kwargs):
    return subprocess.run([binary, *args], check=True, capture_output=True, **kwargs)


def text(n=200_000, seed=3):
    """Seeded words (some overlapping: needle, needles) in lines of random length."""
    import numpy as np

    rng = np.random.default_rng(seed)
    words = [b"hay", b"needle", b"aaaa", b"stack", b"needles", b"x"]
    picks = rng.integers(0, len(words), n // 4)
    seps = np.where(rng.integers(0, 6, len(picks)) == 0, b"\n", b" ")
    return b"".join(w + s for w, s in zip((words[i] for i in picks), seps))


def naive(data, pat):
    """Every offset of `pat` in `data`, overlapping ones too."""
    out, i = [], data.find(pat)
    while i >= 0:
        out.append(i)
        i = data.find(pat, i + 1)
    return out


def stop_server(proc, timeout=20):
    """Stops a server started by a test: SIGTERM, a bounded wait, then SIGKILL; closes its
    pipes and returns its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()
    return proc.returncode

"""Shared fixtures: the release `inpath` binary (scripts/test.sh builds it)."""

import os
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

#!/usr/bin/env bash
# The whole test suite: the README's test command and what .ci/run calls.
# Installs what it needs (Rust toolchain check, Debian packages, a Python venv), then runs
# formatting and lint gates, the Rust tests (release mode: the accuracy tests hash 10^8 items),
# then builds the Python package into .venv and runs the Python tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "test.sh: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi

# Debian packages (e.g. tools used as interoperability peers).
missing=()
while read -r pkg; do
  case "$pkg" in ''|'#'*) continue ;; esac
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done < scripts/apt-packages.txt
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

bash scripts/venv.sh
export INPATH_PYTHON="$PWD/.venv/bin/python"

# The machine, for reading a failure from another CPU: kernels are chosen at run time.
echo "== machine: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | xargs), $(nproc) cores"
echo "   flags: $(grep -m1 -ow -e avx2 -e avx512f -e avx512vl -e vaes -e vpclmulqdq -e sha_ni /proc/cpuinfo 2>/dev/null | sort -u | xargs)"
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --release --workspace --all-targets --quiet -- -D warnings
echo "== cargo test (best kernels for this CPU)"
cargo test --release --workspace
# Every kernel level this CPU has below its best one: the engines' tests again with the kernels
# capped by INPATH_ISA (the run above used the best level), so an AVX-512 machine also tests the
# AVX2 and portable paths and an AVX2 machine the portable one.
has_flags() {
  local flag
  for flag in "$@"; do grep -qw "$flag" /proc/cpuinfo 2>/dev/null || return 1; done
}
lower_levels=()
if has_flags avx2 fma bmi1 bmi2; then
  lower_levels+=(portable)
  if has_flags avx512f avx512bw avx512cd avx512dq avx512vl; then lower_levels+=(avx2); fi
fi
for level in "${lower_levels[@]}"; do
  echo "== engine tests with INPATH_ISA=$level"
  INPATH_ISA=$level cargo test --release --quiet -p inpath-sketch -p inpath-corr -p inpath-seal -p inpath-store
done

# The portable code must build for aarch64 (Graviton, Ampere, Apple): check the crates that hold
# kernels for that target, warnings as errors. The query engine's `arch` module holds only
# `cfg(target_arch = "x86_64")` wrappers around plain Rust loops (and AVX-512 mask compares), whose portable path is the one
# an aarch64 build compiles; checking the query engine and the CLI here would add a second
# DataFusion build. Needs rustup's aarch64 standard library and a cross C compiler (zstd's C
# sources); where they cannot be had, say so and go on.
echo "== cargo check --target aarch64-unknown-linux-gnu"
if command -v rustup >/dev/null 2>&1 && command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 \
  && { rustup target list --installed | grep -qx aarch64-unknown-linux-gnu \
       || timeout 180 rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1; }; then
  CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc RUSTFLAGS="-D warnings" \
    cargo check --release --quiet --target aarch64-unknown-linux-gnu \
    -p inpath-core -p inpath-sketch -p inpath-corr -p inpath-seal -p inpath-wire -p inpath-store \
    -p inpath-cache
else
  echo "test.sh: skipped: the aarch64 target (rustup target add aarch64-unknown-linux-gnu) or aarch64-linux-gnu-gcc is not available"
fi

echo "== inpath-seal with ISA-L (the optional isal feature)"
cargo clippy --release -p inpath-seal --features isal --all-targets --quiet -- -D warnings
cargo test --release -p inpath-seal --features isal --quiet
echo "== python package (pip install ./python) and pytest"
cargo build --release --quiet -p inpath-cli
# Built into the workspace's target directory, where the engines are already compiled.
CARGO_TARGET_DIR="$PWD/target" .venv/bin/pip install --quiet --disable-pip-version-check ./python
.venv/bin/python -m pytest -q tests/python

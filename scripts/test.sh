#!/usr/bin/env bash
# The project's tests: the README's test command and what .ci/run calls.
#
#   bash scripts/test.sh           the gate: what CI runs (<= 20 minutes on 2 cores, cold)
#   bash scripts/test.sh --quick   format, lint and the Rust tests of the crates you touched
#                                  (since origin/main; INPATH_TEST_BASE=COMMIT to choose)
#   bash scripts/test.sh --full    the gate, then what left it (CONTRIBUTING.md, "Test tiers")
#
# Installs what it needs (Debian packages, a Python venv), then compiles the workspace ONCE:
# one release build of every crate, test and binary, with clippy wrapping the workspace's own
# crates (RUSTC_WORKSPACE_WRAPPER), so the lint costs no second pass over the dependencies and
# the Python extension reuses the same artifacts. Prints the wall time of each phase at the end,
# pass or fail.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=gate
case "${1:-}" in
  "") ;;
  --quick) mode=quick ;;
  --full) mode=full ;;
  -h|--help)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0 ;;
  *)
    echo "test.sh: unknown option '$1' (use --quick, --full, or nothing for the gate)" >&2
    exit 2 ;;
esac

# ---- phase timing --------------------------------------------------------------------------
phase_names=()
phase_secs=()
phase_name=""
phase_t0=0
run_t0=$(date +%s)
end_phase() {
  if [ -n "$phase_name" ]; then
    phase_names+=("$phase_name")
    phase_secs+=($(( $(date +%s) - phase_t0 )))
    phase_name=""
  fi
}
phase() {
  end_phase
  phase_name="$1"
  phase_t0=$(date +%s)
  echo "== $1"
}
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
print_phases() {
  local status=$?
  end_phase
  # A phase that failed may leave background jobs (pytest, the aarch64 check) running: stop
  # them and what they started.
  local pid
  for pid in $(jobs -p); do kill_tree "$pid"; done
  local i total=$(( $(date +%s) - run_t0 ))
  echo "== phases ($mode, $(nproc) cores; wall seconds)"
  for i in "${!phase_names[@]}"; do
    printf '   %-58s %6d s\n' "${phase_names[$i]}" "${phase_secs[$i]}"
  done
  printf '   %-58s %6d s (%d min %02d s)%s\n' "total" "$total" $((total / 60)) $((total % 60)) \
    "$([ "$status" -eq 0 ] || echo ", FAILED with status $status")"
}
trap print_phases EXIT

if ! command -v cargo >/dev/null 2>&1; then
  echo "test.sh: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi

# ---- one build configuration for every phase -----------------------------------------------
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
# Clippy lints the workspace's crates while the test build compiles them: the dependencies are
# compiled once, for the tests, the binary and the Python extension alike. CLIPPY_ARGS is how
# `cargo clippy` hands clippy-driver its flags (the pinned toolchain's, rust-toolchain.toml).
clippy_driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
if [ -z "$clippy_driver" ]; then
  echo "test.sh: clippy-driver not found (rustup component add clippy)" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# Cargo's lines are for a terminal; CI reads the phase lines.
export CARGO_TERM_PROGRESS_WHEN=never

machine() {
  echo "== machine: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | xargs), $(nproc) cores"
  echo "   flags: $(grep -m1 -ow -e avx2 -e avx512f -e avx512vl -e vaes -e vpclmulqdq -e sha_ni /proc/cpuinfo 2>/dev/null | sort -u | xargs)"
}

# The commit --quick compares with: INPATH_TEST_BASE, else where HEAD left origin/main, else
# HEAD (uncommitted changes only).
test_base() {
  if [ -n "${INPATH_TEST_BASE:-}" ]; then
    git rev-parse --verify --quiet "$INPATH_TEST_BASE^{commit}" || {
      echo "test.sh: INPATH_TEST_BASE=$INPATH_TEST_BASE is not a commit" >&2
      return 1
    }
  else
    git merge-base HEAD origin/main 2>/dev/null || git rev-parse HEAD
  fi
}

# The crates a change touched since test_base, one package name a line (or --workspace).
touched_packages() {
  local base files f
  base=$(test_base) || exit 2
  files=$( { git diff --name-only "$base"; git ls-files --others --exclude-standard; } | sort -u)
  if echo "$files" | grep -qE '^(Cargo\.toml|Cargo\.lock|rust-toolchain\.toml)$'; then
    echo "--workspace"
    return
  fi
  for f in $files; do
    case "$f" in
      crates/*/*) f=${f#crates/}; echo "${f%%/*}" ;;
      bench/*.rs|bench/src/*|bench/Cargo.toml) echo inpath-bench ;;
    esac
  done | sort -u
}

if [ "$mode" = quick ]; then
  machine
  phase "cargo fmt --check"
  cargo fmt --all -- --check
  test_base >/dev/null || exit 2
  mapfile -t pkgs < <(touched_packages)
  if [ ${#pkgs[@]} -eq 0 ]; then
    echo "test.sh --quick: no Rust crate touched since $(test_base); nothing more to run"
    exit 0
  fi
  # The test binaries of the whole workspace, as the gate builds them (warm: only what changed
  # compiles, linted), then the touched crates' own binaries run.
  phase "build and lint (warm)"
  cargo test --release --workspace --no-run --quiet
  phase "tests of: ${pkgs[*]}"
  if [ "${pkgs[0]}" = "--workspace" ]; then
    cargo test --release --workspace --quiet
  else
    # Same features as the workspace build: the packages are selected from the workspace's
    # own test binaries, not rebuilt with their own feature set.
    python3 scripts/test_bins.py "${pkgs[@]}"
  fi
  exit 0
fi

phase "setup (Debian packages; the Python venv in the background)"
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
# A background job of the setup: `wait_for_job PID LOG WHAT` waits for it and shows its log;
# a failure stops the run.
wait_for_job() {
  if ! wait "$1"; then
    cat "$2" >&2
    echo "test.sh: $3 failed (its output above)" >&2
    exit 1
  fi
  cat "$2"
  rm -f "$2"
}
# Chromium for the live pages' browser test (tests/python/test_live_pages.py): installed in the
# background while the Rust build compiles (about half a minute of download and unpacking),
# waited for before pytest.
browser_log="$(mktemp)"
(
  if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    # The package lists were refreshed above only when another package was missing.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium ||
      { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium; }
  fi
) > "$browser_log" 2>&1 &
browser_pid=$!
# The venv (pip: mostly downloads and unpacking) is made while the Rust build compiles; the
# Python phase waits for it and shows its log if it failed.
venv_log="$(mktemp)"
bash scripts/venv.sh > "$venv_log" 2>&1 &
venv_pid=$!
export INPATH_PYTHON="$PWD/.venv/bin/python"
# The machine, for reading a failure from another CPU: kernels are chosen at run time, and the
# suites run every kernel level this CPU has (AVX-512, AVX2, portable) in process.
machine

phase "cargo fmt --check; the extension's features (scripts/check_features.py)"
cargo fmt --all -- --check
# The Python phase builds the extension from this build's artifacts only when Cargo resolves its
# dependencies' features as the workspace's (else DataFusion compiles twice): checked here, in
# a second, instead of found as a slow Python phase.
python3 scripts/check_features.py

phase "build and lint (release, every crate and test)"
cargo test --release --workspace --no-run --quiet

# After the build, three jobs share the two cores: the Rust tests (1.3 cores on average:
# servers, child processes), pytest (its Spark JVMs compute more than its wall time shows) and
# the aarch64 check (the only one that compiles). One after another they took 106 + 93 + 50 s
# on a warm tree; side by side they fill both cores and end together, 193-221 s on a fresh
# clone against 323 s as separate phases (CONTRIBUTING.md, "Phases").
phase "python package (pip install ./python) and the Spark connector's jar"
wait_for_job "$venv_pid" "$venv_log" "scripts/venv.sh"
wait_for_job "$browser_pid" "$browser_log" "installing Debian's chromium"
# Built by maturin into the workspace's target directory with the same wrapper and profile, so
# the engines and their dependencies compiled above are reused.
.venv/bin/pip install --quiet --disable-pip-version-check ./python
# The Spark connector's jar (tests/python/test_spark_connector.py): Maven fetches the Flight
# client's jars once into connectors/spark/target (cold: about 20 s with the compile); warm,
# when nothing changed, the script only prints the jar's path (about a second).
bash connectors/spark/build.sh

phase "rust tests, pytest and the aarch64 check side by side"
# `side_job NAME LOG CMD...`: runs CMD in the background, its output in LOG, its wall time as
# LOG's last line; `wait_for_job` shows the log.
side_job() {
  local name=$1 log=$2
  shift 2
  ( t0=$(date +%s); if "$@"; then rc=0; else rc=$?; fi
    echo "   ($name: $(( $(date +%s) - t0 )) s)"; exit $rc ) > "$log" 2>&1 &
}
# The portable code must build for aarch64 (Graviton, Ampere, Apple): check the crates that hold
# kernels for that target, warnings as errors. The format's and the device's kernels
# (inpath-table, inpath-offload: Arrow only) are checked too; the DataFusion host and the CLI
# hold no kernels, and checking them would add a second DataFusion build. Needs rustup's aarch64
# standard library and a cross C compiler (zstd's C sources); where they cannot be had, say so
# and go on. In a target directory of its own, so that no cargo waits for another's lock.
aarch64_check() {
  if command -v rustup >/dev/null 2>&1 && command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 \
    && { rustup target list --installed | grep -qx aarch64-unknown-linux-gnu \
         || timeout 180 rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1; }; then
    CARGO_TARGET_DIR="$CARGO_TARGET_DIR/aarch64-check" \
      CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc RUSTFLAGS="-D warnings" \
      cargo check --release --quiet --target aarch64-unknown-linux-gnu \
      -p inpath-core -p inpath-sketch -p inpath-corr -p inpath-seal -p inpath-wire -p inpath-store \
      -p inpath-cache -p inpath-table -p inpath-offload
  else
    echo "test.sh: skipped: the aarch64 target (rustup target add aarch64-unknown-linux-gnu) or aarch64-linux-gnu-gcc is not available"
  fi
}
aarch64_log="$(mktemp)"
side_job "cargo check --target aarch64-unknown-linux-gnu" "$aarch64_log" aarch64_check
aarch64_pid=$!
pytest_log="$(mktemp)"
side_job pytest "$pytest_log" .venv/bin/python -m pytest -q tests/python
pytest_pid=$!
rust_t0=$(date +%s)
cargo test --release --workspace
echo "   (rust tests: $(( $(date +%s) - rust_t0 )) s)"
echo "== pytest"
wait_for_job "$pytest_pid" "$pytest_log" "pytest"
echo "== cargo check --target aarch64-unknown-linux-gnu"
wait_for_job "$aarch64_pid" "$aarch64_log" "cargo check --target aarch64-unknown-linux-gnu"

# What left the gate (CONTRIBUTING.md, "Test tiers"): the engines' whole suites again with the
# kernels capped by INPATH_ISA at each level below this CPU's best. The gate covers those levels
# in process (each engine's kernel suite runs every level the CPU has); this also runs the
# accuracy trials and the file and CLI paths through the lower levels.
if [ "$mode" = full ]; then
  # The optional ISA-L feature (DEFLATE level 1 pages through ISA-L): its own build of
  # inpath-seal and of ISA-L's C sources, about 40 s cold; the benchmarks build it too.
  phase "full: inpath-seal with ISA-L (the optional isal feature)"
  cargo test --release -p inpath-seal --features isal --quiet
  lower_levels=()
  has_flags() {
    local flag
    for flag in "$@"; do grep -qw "$flag" /proc/cpuinfo 2>/dev/null || return 1; done
  }
  if has_flags avx2 fma bmi1 bmi2; then
    lower_levels+=(portable)
    if has_flags avx512f avx512bw avx512cd avx512dq avx512vl; then lower_levels+=(avx2); fi
  fi
  for level in "${lower_levels[@]}"; do
    phase "full: engine suites with INPATH_ISA=$level"
    INPATH_ISA=$level python3 scripts/test_bins.py inpath-sketch inpath-corr inpath-seal inpath-store \
      inpath-table inpath-offload
  done
fi

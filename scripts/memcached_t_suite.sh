#!/bin/bash
# Runs memcached's own protocol test suite (its t/*.t, Perl) against `inpath cache serve`, as
# evidence of drop-in behaviour. Not part of the gate: the suite is memcached's code and is not
# in this repository; give a checkout of memcached's source at the version inpath follows:
#
#   git clone https://github.com/memcached/memcached && git -C memcached checkout 1.6.18
#   bash scripts/memcached_t_suite.sh memcached [t/getset.t t/flush-all.t ...]
#
# The harness starts "$builddir/memcached-debug" under "$builddir/timedrun 600" with memcached's
# command line (-p PORT -U PORT -u root -o relaxed_privileges ...); this script puts two small
# wrappers there that run the inpath binary instead (target/release/inpath, or $INPATH), in a
# scratch copy of the suite so the checkout is not touched. Prints a line per test file
# (T_VERBOSE=1 adds the first failures; T_TIMEOUT sets the seconds per file, 120).
set -u
src=${1:?usage: memcached_t_suite.sh MEMCACHED_SOURCE_DIR [TEST_FILES...]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
inpath=${INPATH:-${CARGO_TARGET_DIR:-$here/target}/release/inpath}
[ -x "$inpath" ] || { echo "no inpath binary at $inpath (cargo build --release -p inpath-cli)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src/t" "$work/t"
cat > "$work/memcached-debug" <<WRAP
#!/bin/sh
exec "$inpath" cache serve "\$@"
WRAP
cat > "$work/timedrun" <<'WRAP'
#!/bin/sh
secs=$1; shift
exec timeout "$secs" "$@"
WRAP
chmod +x "$work/memcached-debug" "$work/timedrun"
cd "$work" || exit 2
if [ $# -eq 0 ]; then set -- t/*.t; fi
# One file at a time, each for at most ${T_TIMEOUT:-120} s (a test waiting for a reply inpath
# does not give would otherwise wait for timedrun's 600 s): a line per file with its TAP counts.
pass=0; fail=0
for f in "$@"; do
    out=$(timeout "${T_TIMEOUT:-120}" perl "$f" 2>&1); rc=$?
    oks=$(grep -c '^ok ' <<<"$out"); nots=$(grep -c '^not ok ' <<<"$out")
    plan=$(grep -m1 -o '^1\.\.[0-9]*' <<<"$out")
    if [ $rc -eq 0 ] && [ "$nots" -eq 0 ]; then verdict=PASS; pass=$((pass + 1)); else verdict=FAIL; fail=$((fail + 1)); fi
    [ $rc -eq 124 ] && verdict="FAIL (timed out)"
    echo "$f: $verdict ($oks ok, $nots not ok, plan ${plan:-none})"
    if [ "$verdict" != PASS ] && [ -n "${T_VERBOSE:-}" ]; then
        grep -m3 -A4 '^not ok' <<<"$out" | sed 's/^/    /'
    fi
done
echo "files: $pass passed, $fail failed"

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
# scratch copy of the suite so the checkout is not touched. Prints prove's summary.
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
prove -j1 --timer "$@" 2>&1 | tail -n 60

#!/usr/bin/env bash
# Regenerates the committed fuzz seed corpora (small valid inputs) with the release binary:
#   crates/inpath-seal/tests/corpus/{unseal,decompress}/, crates/inpath-sketch/tests/corpus/,
#   crates/inpath-corr/tests/corpus/, crates/inpath-wire/tests/corpus/.
# The bounded fuzz passes in each crate's fuzz tests (tests/<name>/fuzz.rs) mutate these files.
# The key file is a fixed TEST key (never use it for data). Run from the repository root after
# `cargo build --release -p inpath-cli`; the outputs are deterministic except for GCM/CTR/CBC
# nonces, so regenerating changes the sealed files (the tests do not depend on their bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
B=target/release/inpath
S=crates/inpath-seal/tests/corpus
rm -rf "$S" crates/inpath-sketch/tests/corpus crates/inpath-corr/tests/corpus crates/inpath-wire/tests/corpus
mkdir -p "$S/unseal" "$S/decompress" crates/inpath-sketch/tests/corpus crates/inpath-corr/tests/corpus crates/inpath-wire/tests/corpus
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Test-only keys: AES-128, -192 and -256 under ids 1, 2, 3.
cat > "$S/test-keys.txt" <<'KEYS'
# inpath fuzz corpus TEST keys: public, never use them for data
inpath-seal-keys 1
key 1 000102030405060708090a0b0c0d0e0f
key 2 000102030405060708090a0b0c0d0e0f1011121314151617
key 3 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
KEYS
cp "$S/test-keys.txt" "$tmp/keys.txt"; chmod 600 "$tmp/keys.txt"
# Plain text with some repetition (compressible) and a binary tail.
{ for i in $(seq 1 40); do echo "$i|lineitem|$((i * 7919 % 1000))|N|O|1996-0$((i % 9 + 1))-1$((i % 10))"; done; } > "$tmp/page.txt"
head -c 300 "$tmp/page.txt" > "$S/decompress/original.txt"
for tier in none:none deflate:aes128-ecb lz4:aes256-ctr zstd:aes192-cbc snappy:aes256-gcm deflate:aes256-gcm none:aes256-ctr; do
  c=${tier%%:*}; k=${tier#*:}
  case $k in aes128-*) id=1 ;; aes192-*) id=2 ;; *) id=3 ;; esac
  $B seal "$tmp/page.txt" -o "$S/unseal/$c-$k.sealed" --page-size 700 --compress "$c" --cipher "$k" \
    --key-file "$tmp/keys.txt" --key-id "$id" -q
done
for f in gzip zlib deflate lz4 snappy zstd; do
  $B compress --format "$f" "$S/decompress/original.txt" -o "$S/decompress/original.$f"
done
$B compress --format gzip /dev/null -o "$S/decompress/empty.gzip"
seq 1 300 > "$tmp/lines.txt"
P="--hll-p 4 --cm 2x4 --agms 2x4"
$B sketch "$tmp/lines.txt" $P --save crates/inpath-sketch/tests/corpus/lines-fast.skt -q >/dev/null
$B sketch "$tmp/lines.txt" $P --hash compat --save crates/inpath-sketch/tests/corpus/lines-compat.skt -q >/dev/null
head -c 4000 "$tmp/page.txt" > "$tmp/u32.bin"; truncate -s 2000 "$tmp/u32.bin"
$B sketch "$tmp/u32.bin" --format u32 --hll-p 5 --cm 1x5 --agms 3x4 --save crates/inpath-sketch/tests/corpus/u32.skt -q >/dev/null
C=crates/inpath-corr/tests/corpus
head -c 1280 "$tmp/page.txt" > "$tmp/lines.bin"; truncate -s 1280 "$tmp/lines.bin"
$B corr "$tmp/lines.bin" --layout lines --type u32 --save "$C/u32-lines.stats" >/dev/null
$B corr "$tmp/lines.bin" --layout rows --type i16 --streams 4 --save "$C/i16-rows.stats" >/dev/null
printf 'a,b,c\n1,2.5,-3\n4,5.25,6\n7,8,9.5\n' > "$tmp/f.csv"
$B corr "$tmp/f.csv" --save "$C/f64-csv.stats" >/dev/null
head -c 320 "$tmp/lines.bin" > "$tmp/small.bin"
$B corr "$tmp/small.bin" --layout lines --type u64 --spearman --save "$C/u64-spearman.stats" >/dev/null
W=crates/inpath-wire/tests/corpus
python3 - "$W" <<'PY'
import struct, sys
out = sys.argv[1]
msgs = [b"hello", b"", b"x" * 300, bytes(range(256))]
open(f"{out}/messages.bin", "wb").write(b"".join(struct.pack(">I", len(m)) + m for m in msgs))
open(f"{out}/one-message.bin", "wb").write(struct.pack(">I", 3) + b"abc")
PY
cat "$S/unseal/deflate-aes256-gcm.sealed" > "$W/stream.sealed"
cp "$tmp/page.txt" "$W/stream.plain"
ls -l "$S"/* crates/inpath-sketch/tests/corpus crates/inpath-corr/tests/corpus "$W" | awk '{s+=$5} END {print "corpus bytes:", s}'

#!/usr/bin/env python3
"""Seal engine benchmark: inpath's AES modes and page codec against OpenSSL and zlib level 1.

Usage: bash bench/setup.sh && .venv/bin/python bench/seal.py [--quick]

What runs (all single-process, on the same data):
- inpath-bench seal: raw AES modes per page size; the page codec per tier, page size (4 KiB to
  16 MiB plus 116 KiB), data (TPC-H lineitem text from the tpchgen crate, random bytes) and
  thread count (1, 2); the HANA trace size mix (reference 002, Table 2).
- OpenSSL: `openssl speed -evp <cipher> [-decrypt] -bytes <page size>` (one stream, one core).
- zlib level 1: Python's zlib (raw DEFLATE, wbits -15) on the same pages, one page per call.
- The raw AES modes again under every lower AES kernel this CPU has (`INPATH_AES=vaes256`,
  `aesni`, and `INPATH_ISA=portable` for the library path), each row labelled with its kernel.
Ratios are peer time / inpath time (above 1: inpath is faster). Targets from issues 4 and 11
are checked at the end. Never run this while anything else builds or runs.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

ROOT = common.ROOT


def openssl_speed(cipher, size, decrypt=False, seconds=2):
    """Bytes per second of `openssl speed -evp` for one block (page) size, or None."""
    args = ["openssl", "speed", "-mr", "-seconds", str(seconds), "-bytes", str(size), "-evp", cipher]
    if decrypt:
        args.insert(2, "-decrypt")
    try:
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    for line in out.splitlines():
        if line.startswith("+F:"):
            return float(line.split(":")[-1])
    return None


def zlib_seconds(pages, level=1, reps=3):
    """Median seconds for zlib raw DEFLATE at `level` of every page (one call per page), and
    the compressed bytes."""
    def run():
        total = 0
        for p in pages:
            c = zlib.compressobj(level, zlib.DEFLATED, -15)
            total += len(c.compress(p)) + len(c.flush())
        return total
    secs, _, out = common.time_median(run, reps=reps, warmup=1)
    return secs, out


def count_pages(m):
    """Pages a page-codec measurement sealed (its items)."""
    return max(m["items"], 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument("--mib", type=int, default=64, help="MiB per measurement")
    parser.add_argument("--only", choices=["aes", "page", "mix"], help="only one group")
    parser.add_argument("--no-levels", action="store_true",
                        help="skip the AES runs under the lower kernels (aesni, library, ...)")
    args = parser.parse_args()

    common.build()
    dump = os.path.join(common.OUT, "lineitem.tbl")
    cmd = [common.bench_bin(), "seal", "--mib", str(args.mib), "--dump", dump] + (["--quick"] if args.quick else [])
    cmd += ["--only", args.only] if args.only else []
    started = time.time()
    ours = json.loads(subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    # The raw AES modes under each lower kernel (issue 11: every level's figures, and the
    # AES-NI-without-VAES path measured on a VAES machine through INPATH_AES=aesni).
    best = next((m["extra"].get("kernel") for m in ours if m["extra"].get("group") == "aes"), None)
    if not args.no_levels and args.only in (None, "aes") and best:
        order = ["library", "aesni", "vaes256", "vaes512"]
        for kernel in reversed(order[:order.index(best)]):
            env = dict(os.environ)
            if kernel == "library":
                env["INPATH_ISA"] = "portable"
            else:
                env["INPATH_AES"] = kernel
            aes_cmd = cmd[:1] + [a for a in cmd[1:] if a not in ("--only", args.only)] + ["--only", "aes"]
            more = json.loads(subprocess.run(aes_cmd, cwd=ROOT, env=env, check=True,
                                             capture_output=True, text=True).stdout)
            ours += [m for m in more if m["extra"].get("group") == "aes"]
    recorded = [os.path.relpath(a, ROOT) if a == dump else a for a in cmd[1:]]
    report = common.Report("seal", {"inpath_bench_args": recorded, "openssl": subprocess.run(
        ["openssl", "version"], capture_output=True, text=True).stdout.strip(), "zlib": zlib.ZLIB_VERSION})
    report.note(f"inpath-bench ran {len(ours)} measurements in {time.time() - started:.0f} s")
    text = open(dump, "rb").read()

    # 1. AES modes against OpenSSL, same page size, one stream.
    speed_cache = {}

    def peer(cipher, size, decrypt=False):
        key = (cipher, size, decrypt)
        if key not in speed_cache:
            speed_cache[key] = openssl_speed(cipher, size, decrypt, seconds=1 if args.quick else 2)
        return speed_cache[key]

    ops = {"ecb-enc": ("ecb", False), "ecb-dec": ("ecb", True), "ctr": ("ctr", False),
           "cbc-enc": ("cbc", False), "cbc-dec": ("cbc", True), "cfb-enc": ("cfb", False),
           "cfb-dec": ("cfb", True), "ofb": ("ofb", False), "gcm-enc": ("gcm", False),
           "gcm-dec": ("gcm", True)}
    targets = []
    for m in ours:
        e = m["extra"]
        if e.get("group") != "aes":
            continue
        op = e["op"]
        if op in ("cbc-enc-8pages", "cbc-enc-16pages"):
            mode, dec = "cbc", False
        else:
            mode, dec = ops[op]
        cipher = f"aes-{e['bits']}-{mode}"
        bps = peer(cipher, e["size"], dec)
        peer_s = m["bytes"] / bps if bps else None
        kernel = e.get("kernel", "?")
        row = report.add(f"{m['name']} [{kernel}]", m["bytes"], m["median_s"],
                         f"openssl {cipher}{' -decrypt' if dec else ''}", peer_s, e)
        if e["bits"] == 256 and e["size"] >= 16384 and row["ratio"] and kernel != "library":
            # Issue 11 (every hand-written kernel): CTR, ECB, CBC decryption and GCM both ways
            # at least OpenSSL; CBC encryption over 8+ pages at least 4x OpenSSL's one stream.
            want11 = {"ctr": 1.0, "ecb-enc": 1.0, "ecb-dec": 1.0, "cbc-dec": 1.0, "gcm-enc": 1.0,
                      "gcm-dec": 1.0, "cbc-enc-8pages": 4.0, "cbc-enc-16pages": 4.0}.get(op)
            if want11:
                targets.append((f"issue 11: {m['name']} [{kernel}] vs OpenSSL", row["ratio"], want11))
        if e["bits"] == 256 and e["size"] >= 16384 and row["ratio"] and kernel == best:
            # Decryption targets: every mode's decryption (OFB's is the same operation).
            want = {"ctr": 2.0, "ecb-enc": 1.3, "cbc-enc-8pages": 4.0, "cbc-enc-16pages": 4.0,
                    "ecb-dec": 1.0, "cbc-dec": 1.0,
                    "cfb-dec": 1.0, "ofb": 1.0, "gcm-dec": 1.0}.get(op)
            if want:
                targets.append((f"{m['name']} vs OpenSSL", row["ratio"], want))

    # 2. Page codec tiers; DEFLATE tiers against zlib level 1 (+ OpenSSL CTR on its output).
    zlib_cache = {}
    for m in ours:
        e = m["extra"]
        if e.get("group") != "page":
            continue
        size, tier = e["size"], e["tier"]
        peer_name, peer_s = "-", None
        if e["data"] == "tpch" and tier.startswith("deflate-") and e["op"] == "seal" and e["threads"] == 1:
            level = int(tier.split("+")[0].split("-")[1])
            if (size, level) not in zlib_cache:
                count = max(m["items"], 1)
                # Slice each page directly (text[o:][:size] copied the whole tail per page).
                pages = [text[o:o + size] for o in ((i * size) % (len(text) - size) for i in range(count))]
                zlib_cache[(size, level)] = zlib_seconds(pages, level, reps=3 if args.quick else 5)
            z_s, z_out = zlib_cache[(size, level)]
            zlib_ratio = m["bytes"] / z_out
            z = f"zlib-{level}"
            if tier.endswith("+none"):
                peer_name, peer_s = z, z_s
            elif tier.endswith("-ctr"):
                bps = peer("aes-256-ctr", max(16, min(size, 16 << 20) // 2))
                peer_name, peer_s = f"{z} + openssl ctr", z_s + (z_out / bps if bps else 0)
                targets.append((f"{m['name']} vs {z}+openssl-ctr", peer_s / m["median_s"], 3.0))
            elif tier.endswith("-cbc"):
                bps = peer("aes-256-cbc", max(16, min(size, 16 << 20) // 2))
                peer_name, peer_s = f"{z} + openssl cbc", z_s + (z_out / bps if bps else 0)
            elif tier.endswith("-gcm"):
                bps = peer("aes-256-gcm", max(16, min(size, 16 << 20) // 2))
                peer_name, peer_s = f"{z} + openssl gcm", z_s + (z_out / bps if bps else 0)
                targets.append((f"issue 18: {m['name']} vs {z}+openssl-gcm (ratio {e['ratio']:.3f} vs "
                                f"{zlib_ratio:.3f})", peer_s / m["median_s"], 2.0))
            # Speed only compares at equal ratio: print both, and ours without the 64-byte
            # record headers (and GCM tags), which zlib's raw bodies do not carry.
            overhead = 64 + (16 if tier.endswith("-gcm") else 0)
            body = e["sealed_bytes"] - count_pages(m) * overhead if tier.endswith(("+none", "-ctr", "-gcm")) else None
            body_text = f", {m['bytes'] / body:.3f} without them" if body else ""
            report.note(f"{m['name']}: ratio {e['ratio']:.3f} with record headers{body_text}, against "
                        f"{z}'s {zlib_ratio:.3f} on the same pages")
        elif tier.startswith("none+") and e["op"] == "seal" and e["threads"] == 1 and "-" in tier:
            mode = tier.split("-")[-1]
            bps = peer(f"aes-256-{mode}", min(size, 16 << 20))
            peer_name, peer_s = f"openssl aes-256-{mode}", (m["bytes"] / bps if bps else None)
        elif tier.startswith("none+") and e["op"] == "unseal" and e["threads"] == 1 and "-" in tier:
            mode = tier.split("-")[-1]
            bps = peer(f"aes-256-{mode}", min(size, 16 << 20), decrypt=mode != "ctr")
            peer_name, peer_s = f"openssl aes-256-{mode} -decrypt", (m["bytes"] / bps if bps else None)
        extra = dict(e, us_per_page=round(e["us_per_page"], 2), ratio=round(e["ratio"], 3))
        report.add(m["name"], m["bytes"], m["median_s"], peer_name, peer_s, extra)
        if tier == "lz4+aes256-ctr" and e["data"] == "tpch" and e["op"] == "seal":
            targets.append((f"{m['name']} (GB/s, target 2)", m["gb_per_s"] / 2.0, 1.0))
        if (tier == "none+aes256-ctr" and e["op"] == "seal" and e["size"] == 65536
                and e["threads"] == 1):
            # Bare CTR at 64 KiB (the nearest size measured with --quick).
            bares = [b for b in ours if b["extra"].get("group") == "aes"
                     and b["extra"].get("op") == "ctr" and b["extra"].get("bits") == 256
                     and b["extra"].get("kernel") == best]
            bare = min(bares, key=lambda b: abs(b["extra"]["size"] - 65536), default=None)
            if bare:
                ratio = (bare["median_s"] / bare["bytes"]) / (m["median_s"] / m["bytes"])
                targets.append((f"issue 11: {m['name']} vs bare CTR {bare['extra']['size']} [{best}]",
                                ratio, 0.8))

    # 3. HANA trace mix.
    for m in ours:
        e = m["extra"]
        if e.get("group") == "mix":
            report.add(m["name"], m["bytes"], m["median_s"], "-", None,
                       {k: v for k, v in e.items() if k != "sizes"})

    # Per-page overhead at 4 KiB.
    for m in ours:
        e = m["extra"]
        if e.get("group") == "page" and e["size"] == 4096 and e["threads"] == 1 and e["data"] == "tpch":
            report.note(f"4 KiB page, {e['op']} {e['tier']}: {e['us_per_page']:.2f} us/page")

    report.note(f"AES kernel (best on this CPU within the caps): {best}")
    report.note("targets (issues 4 and 11): ratio achieved / needed")
    for name, got, want in targets:
        report.note(f"{'MET ' if got >= want else 'MISS'} {name}: {got:.2f}x (needs {want}x)")
    report.save()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Wire placement benchmark: `inpath wire` relay and sink on loopback, next to a direct run.

For 1, 4 and 16 parallel connections (the total split evenly), `inpath-bench wire throughput`
sends random u32 items and times until every byte has arrived:
  direct          sender -> receiver (no relay: the ceiling)
  relay           sender -> inpath wire relay -> receiver (plain forwarding)
  relay + sketch  the same with --tap sketch:format=u32 (P_HLL=16, 6x13, the SKT defaults)
  relay + HLL     the same with --tap sketch:format=u32,sketches=hll (the distinct count alone)
  relay + lossy   relay + sketch with --tap-policy lossy: the link never waits for the tap, which
                  sees what it can (the share of bytes and records it saw is reported)
  sink + sketch   sender -> inpath wire sink --tap sketch:format=u32
The relay and sink run as their own processes (as deployed), with one worker thread per CPU.
Then `inpath-bench wire latency` times 64-byte ping-pongs at low load (one message every
~200 us) through an echo server, directly and through the relay, and reports the round-trip
p50/p99 and what the relay adds.

Targets (issue 5): relay + sketch >= 85% of the plain relay; sink + sketch >= 1.5 GB/s on two
cores; plain relay >= 70% of direct. Issue 11 (on every CPU level): relay + HLL-only sketch >=
85% of the plain relay, relay + all three sketches >= 40%. Issue 45: relay + lossy all-three
sketch >= 90% of the plain relay, with the share of records the tap saw. Everything (senders, receivers, relay) shares this
machine's cores, so on a small machine the figures are a floor, not the relay's own limit.

Usage: python3 bench/wire.py [--gb 1] [--reps 3] [--conns 1,4,16]
Never run it while a build or another benchmark runs.
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TAP = "sketch:format=u32"
TAP_HLL = "sketch:format=u32,sketches=hll"


def target_dir():
    return os.environ.get("CARGO_TARGET_DIR", os.path.join(common.ROOT, "target"))


def bench(*args):
    exe = os.path.join(target_dir(), "release", "inpath-bench")
    inpath = os.path.join(target_dir(), "release", "inpath")
    out = subprocess.run([exe, "wire", *args, "--inpath", inpath], cwd=common.ROOT, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=1.0, help="GB per measurement (split over the connections)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--conns", default="1,4,16")
    parser.add_argument("--messages", type=int, default=5000)
    args = parser.parse_args()
    common.build()
    nbytes = int(args.gb * 1e9)
    report = common.Report("wire", {"bytes_per_measurement": nbytes, "reps": args.reps,
                                    "data": "random u32 items over loopback TCP", "tap": TAP})
    for conns in [int(c) for c in args.conns.split(",")]:
        common_args = ["--conns", str(conns), "--bytes", str(nbytes), "--reps", str(args.reps)]
        direct = bench("throughput", "--mode", "direct", *common_args)
        relay = bench("throughput", "--mode", "relay", *common_args)
        relay_sketch = bench("throughput", "--mode", "relay", "--tap", TAP, *common_args)
        relay_hll = bench("throughput", "--mode", "relay", "--tap", TAP_HLL, *common_args)
        relay_lossy = bench("throughput", "--mode", "relay", "--tap", TAP, "--tap-policy", "lossy", *common_args)
        sink_sketch = bench("throughput", "--mode", "sink", "--tap", TAP, *common_args)
        b = direct["bytes"]
        report.add(f"relay (plain), {conns} conn(s)", b, relay["median_s"], "direct", direct["median_s"],
                   {"samples": relay["samples"], "direct_samples": direct["samples"]})
        report.add(f"relay + sketch, {conns} conn(s)", b, relay_sketch["median_s"], "relay (plain)",
                   relay["median_s"], {"samples": relay_sketch["samples"]})
        report.add(f"relay + HLL-only sketch, {conns} conn(s)", b, relay_hll["median_s"], "relay (plain)",
                   relay["median_s"], {"samples": relay_hll["samples"]})
        seen = relay_lossy["extra"]["tapped"]
        report.add(f"relay + lossy sketch, {conns} conn(s)", b, relay_lossy["median_s"], "relay (plain)",
                   relay["median_s"], {"samples": relay_lossy["samples"], "tapped": seen})
        report.add(f"sink + sketch, {conns} conn(s)", b, sink_sketch["median_s"], "direct (receive only)",
                   direct["median_s"], {"samples": sink_sketch["samples"]})
        report.note(f"{conns} conn(s): relay/direct {direct['median_s'] / relay['median_s']:.0%} (target >= 70%), "
                    f"relay+sketch/relay {relay['median_s'] / relay_sketch['median_s']:.0%} (target >= 85%; issue 11: >= 40%), "
                    f"relay+HLL/relay {relay['median_s'] / relay_hll['median_s']:.0%} (target >= 85%), "
                    f"relay+lossy sketch/relay {relay['median_s'] / relay_lossy['median_s']:.0%} (target >= 90%; "
                    f"the tap saw {seen['share_of_bytes'] or 0:.1%} of the bytes, "
                    f"{seen['share_of_records'] or 0:.1%} of the records), "
                    f"sink+sketch {sink_sketch['gb_per_s']:.2f} GB/s (target >= 1.5)")

    lat = {}
    for name, extra in [("direct", ["--mode", "direct"]), ("relay", ["--mode", "relay"]),
                        ("relay + sketch", ["--mode", "relay", "--tap", TAP])]:
        m = bench("latency", *extra, "--messages", str(args.messages), "--size", "64")
        lat[name] = m["extra"]
        report.note(f"round trip, 64 B messages, {name}: p50 {m['extra']['p50_s'] * 1e6:.1f} us, "
                    f"p99 {m['extra']['p99_s'] * 1e6:.1f} us")
    for name in ("relay", "relay + sketch"):
        # A round trip crosses the relay twice (request and echo).
        add50 = (lat[name]["p50_s"] - lat["direct"]["p50_s"]) / 2
        add99 = (lat[name]["p99_s"] - lat["direct"]["p99_s"]) / 2
        report.note(f"latency added per message by the {name} (one way, half the round-trip difference): "
                    f"p50 {add50 * 1e6:.1f} us, p99 {add99 * 1e6:.1f} us")
    report.save()


if __name__ == "__main__":
    main()

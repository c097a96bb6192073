#!/usr/bin/env python3
"""Charts of one benchmark run directory, as plain SVG (standard library only).

    python3 bench/plot.py [RUN_DIR] [-o docs/img] [--charts throughput,hll,tpch] [--threads N]

RUN_DIR is a `bench/runs/<YYYY-MM-DD>-<cpu>/` directory (default: the newest under bench/runs),
holding the JSON files the bench scripts save (bench/common.py: {"engine", "schema": 1,
"setup": {"cpu", "date", ...}, "rows": [...]}). It draws:

- throughput.svg: the headline measurements of every engine that has a file in the run
  (sketch, corr, seal, wire, io, python, cache, store, scaleout), inpath's bar beside the
  peer's, one panel per engine and unit with its own scale, the ratio in inpath's favour at
  the end of each pair (above 1: inpath is faster, or uses less);
- hll-error.svg: HyperLogLog relative error against the number of distinct items, per seed
  and mean, inpath and DuckDB, with the +-1.04/sqrt(2^P) band (sketch-accuracy.json, from
  `bench/sketch.py --accuracy`);
- tpch.svg: per TPC-H query, seconds for DuckDB on its own file and inpath without and with
  offload (the offload rows of query.json or query-offload.json, from `bench/query.py`), at
  the largest thread count of the run unless --threads says;
- cache-scale.svg (only with --charts cache-scale): per DRAM budget, the items held and the hit
  ratio under Zipf 0.99 and uniform keys, inpath beside memcached with extstore
  (cache-scale.json, from `bench/cache.py --scale`).

Every file in RUN_DIR must be a run file: a file that is not JSON, lacks "setup" (with its
"cpu" and "date") or "rows", or lacks a field a chart needs, stops the script with a message
naming the file and what is wrong, and no chart is written. An engine whose file is absent is
left out of its chart (said on stderr); a chart with no input at all is an error. The same
input gives byte-identical SVG.
"""

import argparse
import json
import math
import os
import re
import sys
from xml.sax.saxutils import escape

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(ROOT, "bench", "runs")
SCHEMA = 1
CHARTS = ("throughput", "hll", "tpch", "scale", "cache-scale")
# Drawn unless --charts names others; scale only from a run directory with a sweep, cache-scale
# only when asked (its run is a long one).
DEFAULT_CHARTS = ("throughput", "hll", "tpch", "scale")

# The headline rows of each engine's file: (measurement pattern, peer pattern or None); the
# first row matching both, with a peer figure, is drawn (AES rows of the best kernel come first
# in seal.json). An engine whose file matches none of them falls back to its first rows with a
# peer figure.
HEADLINES = [
    ("sketch", [(r"^HLL alone, 1 thread$", r"^DuckDB"), (r"^HLL alone, 1 thread$", r"^DataSketches"),
                (r"^all three, 1 thread$", r"^DuckDB"), (r"^all three, 2 threads$", r"^DuckDB"),
                (r"^Count-Min alone, 1 thread$", r"^DataSketches")]),
    ("corr", [(r"^16 x \S+ u32, 1 thread", r"^numpy"), (r"^16 x \S+ u32, 2 thread", r"^numpy"),
              (r"^32 x \S+ u16, 1 thread", r"^numpy"), (r"^64 x \S+ u8, 1 thread", r"^numpy"),
              (r"^64 x \S+ u8, 2 thread", r"^numpy"), (r"^1024 x \S+ f64, 2 thread", r"^numpy")]),
    ("seal", [(r"^aes256-ctr 1048576\b", None), (r"^aes256-ecb enc 1048576\b", None),
              (r"^aes256-cbc dec 1048576\b", None), (r"^aes256-cbc enc 16 pages 1048576\b", None),
              (r"^aes256-gcm dec 1048576\b", None), (r"^seal deflate-1\+aes256-ctr tpch 65536 t1$", None)]),
    ("wire", [(r"^relay \(plain\), 1 conn", None), (r"^relay \+ HLL-only sketch, 1 conn", None),
              (r"^relay \+ sketch, 1 conn", None)]),
    ("io", [(r"^corr u32, file, 1 thread", None), (r"^sketch all three, file, 1 thread", None),
            (r"^cat F \| inpath corr -, 1 thread\(s\) vs file", None),
            (r"^seal none\+aes256-gcm file->file, 1 thread", None),
            (r"^seal none\+aes256-gcm, 1 thread vs openssl enc$", None)]),
    ("python", [(r"vs Rust API", None), (r"^Sketch\.update .* vs DuckDB", None),
                (r"^corr 16x2M u32, 1 thread", r"^numpy"), (r"^corr 16x2M u32, 2 threads", r"^numpy"),
                (r"^seal_batch none\+AES-256-CTR", None), (r"^seal_batch none\+AES-256-CBC", None)]),
    ("cache", [(r"^\(1\) DRAM working set: server CPU", None), (r"^\(2\) 10x DRAM: end-to-end", None),
               (r"^\(2\) backend 1000 us: end-to-end", None)]),
    ("store", [(r"^grep common word raw t1 vs rg", None), (r"^grep regex word raw t1 vs rg", None),
               (r"^bfs rmat raw t1 vs scipy", None), (r"^nn 1 query t1 \S+ vs faiss", None),
               (r"^nn 16 queries t1 (?!portable)\S+ vs faiss", None), (r"^store crc t1", None)]),
    ("scaleout", [(r"inpath standalone .* vs spark", None), (r"^distinct 50M int64: inpath\.spark \(mapInArrow\)", None),
                  (r"^dask sketch", None), (r"^grep 2 workers", None)]),
]
FALLBACK_ROWS = 6

INPATH_COLOUR = "#1f6fb4"
PEER_COLOUR = "#9a9a9a"
DUCKDB_COLOUR = "#e08a1e"
OFFLOAD_COLOUR = "#2b9348"
FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""


class RunError(Exception):
    """A run file that cannot be drawn from; the message names the file."""


def note(text):
    print(f"plot.py: {text}", file=sys.stderr)


# --- reading ------------------------------------------------------------------------------


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load_run(run_dir):
    """Every *.json in run_dir, checked for the common layout: {name: (path, object)}."""
    if not os.path.isdir(run_dir):
        raise RunError(f"{run_dir}: not a directory")
    files = {}
    for name in sorted(os.listdir(run_dir)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(run_dir, name)
        try:
            with open(path, encoding="utf-8") as f:
                obj = json.load(f)
        except (OSError, UnicodeDecodeError) as e:
            raise RunError(f"{path}: cannot be read: {e}") from None
        except ValueError as e:
            raise RunError(f"{path}: not valid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise RunError(f"{path}: not a run file: the top level is not an object")
        if "schema" in obj and obj["schema"] != SCHEMA:
            raise RunError(f"{path}: schema {obj['schema']!r}, this script reads schema {SCHEMA}")
        setup = obj.get("setup")
        if not isinstance(setup, dict):
            raise RunError(f"{path}: lacks \"setup\" (an object)")
        for key in ("cpu", "date"):
            if not isinstance(setup.get(key), str) or not setup[key]:
                raise RunError(f"{path}: setup lacks \"{key}\" (a string)")
        if not isinstance(obj.get("rows"), list):
            raise RunError(f"{path}: lacks \"rows\" (a list)")
        for i, row in enumerate(obj["rows"]):
            if not isinstance(row, dict):
                raise RunError(f"{path}: rows[{i}] is not an object")
        files[name[:-5]] = (path, obj)
    return files


def need(path, i, row, key, check, what):
    """row[key], which must pass `check`; otherwise a RunError naming the file and the row."""
    if key not in row:
        raise RunError(f"{path}: rows[{i}] lacks \"{key}\" ({what})")
    if not check(row[key]):
        raise RunError(f"{path}: rows[{i}] \"{key}\" is {row[key]!r}, not {what}")
    return row[key]


def positive(v):
    return is_number(v) and v > 0


def number_or_none(v):
    return v is None or is_number(v)


def comparisons(path, obj):
    """The rows of an engine's file that compare inpath with a peer, as dicts: measurement,
    peer, inpath, peer_value, unit, ratio (in inpath's favour), lower (lower is better). Rows
    of Report.add and of cache.py's own layout; notes are skipped, anything else is an error."""
    out = []
    for i, row in enumerate(obj["rows"]):
        if set(row) <= {"note"}:
            continue
        measurement = need(path, i, row, "measurement", lambda v: isinstance(v, str), "a string")
        peer = need(path, i, row, "peer", lambda v: isinstance(v, str), "a string")
        if "inpath_gb_s" in row or "ratio_in_inpath_favour" not in row:
            ours = need(path, i, row, "inpath_gb_s", positive, "a positive number")
            theirs = need(path, i, row, "peer_gb_s", number_or_none, "a number or null")
            ratio = need(path, i, row, "ratio", number_or_none, "a number or null")
            unit = row.get("unit", "GB/s")
            lower = False
        else:  # cache.py: {"inpath", "peer_value", "unit", "ratio_in_inpath_favour"}
            ours = need(path, i, row, "inpath", is_number, "a number")
            theirs = need(path, i, row, "peer_value", number_or_none, "a number or null")
            ratio = need(path, i, row, "ratio_in_inpath_favour", number_or_none, "a number or null")
            unit = need(path, i, row, "unit", lambda v: isinstance(v, str), "a string")
            lower = bool(ratio and theirs and ours and abs(ratio - theirs / ours) < abs(ratio - ours / theirs))
        if not isinstance(unit, str) or not unit:
            unit = "ratio"
        if theirs is None or ratio is None or not (theirs > 0 and ours > 0 and ratio > 0):
            continue
        out.append({"measurement": measurement, "peer": peer, "inpath": float(ours),
                    "peer_value": float(theirs), "unit": unit, "ratio": float(ratio), "lower": lower})
    return out


def headline_rows(engine, path, obj, patterns):
    rows = comparisons(path, obj)
    if not rows:
        raise RunError(f"{path}: no row compares inpath with a peer (measurement, inpath_gb_s, "
                       f"peer, peer_gb_s, ratio), which the throughput chart needs")
    picked = []
    for m_pat, p_pat in patterns:
        for r in rows:
            if re.search(m_pat, r["measurement"]) and (p_pat is None or re.search(p_pat, r["peer"])):
                if r not in picked:
                    picked.append(r)
                break
    if not picked:
        note(f"{path}: none of the headline measurements found; drawing its first {FALLBACK_ROWS} "
             f"rows with a peer")
        picked = rows[:FALLBACK_ROWS]
    return picked


def offload_rows(path, obj):
    """{(query, threads): row} of the offload rows (bench/query.py's offload_rows)."""
    out = {}
    for i, row in enumerate(obj["rows"]):
        if "offload_on_s" not in row and "offload_off_s" not in row:
            continue
        q = need(path, i, row, "query", lambda v: isinstance(v, int) and 1 <= v <= 22, "a query number 1-22")
        t = need(path, i, row, "threads", lambda v: isinstance(v, int) and v > 0, "a thread count")
        vals = {k: float(need(path, i, row, k, positive, "a positive number of seconds"))
                for k in ("offload_off_s", "offload_on_s", "duckdb_file_s")}
        out[(q, t)] = vals
    return out


# --- SVG helpers --------------------------------------------------------------------------


def f1(v):
    return f"{v:.1f}"


def fmt(v):
    """A figure with three significant digits, thousands separated."""
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a == 0:
        return "0"
    return f"{v:.{max(2, 2 - int(math.floor(math.log10(a))))}f}"


def text(x, y, s, size=11, anchor="start", weight=None, fill="#222", extra=""):
    w = f' font-weight="{weight}"' if weight else ""
    return (f'<text x="{f1(x)}" y="{f1(y)}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{w}'
            f'{extra}>{escape(s)}</text>')


def rect(x, y, w, h, fill, title=None, opacity=None):
    t = f"<title>{escape(title)}</title>" if title else ""
    o = f' fill-opacity="{opacity}"' if opacity is not None else ""
    return (f'<rect x="{f1(x)}" y="{f1(y)}" width="{f1(max(w, 0.0))}" height="{f1(h)}" fill="{fill}"{o}>'
            f'{t}</rect>')


def svg(width, height, title, subtitle, body):
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{f1(height)}" '
            f'viewBox="0 0 {width} {f1(height)}" {FONT}>\n'
            f'<rect x="0" y="0" width="{width}" height="{f1(height)}" fill="#ffffff"/>\n'
            + text(20, 26, title, size=16, weight="bold") + "\n"
            + text(20, 46, subtitle, size=11, fill="#555") + "\n")
    return head + "\n".join(body) + "\n</svg>\n"


def clip(s, n):
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def subtitle(files, run_label, extra=None):
    cpus = sorted({obj["setup"]["cpu"] for _, obj in files})
    dates = sorted({obj["setup"]["date"][:10] for _, obj in files})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    parts = [" / ".join(cpus), when, f"run {run_label}"]
    if extra:
        parts.append(extra)
    return " \u00b7 ".join(parts)


# --- charts -------------------------------------------------------------------------------


def throughput_chart(run, run_label):
    panels, used = [], []
    for engine, patterns in HEADLINES:
        if engine not in run:
            note(f"{engine}.json absent from the run: throughput chart without {engine}")
            continue
        path, obj = run[engine]
        rows = headline_rows(engine, path, obj, patterns)
        used.append((path, obj))
        units = []
        for r in rows:
            if r["unit"] not in units:
                units.append(r["unit"])
        for unit in units:
            panels.append((engine, unit, [r for r in rows if r["unit"] == unit]))
    if not panels:
        raise RunError(f"{run_label}: no input for throughput.svg: none of "
                       + ", ".join(f"{e}.json" for e, _ in HEADLINES))
    width, left, bar_x, bar_w, ratio_x = 900, 20, 200, 480, 880
    group_h, bar_h = 50, 13
    body, y = [], 64
    body.append(rect(left, y, 12, 10, INPATH_COLOUR) + text(left + 16, y + 9, "inpath", size=11))
    body.append(rect(left + 80, y, 12, 10, PEER_COLOUR) + text(left + 96, y + 9, "peer (named on its bar)", size=11))
    body.append(text(ratio_x, y + 9, "ratio in inpath's favour: peer time / inpath time (> 1: inpath better)", size=11, anchor="end"))
    y += 24
    for engine, unit, rows in panels:
        lower = any(r["lower"] for r in rows)
        head = f"{engine} \u2014 {unit}" + (" (lower is better)" if lower else "")
        body.append(text(left, y + 14, head, size=13, weight="bold"))
        body.append(f'<line x1="{left}" y1="{f1(y + 19)}" x2="{ratio_x}" y2="{f1(y + 19)}" stroke="#ccc"/>')
        y += 26
        top = max(max(r["inpath"], r["peer_value"]) for r in rows)
        scale = bar_w / top
        for r in rows:
            body.append(text(left, y + 11, clip(r["measurement"], 120), size=11, weight="bold", fill="#333"))
            for k, (who, value, colour) in enumerate((("inpath", r["inpath"], INPATH_COLOUR),
                                                       (r["peer"], r["peer_value"], PEER_COLOUR))):
                by = y + 16 + k * (bar_h + 3)
                body.append(text(bar_x - 6, by + bar_h - 3, clip(who, 30), size=10, anchor="end", fill="#444"))
                body.append(rect(bar_x, by, value * scale, bar_h, colour, f"{who}: {fmt(value)} {unit}"))
                body.append(text(bar_x + value * scale + 4, by + bar_h - 3, f"{fmt(value)} {unit}", size=10, fill="#333"))
            ratio = r["ratio"]
            body.append(text(ratio_x, y + 16 + bar_h + 2, f"{ratio:.2f}\u00d7", size=13, anchor="end",
                             weight="bold", fill="#1a7f37" if ratio >= 1 else "#b42318"))
            y += group_h
        y += 8
    title = "inpath beside its best peer, per engine (each panel its own scale)"
    return svg(width, y + 10, title, subtitle(used, run_label), body)


def hll_chart(run, run_label):
    if "sketch-accuracy" not in run:
        raise RunError(f"{run_label}: no input for hll-error.svg: sketch-accuracy.json is absent "
                       f"(bench/sketch.py --accuracy)")
    path, obj = run["sketch-accuracy"]
    setup = obj["setup"]
    if not isinstance(setup.get("hll_p"), int) or not 4 <= setup["hll_p"] <= 18:
        raise RunError(f"{path}: setup lacks \"hll_p\" (the HyperLogLog precision, 4-18)")
    p = setup["hll_p"]
    band = 1.04 / math.sqrt(2**p) * 100
    points = []
    for i, row in enumerate(obj["rows"]):
        if set(row) <= {"note"}:
            continue
        n = need(path, i, row, "cardinality", lambda v: isinstance(v, int) and v > 0, "a positive integer")
        series = {}
        for who in ("inpath", "duckdb"):
            series[who] = need(path, i, row, f"{who}_rel_error",
                               lambda v: isinstance(v, list) and v and all(is_number(e) for e in v),
                               "a non-empty list of numbers")
        points.append((n, [e * 100 for e in series["inpath"]], [e * 100 for e in series["duckdb"]]))
    if not points:
        raise RunError(f"{path}: no row has a cardinality and its errors, which hll-error.svg needs")
    points.sort(key=lambda t: t[0])
    peer = setup.get("peer", "DuckDB approx_count_distinct")
    peer_short = "DuckDB" if "duckdb" in str(peer).lower() else str(peer)
    width, height = 820, 490
    x0, x1, y0, y1 = 80, 780, 90, 440
    lo, hi = math.log10(points[0][0]) - 0.35, math.log10(points[-1][0]) + 0.35
    worst = max([abs(e) for _, a, b in points for e in a + b] + [2 * band])
    step = nice_step(worst * 1.1 / 4)
    top = step * math.ceil(worst * 1.1 / step)

    def X(n):
        return x0 + (math.log10(n) - lo) / (hi - lo) * (x1 - x0)

    def Y(e):
        return y0 + (top - e) / (2 * top) * (y1 - y0)

    body = [f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="#fafafa" stroke="#bbb"/>',
            f'<rect x="{x0}" y="{f1(Y(band))}" width="{x1 - x0}" height="{f1(Y(-band) - Y(band))}" '
            f'fill="{INPATH_COLOUR}" fill-opacity="0.12"><title>\u00b11.04/\u221a2^{p} = \u00b1{band:.3f} %</title></rect>']
    k = -math.floor(top / step)
    while k * step <= top + 1e-12:
        e = k * step
        body.append(f'<line x1="{x0}" y1="{f1(Y(e))}" x2="{x1}" y2="{f1(Y(e))}" stroke="{"#888" if k == 0 else "#e3e3e3"}"/>')
        body.append(text(x0 - 6, Y(e) + 4, f"{e:+g} %" if e else "0 %", size=10, anchor="end", fill="#444"))
        k += 1
    for d in range(math.ceil(lo), math.floor(hi) + 1):
        x = X(10**d)
        body.append(f'<line x1="{f1(x)}" y1="{y0}" x2="{f1(x)}" y2="{y1}" stroke="#e3e3e3"/>')
        body.append(text(x, y1 + 16, f"10^{d}", size=10, anchor="middle", fill="#444"))
    body.append(text((x0 + x1) / 2, y1 + 34, "distinct items (log scale)", size=11, anchor="middle"))
    body.append(text(22, (y0 + y1) / 2, "relative error (estimate \u2212 exact) / exact, %", size=11, anchor="middle",
                     extra=f' transform="rotate(-90 22 {f1((y0 + y1) / 2)})"'))
    for who, errors_at, colour, dx in (("inpath", 1, INPATH_COLOUR, -7), (peer_short, 2, DUCKDB_COLOUR, 7)):
        means = []
        for pt in points:
            n, errors = pt[0], pt[errors_at]
            x = X(n) + dx
            for e in errors:
                body.append(f'<circle cx="{f1(x)}" cy="{f1(Y(e))}" r="2.6" fill="{colour}" fill-opacity="0.55">'
                            f'<title>{escape(who)}, {n:,} distinct: {e:+.3f} %</title></circle>')
            mean = sum(errors) / len(errors)
            means.append((x, mean))
            body.append(f'<line x1="{f1(x - 6)}" y1="{f1(Y(mean))}" x2="{f1(x + 6)}" y2="{f1(Y(mean))}" '
                        f'stroke="{colour}" stroke-width="2.5"><title>{escape(who)}, {n:,} distinct, mean of '
                        f'{len(errors)}: {mean:+.3f} %</title></line>')
        body.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="'
                    + " ".join(f"{f1(x)},{f1(Y(m))}" for x, m in means) + '"/>')
    seeds = max(len(a) for _, a, _ in points)
    ly = 64
    body.append(f'<circle cx="{x0 + 6}" cy="{ly}" r="3" fill="{INPATH_COLOUR}"/>'
                + text(x0 + 14, ly + 4, f"inpath HLL, P = {p} (dots: {seeds} seeds; bar and line: mean)", size=11))
    body.append(f'<circle cx="{x0 + 356}" cy="{ly}" r="3" fill="{DUCKDB_COLOUR}"/>'
                + text(x0 + 364, ly + 4, clip(str(peer), 48), size=11))
    body.append(rect(x1 - 150, y0 + 8, 12, 10, INPATH_COLOUR, opacity=0.12)
                + text(x1 - 134, y0 + 17, f"\u00b11.04/\u221a2^{p} = \u00b1{band:.3f} %", size=11))
    title = "HyperLogLog relative error against the number of distinct items"
    return svg(width, height, title, subtitle([(path, obj)], run_label), body)


def nice_step(raw):
    """1, 2 or 5 times a power of ten, at least `raw`."""
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * power >= raw - 1e-12:
            return m * power
    return 10 * power



def log_axis(body, values, x0, x1, y0, y1, unit):
    """A plot area with a log-scale y axis spanning `values` by whole decades (grid lines at
    1, 2 and 5 of each, labelled with `unit`) appended to `body`; returns the value-to-y map."""
    lo = 10 ** math.floor(math.log10(min(values)))
    hi = 10 ** math.ceil(math.log10(max(values)))
    if hi == lo:
        hi = lo * 10

    def Y(v):
        return y1 - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (y1 - y0)

    body.append(f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="#fafafa" stroke="#bbb"/>')
    d = round(math.log10(lo))
    while 10**d <= hi * 1.0001:
        for m in (1, 2, 5):
            v = m * 10**d
            if lo <= v <= hi:
                body.append(f'<line x1="{x0}" y1="{f1(Y(v))}" x2="{x1}" y2="{f1(Y(v))}" '
                            f'stroke="{"#d0d0d0" if m == 1 else "#eeeeee"}"/>')
                body.append(text(x0 - 6, Y(v) + 4, f"{v:g}{unit}", size=10, anchor="end", fill="#444"))
        d += 1
    return Y

def tpch_chart(run, run_label, threads=None):
    sources = []
    for name in ("query", "query-offload"):
        if name not in run:
            continue
        path, obj = run[name]
        rows = offload_rows(path, obj)
        if rows:
            sources.append((obj["setup"]["date"], name, path, obj, rows))
        else:
            note(f"{path}: no offload rows (query, threads, offload_off_s, offload_on_s, duckdb_file_s)")
    if not sources:
        present = [run[n][0] for n in ("query", "query-offload") if n in run]
        if present:
            raise RunError(f"{', '.join(present)}: no offload rows (query, threads, offload_off_s, "
                           f"offload_on_s, duckdb_file_s), which tpch.svg needs")
        raise RunError(f"{run_label}: no input for tpch.svg: query.json and query-offload.json are absent "
                       f"(bench/query.py)")
    sources.sort(key=lambda s: (s[0], s[1]))
    _, name, path, obj, rows = sources[-1]
    if len(sources) > 1:
        note(f"tpch.svg from {path}, the later of {', '.join(s[2] for s in sources)}")
    thread_counts = sorted({t for _, t in rows})
    t = threads if threads is not None else thread_counts[-1]
    if t not in thread_counts:
        raise RunError(f"{path}: no offload rows at {t} thread(s) (it has {thread_counts})")
    missing = [q for q in range(1, 23) if (q, t) not in rows]
    if missing:
        raise RunError(f"{path}: offload rows at {t} thread(s) lack queries {missing}")
    series = [("DuckDB, its own file", "duckdb_file_s", DUCKDB_COLOUR),
              ("inpath, no offload", "offload_off_s", PEER_COLOUR),
              ("inpath, offload", "offload_on_s", OFFLOAD_COLOUR)]
    values = [rows[(q, t)][k] for q in range(1, 23) for _, k, _ in series]
    width, height = 980, 445
    x0, x1, y0, y1 = 70, 960, 96, 420
    body = []
    Y = log_axis(body, values, x0, x1, y0, y1, " s")
    group = (x1 - x0) / 22
    bw = (group - 8) / 3
    for q in range(1, 23):
        gx = x0 + (q - 1) * group + 4
        for k, (label, key, colour) in enumerate(series):
            v = rows[(q, t)][key]
            body.append(rect(gx + k * bw, Y(v), bw - 1, y1 - Y(v), colour, f"Q{q}, {label}: {v:.4f} s"))
        body.append(text(gx + group / 2 - 4, y1 + 15, f"Q{q}", size=10, anchor="middle", fill="#333"))
    body.append(text(22, (y0 + y1) / 2, "seconds per query (log scale)", size=11, anchor="middle",
                     extra=f' transform="rotate(-90 22 {f1((y0 + y1) / 2)})"'))
    lx = x0
    for label, key, colour in series:
        total = sum(rows[(q, t)][key] for q in range(1, 23))
        legend = f"{label} (22 queries: {total:.3f} s)"
        body.append(rect(lx, 62, 12, 10, colour) + text(lx + 16, 71, legend, size=11))
        lx += 12 + 16 + 7 * len(legend)
    data = obj["setup"].get("data")
    extra = f"{t} thread(s)" + (f", {data}" if isinstance(data, str) else "")
    title = "TPC-H per query: DuckDB against inpath without and with offload"
    return svg(width, height, title, subtitle([(path, obj)], run_label, extra), body)


def scale_chart(run, run_label):
    """docs/img/tpch-scale.svg from query-scale.json (bench/query.py --scale): the 22-query
    total against the scale factor for DuckDB and inpath without and with offload, warm (solid)
    and cold (dashed), and beside it each one's peak anonymous memory (RssAnon)."""
    if "query-scale" not in run:
        raise RunError(f"{run_label}: no query-scale.json (bench/query.py --scale)")
    path, obj = run["query-scale"]
    rows = obj.get("rows") or []
    results = rows[0] if rows and isinstance(rows[0], dict) else {}
    sfs = results.get("scale_factors") or {}
    if not sfs:
        raise RunError(f"{path}: no scale factors")
    engines = [("DuckDB", "duckdb", DUCKDB_COLOUR), ("inpath, no offload", "off", PEER_COLOUR),
               ("inpath, offload", "on", OFFLOAD_COLOUR)]

    def total(e, part, kind):
        d = (e.get(part) or {}).get(kind)
        if not d or len(d) < 22 or any(isinstance(v, dict) and "seconds" not in v for v in d.values()):
            return None  # not run, or a query failed at this scale: no point
        return sum(v["seconds"] if isinstance(v, dict) else v for v in d.values())

    def peak(e, part):
        p = e.get(part) or {}
        cold = p.get("cold")
        values = [v["anon_peak"] for v in cold.values()] if cold else []
        values.append(p.get("warm_anon_peak") or 0)
        return max(values) if any(values) else None

    points = sorted((float(k), e) for k, e in sfs.items())
    xs = [sf for sf, _ in points]
    series = []
    for label, part, colour in engines:
        for kind, dash in (("warm", None), ("cold", "5,4")):
            pts = [(sf, total(e, part, kind)) for sf, e in points]
            pts = [(x, y) for x, y in pts if y]
            if pts:
                series.append((f"{label}, {kind}", colour, dash, pts))
    mem = []
    for label, part, colour in engines:
        pts = [(sf, peak(e, part)) for sf, e in points]
        pts = [(x, y / 2**30) for x, y in pts if y]
        if pts:
            mem.append((label, colour, None, pts))
    if not series:
        raise RunError(f"{path}: no scale factor has all 22 queries of any engine")
    width, height = 980, 470
    panels = [(70, 540, series, "22-query total, seconds (log)", "s"),
              (640, 960, mem, "peak anonymous memory, GiB (log)", "GiB")]
    body = []
    for x0, x1, ser, ylabel, unit in panels:
        y0, y1 = 110, 420
        ys = [y for _, _, _, pts in ser for _, y in pts]
        xlo = 10 ** math.floor(math.log10(min(xs)))
        xhi = 10 ** math.ceil(math.log10(max(xs)))
        if xhi == xlo:
            xhi = xlo * 10

        def X(v, xlo=xlo, xhi=xhi, x0=x0, x1=x1):
            return x0 + (math.log10(v) - math.log10(xlo)) / (math.log10(xhi) - math.log10(xlo)) * (x1 - x0)

        Y = log_axis(body, ys, x0, x1, y0, y1, "")
        for sf in xs:
            body.append(f'<line x1="{f1(X(sf))}" y1="{y0}" x2="{f1(X(sf))}" y2="{y1}" stroke="#eeeeee"/>')
            body.append(text(X(sf), y1 + 15, f"SF {sf:g}", size=10, anchor="middle", fill="#333"))
        body.append(text(x0 - 48, (y0 + y1) / 2, ylabel, size=11, anchor="middle",
                         extra=f' transform="rotate(-90 {x0 - 48} {f1((y0 + y1) / 2)})"'))
        for label, colour, dash, pts in ser:
            path_d = " ".join(f"{'M' if i == 0 else 'L'}{f1(X(x))},{f1(Y(y))}" for i, (x, y) in enumerate(pts))
            dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
            body.append(f'<path d="{path_d}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}>'
                        f'<title>{label}</title></path>')
            for x, y in pts:
                body.append(f'<circle cx="{f1(X(x))}" cy="{f1(Y(y))}" r="3" fill="{colour}">'
                            f'<title>{label}, SF {x:g}: {y:.3g} {unit}</title></circle>')
    lx = 70
    for label, colour, dash, _ in series:
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        body.append(f'<line x1="{lx}" y1="70" x2="{lx + 22}" y2="70" stroke="{colour}" stroke-width="2"{dash_attr}/>')
        body.append(text(lx + 26, 74, label, size=10))
        lx += 30 + 6 * len(label)
    threads = (obj.get("setup") or {}).get("threads")
    extra = f"{threads} thread(s); cold: page cache dropped before each query, each in a fresh process"
    title = "TPC-H from SF 1 up: DuckDB against inpath without and with offload"
    return svg(width, height, title, subtitle([(path, obj)], run_label, extra), body)


# --- main ---------------------------------------------------------------------------------


CACHE_SCALE = [("items held", r"^\[(\d+) MiB\] items held$", 1e6, "M items"),
               ("hit ratio, Zipf 0.99", r"^\[(\d+) MiB\] gets Zipf \.99, 4 conns: hit ratio$", 0.01, "%"),
               ("hit ratio, uniform", r"^\[(\d+) MiB\] gets uniform, 4 conns: hit ratio$", 0.01, "%")]


def cache_scale_chart(run, run_label):
    """cache-scale.svg: per DRAM budget, items held and the hit ratio under Zipf 0.99 and
    uniform keys, inpath beside memcached with extstore (cache-scale.json, `bench/cache.py
    --scale`)."""
    if "cache-scale" not in run:
        raise RunError(f"{run_label}: no cache-scale.json (bench/cache.py --scale)")
    path, obj = run["cache-scale"]
    panels = []
    for title, pattern, scale, unit in CACHE_SCALE:
        bars = {}
        for i, row in enumerate(obj["rows"]):
            m = re.match(pattern, str(row.get("measurement", "")))
            if not m:
                continue
            need(path, i, row, "inpath", is_number, "a number")
            need(path, i, row, "peer_value", is_number, "a number")
            bars[int(m.group(1))] = (row["inpath"] / scale, row["peer_value"] / scale)
        if not bars:
            raise RunError(f"{path}: no rows for {title!r}")
        panels.append((title, unit, sorted(bars.items())))
    width, pw, ph, top = 760, 230, 190, 70
    body = []
    for p, (title, unit, bars) in enumerate(panels):
        x0, y0 = 20 + p * (pw + 20), top
        vmax = max(max(a, b) for _, (a, b) in bars) or 1.0
        body.append(text(x0, y0 - 8, f"{title} ({unit})", size=12, weight="bold"))
        slot = pw / len(bars)
        for j, (mib, (ours, peer)) in enumerate(bars):
            bw = slot * 0.32
            for k, (v, fill, who) in enumerate(((ours, "#1f77b4", "inpath"), (peer, "#ff7f0e", "memcached"))):
                h = ph * v / vmax
                x = x0 + j * slot + slot * 0.14 + k * (bw + 4)
                body.append(rect(x, y0 + ph - h, bw, h, fill, title=f"{who} {mib} MiB: {fmt(v)} {unit}"))
                body.append(text(x + bw / 2, y0 + ph - h - 3, fmt(v), size=9, anchor="middle"))
            label = f"{mib // 1024} GiB" if mib % 1024 == 0 else f"{mib} MiB"
            body.append(text(x0 + j * slot + slot / 2, y0 + ph + 14, label, size=11, anchor="middle"))
    ly = top + ph + 36
    body.append(rect(20, ly - 9, 10, 10, "#1f77b4"))
    body.append(text(34, ly, "inpath cache serve (same extstore command line)", size=11))
    body.append(rect(330, ly - 9, 10, 10, "#ff7f0e"))
    body.append(text(344, ly, str(obj["setup"].get("peer", "memcached")), size=11))
    items = obj["setup"].get("items")
    extra = f"{items:,} items set" if isinstance(items, int) else None
    return svg(width, ly + 16, "Cache at scale: items held and hit ratio by DRAM budget",
               subtitle([(path, obj)], run_label, extra), body)


def newest_run():
    if not os.path.isdir(RUNS):
        raise RunError(f"{RUNS}: no run directory (run a benchmark first, or name RUN_DIR)")
    dirs = [d for d in sorted(os.listdir(RUNS)) if os.path.isdir(os.path.join(RUNS, d))]
    if not dirs:
        raise RunError(f"{RUNS}: no run directory (run a benchmark first, or name RUN_DIR)")
    # Named <YYYY-MM-DD>-<cpu>: the latest day first, then the most recently written.
    return os.path.join(RUNS, max(dirs, key=lambda d: (d[:10], os.path.getmtime(os.path.join(RUNS, d)), d)))


def label_of(run_dir):
    """The run directory as the charts name it: relative to the repository where it lies in it
    (so that the output does not depend on the working directory), else its own name."""
    full = os.path.abspath(run_dir)
    rel = os.path.relpath(full, ROOT)
    return rel if not rel.startswith("..") else os.path.basename(full.rstrip(os.sep))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", nargs="?", help="a bench/runs/<date>-<cpu> directory (default: the newest)")
    parser.add_argument("-o", "--out", default=os.path.join(ROOT, "docs", "img"), help="where the SVGs go (docs/img)")
    parser.add_argument("--charts", default=",".join(DEFAULT_CHARTS),
                        help="which charts, comma-separated: " + ",".join(CHARTS) + " (default: "
                        + ",".join(DEFAULT_CHARTS) + ")")
    parser.add_argument("--threads", type=int, help="the thread count of tpch.svg (default: the largest in the run)")
    args = parser.parse_args(argv)
    charts = [c.strip() for c in args.charts.split(",") if c.strip()]
    for c in charts:
        if c not in CHARTS:
            parser.error(f"--charts: unknown chart {c!r} (choose from {', '.join(CHARTS)})")
    try:
        run_dir = args.run_dir or newest_run()
        run = load_run(run_dir)
        run_label = label_of(run_dir)
        out = {}
        if "throughput" in charts:
            out["throughput.svg"] = throughput_chart(run, run_label)
        if "hll" in charts:
            out["hll-error.svg"] = hll_chart(run, run_label)
        if "tpch" in charts:
            out["tpch.svg"] = tpch_chart(run, run_label, args.threads)
        if "scale" in charts:
            # Drawn from a run directory that has a sweep; named alone (--charts scale), required.
            if "query-scale" in run or args.charts == "scale":
                out["tpch-scale.svg"] = scale_chart(run, run_label)
            else:
                note(f"tpch-scale.svg not drawn: {run_label} has no query-scale.json")
        if "cache-scale" in charts:
            out["cache-scale.svg"] = cache_scale_chart(run, run_label)
    except RunError as e:
        sys.exit(f"plot.py: {e}")
    os.makedirs(args.out, exist_ok=True)
    for name, content in out.items():
        path = os.path.join(args.out, name)
        # All or nothing: a chart is written beside its place and renamed over it, so an
        # interrupted run never leaves a half-written SVG in docs/img.
        partial = f"{path}.tmp{os.getpid()}"
        try:
            with open(partial, "w", encoding="utf-8", newline="\n") as f:
                f.write(content)
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
        print(f"plot.py: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

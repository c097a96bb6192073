"""`inpath store bfs` against scipy.sparse.csgraph on seeded random graphs, and the page chase
against the order its pages were linked in.

The graph is made here from a Python edge list (self loops, duplicate edges, isolated vertices,
several components), put into a store with `inpath store put-graph --edges`, searched with
`inpath store bfs --json --arrays`, and compared with scipy built from the same edge list:
`breadth_first_order(directed=True)` for the visit order and the predecessors,
`shortest_path(unweighted=True)` for the levels.

The binary is `$INPATH_BIN`, else `$CARGO_TARGET_DIR/release/inpath`, else
`target/release/inpath` (scripts/test.sh builds it).
"""

import json
import os
import random
import subprocess

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order, shortest_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def inpath_bin():
    if os.environ.get("INPATH_BIN"):
        return os.environ["INPATH_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "inpath")


def run(*args):
    result = subprocess.run([inpath_bin(), *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"inpath {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def random_graph(n, m, seed):
    """Edges among the first 90% of the vertices (the rest are isolated), with self loops and
    duplicates; a second small component is planted at the end of the used range."""
    rng = random.Random(seed)
    used = max(1, n - n // 10)
    edges = [(rng.randrange(used), rng.randrange(used)) for _ in range(m)]
    edges += [(v, v) for v in rng.sample(range(used), min(used, m // 50))]
    edges += edges[: m // 50]
    return edges


def scipy_graph(n, edges, undirected):
    rows = [u for u, _ in edges]
    cols = [v for _, v in edges]
    if undirected:
        rows, cols = rows + [v for u, v in edges if u != v], cols + [u for u, v in edges if u != v]
    g = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    g.sum_duplicates()  # canonical: sorted indices, one entry per (row, column)
    return g


def out_degrees(n, edges, undirected):
    deg = np.zeros(n, dtype=np.int64)
    for u, v in edges:
        deg[u] += 1
        if undirected and u != v:
            deg[v] += 1
    return deg


CASES = [
    # (vertices, edges, undirected, seed)
    (2_000, 6_000, False, 1),
    (5_000, 30_000, True, 2),
    (3_000, 2_500, False, 3),  # sparse: many components
    (20_000, 120_000, False, 4),
]


@pytest.mark.parametrize("n,m,undirected,seed", CASES)
def test_bfs_equals_scipy(tmp_path, n, m, undirected, seed):
    edges = random_graph(n, m, seed)
    path = tmp_path / "edges.txt"
    path.write_text("# u v\n" + "".join(f"{u} {v}\n" for u, v in edges))
    store = str(tmp_path / "S")
    args = ["store", "put-graph", store, "g", "--edges", str(path), "--vertices", str(n),
            "--page-size", "1KiB", "--json"]
    if undirected:
        args.append("--undirected")
    put = json.loads(run(*args))
    assert put["vertices"] == n
    g = scipy_graph(n, edges, undirected)
    deg = out_degrees(n, edges, undirected)
    rng = random.Random(seed)
    sources = [0, n - 1] + [rng.randrange(n) for _ in range(3)]
    for source in sources:
        order, preds = breadth_first_order(g, source, directed=True, return_predecessors=True)
        dist = shortest_path(g, method="D", directed=True, unweighted=True, indices=source)
        want_levels = np.where(np.isinf(dist), -1, dist).astype(np.int64)
        want_preds = np.where(preds < 0, -1, preds)
        for threads in ("1", "2"):
            got = json.loads(run("store", "bfs", store, "1", "--source", str(source),
                                 "--threads", threads, "--json", "--arrays"))
            what = f"source {source} threads {threads}"
            assert got["order"] == order.tolist(), what
            assert got["predecessors"] == want_preds.tolist(), what
            assert got["levels"] == want_levels.tolist(), what
            assert got["reached"] == len(order), what
            assert got["edges_traversed"] == int(deg[order].sum()), what
            assert sum(got["level_sizes"]) == len(order), what
        if undirected:
            # scipy's own undirected search over the edges as given reaches the same levels.
            raw = csr_matrix((np.ones(len(edges)), ([u for u, _ in edges], [v for _, v in edges])),
                             shape=(n, n))
            node_list = breadth_first_order(raw, source, directed=False, return_predecessors=False)
            assert sorted(node_list.tolist()) == sorted(order.tolist())


def test_chase_visits_every_page_once_and_matches_pread(tmp_path):
    store = str(tmp_path / "S")
    run("store", "put-chase", store, "c", "--pages", "500", "--page-size", "4KiB", "--seed", "5")
    got = json.loads(run("store", "chase", store, "1", "--json"))
    assert got["stop"] == "end" and got["hops"] == 500
    assert got["sequence"][0] == 0 and sorted(got["sequence"]) == list(range(500))
    # Python follows the same chain with os.pread on the data file (raw pages back to back).
    data = os.path.join(store, "pages", "1-1.pages")
    fd = os.open(data, os.O_RDONLY)
    try:
        page, seen = 0, []
        while True:
            header = os.pread(fd, 40, page * 4096)
            assert header[:8] == b"INPCHASE"
            assert int.from_bytes(header[16:24], "little") == page
            seen.append(page)
            nxt = int.from_bytes(header[24:32], "little")
            if nxt == 2**64 - 1:
                break
            page = nxt
    finally:
        os.close(fd)
    assert seen == got["sequence"]
    raw = json.loads(run("store", "chase", store, "1", "--json", "--raw"))
    assert raw["sequence"] == got["sequence"]

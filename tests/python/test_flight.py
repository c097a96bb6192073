"""`inpath query serve`: the Arrow Flight SQL server, driven by clients nobody on the team wrote
(ADBC's Flight SQL driver and pyarrow.flight), checked against the engine in process.

TPC-H at SF 0.1, the 22 queries through both clients with answers equal to inpath.query.sql's;
the catalog; a bad statement's message; statements that write refused; a client killed
mid-stream stops its statement and frees its memory; the statement limit; page-range splits;
TLS, tokens and the listener policy."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import inpath
import inpath.query

from conftest import ROOT, run_cli, stop_server

pa = pytest.importorskip("pyarrow")
flight = pytest.importorskip("pyarrow.flight")
flight_sql = pytest.importorskip("adbc_driver_flightsql.dbapi")
adbc_flightsql = pytest.importorskip("adbc_driver_flightsql")

QUERIES = os.path.join(ROOT, "crates/inpath-query/tpch/queries")


def start(args):
    """Starts `inpath query serve ...`; returns (process, uri) from its first line."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.match(r"listening on (grpc(?:\+tls)?://[\d.]+:\d+)", line)
    if not m:
        proc.kill()
        err = proc.stderr.read()
        proc.wait()
        raise RuntimeError(f"query serve did not start: {line!r} {err}")
    return proc, m.group(1)


stop = stop_server


@pytest.fixture(scope="module")
def tables(inpath_bin, tmp_path_factory):
    base = tmp_path_factory.mktemp("flight")
    run_cli(inpath_bin, "query", "gen", "--sf", "0.1", str(base / "tpch"), "--quiet")
    return base / "tpch"


@pytest.fixture(scope="module")
def server(inpath_bin, tables):
    proc, uri = start([inpath_bin, "query", "serve", str(tables), "--listen", "127.0.0.1:0",
                       "--offload", "--threads", "2"])
    yield proc, uri
    # SIGTERM stops it cleanly, after the statements in flight.
    assert stop(proc) == 0


def query_text(n):
    with open(os.path.join(QUERIES, f"q{n:02}.sql")) as f:
        return f.read()


def rows_of(table):
    """Rows as tuples, sorted (ties of an ORDER BY may come in any order)."""
    cols = [c.to_pylist() for c in table.columns]
    rows = list(zip(*cols)) if cols else []
    return sorted(rows, key=lambda r: tuple((v is None, str(v)) for v in r))


def assert_same(got, expected, what):
    assert got.column_names == expected.column_names, what
    assert got.num_rows == expected.num_rows, what
    for a, b in zip(rows_of(got), rows_of(expected)):
        for x, y in zip(a, b):
            if isinstance(y, float):
                assert x == pytest.approx(y, rel=1e-9, abs=1e-9), what
            else:
                assert x == y, what


@pytest.fixture(scope="module")
def expected(tables):
    """Each query's answer from the engine in process, without offload."""
    return {n: inpath.query.sql(tables, query_text(n), threads=2) for n in range(1, 23)}


def test_adbc_runs_the_22_queries_with_the_engines_answers(server, expected, tables):
    _, uri = server
    with flight_sql.connect(uri) as conn:
        cur = conn.cursor()
        for n in range(1, 23):
            cur.execute(query_text(n))
            got = cur.fetch_arrow_table()
            assert_same(got, expected[n], f"Q{n} over ADBC")
        # A prepared statement (ADBC prepares, then executes).
        cur.adbc_prepare("SELECT count(*) AS n FROM lineitem")
        cur.execute("SELECT count(*) AS n FROM lineitem")
        count = inpath.query.sql(tables, "SELECT count(*) AS n FROM lineitem")["n"][0].as_py()
        assert cur.fetchone()[0] == count


def pb_varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def pb_bytes(field, data):
    return pb_varint(field << 3 | 2) + pb_varint(len(data)) + data


def statement_command(sql):
    """Flight SQL's CommandStatementQuery in a protobuf Any, encoded by hand (pyarrow.flight
    knows Flight, not Flight SQL)."""
    inner = pb_bytes(1, sql.encode())
    url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return pb_bytes(1, url) + pb_bytes(2, inner)


def flight_query(client, sql, options=None):
    options = options or flight.FlightCallOptions()
    info = client.get_flight_info(flight.FlightDescriptor.for_command(statement_command(sql)),
                                  options)
    parts = [client.do_get(e.ticket, options).read_all() for e in info.endpoints]
    return pa.concat_tables(parts) if parts else None


def test_pyarrow_flight_runs_the_22_queries_with_the_engines_answers(server, expected):
    _, uri = server
    client = flight.FlightClient(uri)
    for n in range(1, 23):
        got = flight_query(client, query_text(n))
        assert_same(got, expected[n], f"Q{n} over pyarrow.flight")
    client.close()


def test_catalog_lists_tables_with_their_schemas(server, tables):
    _, uri = server
    with flight_sql.connect(uri) as conn:
        schema = conn.adbc_get_table_schema("lineitem")
        local = inpath.query.sql(tables, "SELECT * FROM lineitem LIMIT 0")
        assert schema.names == local.column_names
        assert schema.field("l_shipdate").type == pa.date32()
        # Dictionary-coded strings are sent as plain strings.
        assert schema.field("l_shipmode").type == pa.string()
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        names = {t["table_name"] for c in objects for s in c["catalog_db_schemas"]
                 for t in s["db_schema_tables"]}
        assert names == {"customer", "lineitem", "nation", "orders", "part", "partsupp",
                         "region", "supplier"}


def test_a_bad_statement_returns_its_message(server):
    _, uri = server
    with flight_sql.connect(uri) as conn:
        cur = conn.cursor()
        with pytest.raises(Exception) as e:
            cur.execute("SELECT no_such_column FROM lineitem")
            cur.fetchall()
        assert "no_such_column" in str(e.value)
        with pytest.raises(Exception) as e:
            cur.execute("SELECT * FROM no_such_table")
            cur.fetchall()
        assert "no_such_table" in str(e.value)
        # The connection still works.
        cur.execute("SELECT count(*) FROM region")
        assert cur.fetchone()[0] == 5


def test_statements_that_write_are_refused(server, tmp_path):
    _, uri = server
    target = tmp_path / "leak.parquet"
    client = flight.FlightClient(uri)
    for sql in [f"COPY (SELECT 1) TO '{target}' STORED AS PARQUET",
                "CREATE TABLE t AS SELECT 1",
                "SET datafusion.execution.batch_size = 1"]:
        with pytest.raises(pa.ArrowException) as e:
            flight_query(client, sql)
        assert "not supported" in str(e.value) or "refused" in str(e.value), sql
    assert not target.exists()
    client.close()


def action(client, kind, body, options=None):
    results = list(client.do_action(flight.Action(kind, json.dumps(body).encode()),
                                    options or flight.FlightCallOptions()))
    return json.loads(results[0].body.to_pybytes())


def test_splits_follow_page_ranges_and_hold_every_row_once(server, tables):
    _, uri = server
    client = flight.FlightClient(uri)
    s = action(client, "inpath.splits", {"table": "lineitem", "parts": 4})
    assert s["column"] == "l_orderkey" and s["type"] == "int"
    assert len(s["splits"]) == 4
    assert s["splits"][0]["lo"] is None and s["splits"][-1]["hi"] is None
    assert sum(p["pages"] for p in s["splits"]) == s["pages"]
    total = 0
    for p in s["splits"]:
        conds = []
        if p["lo"] is not None:
            conds.append(f"l_orderkey >= {p['lo']}")
        if p["hi"] is not None:
            conds.append(f"l_orderkey < {p['hi']}")
        n = flight_query(client, "SELECT count(*) AS n FROM lineitem WHERE "
                         + " AND ".join(conds))["n"][0].as_py()
        # A key spanning a page boundary belongs to the later range: within one order's lines.
        assert abs(n - p["rows"]) <= 7
        total += n
    assert total == s["rows"]
    status = action(client, "inpath.status", {})
    assert status["rows"] >= 4 and status["bytes"] > 0
    # One page or no ordered column: one range, no column.
    one = action(client, "inpath.splits", {"table": "region", "parts": 4})
    assert one["column"] is None and len(one["splits"]) == 1
    with pytest.raises(pa.ArrowException) as e:
        action(client, "inpath.splits", {"table": "nope", "parts": 2})
    assert "nope" in str(e.value) and "lineitem" in str(e.value)
    with pytest.raises(pa.ArrowException) as e:
        action(client, "inpath.splits", {"table": "lineitem", "parts": 0})
    assert "1 to 4096" in str(e.value)
    client.close()


def rss_anon_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def wait_status(client, test, what, seconds=15):
    deadline = time.time() + seconds
    while time.time() < deadline:
        s = action(client, "inpath.status", {})
        if test(s):
            return s
        time.sleep(0.1)
    raise AssertionError(f"{what}: last status {s}")


def kill_a_reader_mid_stream(client, uri):
    """A client in a process of its own reads one batch of a large join, then is killed;
    returns the server's status once the statement has stopped."""
    before = action(client, "inpath.status", {})
    reader_script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import pyarrow.flight as flight
        from test_flight import statement_command
        c = flight.FlightClient({uri!r})
        d = flight.FlightDescriptor.for_command(statement_command(
            "SELECT l.*, o.* FROM lineitem l JOIN orders o ON l_orderkey = o_orderkey"))
        info = c.get_flight_info(d)
        r = c.do_get(info.endpoints[0].ticket)
        r.read_chunk()
        print("reading", flush=True)
        time.sleep(60)
    """)
    child = subprocess.Popen([sys.executable, "-c", reader_script], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "reading"
        wait_status(client, lambda s: s["running"] == 1, "the statement runs")
        child.send_signal(signal.SIGKILL)
        child.wait()
        s = wait_status(client, lambda s: s["running"] == 0, "the statement stops")
        assert s["abandoned"] == before["abandoned"] + 1
        return s
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()


def test_a_client_killed_mid_stream_stops_its_statement(server):
    proc, uri = server
    client = flight.FlightClient(uri)
    # The memory a stopped statement held is freed: killing three readers in turn leaves the
    # server's anonymous memory where the first left it (the allocator keeps freed pages for
    # reuse, so the first kill's level is the baseline, not the level before it).
    kill_a_reader_mid_stream(client, uri)
    first = rss_anon_kib(proc.pid)
    levels = []
    for _ in range(2):
        kill_a_reader_mid_stream(client, uri)
        levels.append(rss_anon_kib(proc.pid))
    assert levels[-1] < first + 64 * 1024, (first, levels)
    client.close()


def test_statements_beyond_the_limit_are_refused_after_the_wait(inpath_bin, tables):
    proc, uri = start([inpath_bin, "query", "serve", str(tables), "--listen", "127.0.0.1:0",
                       "--max-statements", "1", "--queue-wait", "0", "--threads", "1"])
    try:
        client = flight.FlightClient(uri)
        info = client.get_flight_info(flight.FlightDescriptor.for_command(
            statement_command("SELECT * FROM lineitem")))
        first = client.do_get(info.endpoints[0].ticket)
        first.read_chunk()  # the statement holds the one slot while it is not read
        with pytest.raises(pa.ArrowException) as e:
            flight_query(client, "SELECT 1")
        assert "max-statements" in str(e.value)
        first.cancel()
        client.close()
    finally:
        stop(proc)


@pytest.fixture
def pki(inpath_bin, tmp_path):
    subprocess.run([inpath_bin, "tls", "init", str(tmp_path / "tls")], check=True,
                   capture_output=True)
    tokens = tmp_path / "tokens"
    token = tmp_path / "bi.token"
    subprocess.run([inpath_bin, "tls", "token", "--tokens", str(tokens), "--name", "bi",
                    "--role", "read", "-o", str(token)], check=True, capture_output=True)
    return tmp_path / "tls", tokens, token.read_text().split()[0]


def test_tls_and_a_token(inpath_bin, tables, pki):
    tls, tokens, token = pki
    proc, uri = start([inpath_bin, "query", "serve", str(tables), "--listen", "127.0.0.1:0",
                       "--tls-cert", str(tls / "server.pem"), "--tls-key", str(tls / "server.key"),
                       "--tokens", str(tokens), "--threads", "1"])
    try:
        assert uri.startswith("grpc+tls://")
        ca = (tls / "ca.pem").read_text()
        # ADBC with the token as a bearer header.
        with flight_sql.connect(uri, db_kwargs={
                adbc_flightsql.DatabaseOptions.TLS_ROOT_CERTS.value: ca,
                adbc_flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {token}"}) as conn:
            cur = conn.cursor()
            cur.execute("SELECT count(*) FROM nation")
            assert cur.fetchone()[0] == 25
        # ADBC with a user name and the token as the password (a Flight handshake).
        with flight_sql.connect(uri, db_kwargs={
                adbc_flightsql.DatabaseOptions.TLS_ROOT_CERTS.value: ca,
                "username": "bi", "password": token}) as conn:
            cur = conn.cursor()
            cur.execute("SELECT count(*) FROM region")
            assert cur.fetchone()[0] == 5
        # pyarrow.flight: no token, a wrong token, then the right one.
        client = flight.FlightClient(uri, tls_root_certs=ca.encode())
        with pytest.raises(flight.FlightUnauthenticatedError) as e:
            flight_query(client, "SELECT 1")
        assert "token" in str(e.value)
        bad = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer inpath_wrong")])
        with pytest.raises(flight.FlightUnauthenticatedError):
            flight_query(client, "SELECT 1", bad)
        good = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])
        assert flight_query(client, "SELECT 1 AS one", good)["one"][0].as_py() == 1
        client.close()
        # A client that does not trust the server's CA fails the handshake.
        stranger = flight.FlightClient(uri)
        with pytest.raises(flight.FlightError):
            flight_query(stranger, "SELECT 1", good)
        stranger.close()
    finally:
        stop(proc)


def test_an_open_port_beyond_loopback_is_refused(inpath_bin, tables):
    r = subprocess.run([inpath_bin, "query", "serve", str(tables), "--listen", "0.0.0.0:0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "--insecure-no-auth" in r.stderr


def test_split_divides_every_table_by_pages(inpath_bin, tables, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    out = subprocess.run([inpath_bin, "query", "split", str(tables), "--out", f"{a},{b}",
                          "--json"], capture_output=True, text=True, check=True)
    report = {t["table"]: t for t in json.loads(out.stdout)}
    assert set(report) == {"customer", "lineitem", "nation", "orders", "part", "partsupp",
                           "region", "supplier"}
    for name, t in report.items():
        assert sum(p["rows"] for p in t["parts"]) == t["rows"], name
    # Together the parts answer as the whole.
    whole = inpath.query.sql(tables, query_text(6))
    got = [inpath.query.sql(d, "SELECT sum(l_extendedprice * l_discount) AS revenue FROM "
                            "lineitem WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < "
                            "DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND "
                            "l_quantity < 24")["revenue"][0].as_py() for d in (a, b)]
    assert float(sum(got)) == pytest.approx(float(whole["revenue"][0].as_py()), rel=1e-12)
    # The one-page tables are whole in the first part, empty in the second.
    assert inpath.query.sql(b, "SELECT count(*) AS n FROM nation")["n"][0].as_py() == 0
    # Never over a table.
    r = subprocess.run([inpath_bin, "query", "split", str(tables), "--out", f"{a},{tmp_path / 'c'}"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "not an empty directory" in r.stderr

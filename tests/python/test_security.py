"""TLS and authentication through standard clients (docs/SECURITY.md): pymemcache with an
`ssl` context against `cache serve -Z` (with and without a client certificate, and the
refusals), and the Python `Store` against `store serve` with TLS and tokens. Loopback only;
the certificates are made by `inpath tls init` in a temporary directory."""

import os
import re
import ssl
import subprocess

import pytest

from conftest import stop_server

pymemcache = pytest.importorskip("pymemcache")
from pymemcache.client.base import Client  # noqa: E402


@pytest.fixture
def pki(inpath_bin, tmp_path):
    subprocess.run([inpath_bin, "tls", "init", str(tmp_path / "tls")], check=True,
                   capture_output=True)
    return tmp_path / "tls"


def start(args, pattern):
    """Starts a server; returns (process, port) from its start-up line."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(50):
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(pattern, line)
        if m:
            return proc, int(m.group(1))
    proc.kill()
    proc.wait()
    raise RuntimeError("server did not start")


def stop(proc):
    stop_server(proc, timeout=15)


def context(pki, client_cert=True):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if client_cert:
        ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    return ctx


@pytest.mark.parametrize("verify_mode", [0, 2])
def test_pymemcache_over_tls(inpath_bin, pki, tmp_path, verify_mode):
    options = (f"ssl_chain_cert={pki / 'server.pem'},ssl_key={pki / 'server.key'},"
               f"ssl_ca_cert={pki / 'ca.pem'},ssl_verify_mode={verify_mode}")
    proc, port = start([inpath_bin, "cache", "serve", "--listen", "127.0.0.1:0", "-Z", "-o",
                        options, "-t", "2", "--memory", "8MiB"],
                       r"listening on 127\.0\.0\.1:(\d+)")
    try:
        def client(**kw):
            return Client(("127.0.0.1", port), connect_timeout=5, timeout=10, **kw)

        c = client(tls_context=context(pki))
        assert c.set("k", b"v" * 1000, noreply=False)
        assert c.get("k") == b"v" * 1000
        assert c.get_many(["k", "missing"]) == {"k": b"v" * 1000}
        assert c.delete("k", noreply=False)
        stats = c.stats()
        assert int(stats[b"ssl_handshake_errors"]) == 0
        # A plain client on the TLS port gets no answer; the server keeps serving.
        plain = client()
        with pytest.raises(Exception):
            plain.get("k")
        plain.close()
        # A client that does not trust the server's CA refuses it.
        other = tmp_path / "other"
        subprocess.run([inpath_bin, "tls", "init", str(other)], check=True, capture_output=True)
        with pytest.raises(ssl.SSLError):
            client(tls_context=context(other, client_cert=False)).get("k")
        if verify_mode == 2:
            # No client certificate: refused in the handshake (TLS 1.3: at the first read).
            with pytest.raises((ssl.SSLError, ConnectionError, OSError,
                                pymemcache.exceptions.MemcacheUnexpectedCloseError)):
                client(tls_context=context(pki, client_cert=False)).get("k")
            # A certificate from another CA: refused too.
            with pytest.raises((ssl.SSLError, ConnectionError, OSError,
                                pymemcache.exceptions.MemcacheUnexpectedCloseError)):
                client(tls_context=context(other)).get("k")
        c2 = client(tls_context=context(pki))
        assert c2.set("still", b"serving", noreply=False)
        assert c2.get("still") == b"serving"
        assert int(c2.stats()[b"ssl_handshake_errors"]) >= 1
    finally:
        stop(proc)


def test_store_client_with_tls_and_tokens(inpath_bin, pki, tmp_path):
    inpath = pytest.importorskip("inpath.store")
    import inspect

    if "tls_ca" not in inspect.signature(inpath.Store.__init__).parameters:
        pytest.skip("the installed inpath package predates TLS (pip install ./python)")
    store = tmp_path / "S"
    data = tmp_path / "t.txt"
    data.write_bytes(b"one needle\ntwo\nthree needle\n")
    subprocess.run([inpath_bin, "store", "put", str(store), str(data)], check=True,
                   capture_output=True)
    tokens = tmp_path / "tokens"
    read = tmp_path / "read.token"
    subprocess.run([inpath_bin, "tls", "token", "--tokens", str(tokens), "--name", "r",
                    "--role", "read", "-o", str(read)], check=True, capture_output=True)
    proc, port = start([inpath_bin, "store", "serve", str(store), "--listen", "127.0.0.1:0",
                        "--tls-cert", str(pki / "server.pem"), "--tls-key",
                        str(pki / "server.key"), "--tokens", str(tokens)],
                       r"listening on 127\.0\.0\.1:(\d+)")
    try:
        addr = f"127.0.0.1:{port}"
        remote = inpath.Store(addr, tls_ca=str(pki / "ca.pem"), token_file=str(read))
        assert remote.grep(1, "needle", count=True)["lines"] == 2
        with pytest.raises(Exception, match="role write"):
            remote.rm(1)
        with pytest.raises(Exception, match="not valid"):
            inpath.Store(addr, tls_ca=str(pki / "ca.pem"), token="inpath_0").ls()
        with pytest.raises(Exception):
            inpath.Store(addr).ls()
        assert [e["name"] for e in remote.ls()] == ["t.txt"]
    finally:
        stop(proc)

"""The live pages of `wire sink --http`, `cache serve --http` and `store serve --http` in a real
browser: headless Chromium (Debian's package, installed by scripts/test.sh) driven over the
DevTools protocol. For each server the test loads the page the server itself serves at `/`,
waits for it to draw, puts load on the server, waits for the page's numbers to change, stops
the load, and then checks that every number on the page equals the server's JSON endpoint's
value at that moment. Any console error or uncaught exception fails the test.

With INPATH_SCREENSHOTS=DIR each page is also saved as DIR/live-<service>.png (how the images in
docs/img/ are made).
"""

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import run_cli

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("INPATH_NO_BROWSER") == "1":
        pytest.skip("INPATH_NO_BROWSER=1: no browser on this machine")
    pytest.fail("no Chromium found: scripts/test.sh installs Debian's chromium package")


def wait_for(what, check, timeout=30.0, step=0.1):
    """Polls `check()` until it returns something truthy; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


class Browser:
    """One headless Chromium with one page, over the DevTools protocol."""

    def __init__(self):
        import websocket

        self.profile = tempfile.mkdtemp(prefix="inpath-chromium-")
        args = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking",
                "--remote-debugging-port=0", "--remote-allow-origins=*",
                f"--user-data-dir={self.profile}", "--window-size=1200,900", "about:blank"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = os.path.join(self.profile, "DevToolsActivePort")

        def port():
            if self.proc.poll() is not None:
                pytest.fail(f"chromium exited {self.proc.returncode}: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                with open(port_file) as f:
                    return int(f.readline())
            except (OSError, ValueError):
                return None

        devtools = wait_for("chromium's DevTools port", port, timeout=60)

        def page_url():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{devtools}/json/list", timeout=5) as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
            except OSError:
                return None
            return pages[0]["webSocketDebuggerUrl"] if pages else None

        self.ws = websocket.create_connection(wait_for("a page target", page_url), timeout=30)
        self.next_id = 0
        self.errors = []
        for method in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(method)

    def call(self, method, **params):
        self.next_id += 1
        me = self.next_id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == me:
                if "error" in msg:
                    pytest.fail(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.event(msg)

    def event(self, msg):
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(f"console.{params['type']}: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            self.errors.append(f"exception: {params.get('exceptionDetails')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url')})")

    def eval(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            pytest.fail(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url):
        self.call("Page.navigate", url=url)
        wait_for(f"{url} to load", lambda: self.eval("document.readyState") == "complete")

    def reset(self):
        """Leaves the page (so it stops polling a server about to stop) and forgets the errors
        seen so far."""
        self.open("about:blank")
        self.errors.clear()

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    b = Browser()
    try:
        yield b
    finally:
        b.close()


def get_json(url):
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("application/json")
        return json.load(r)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server started from the binary, stopped (and waited for) at the end."""

    def __init__(self, args, ready_url):
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        def up():
            if self.proc.poll() is not None:
                pytest.fail(f"{args[1:3]} exited {self.proc.returncode}: {self.proc.stderr.read().decode()}")
            try:
                with urllib.request.urlopen(ready_url, timeout=2):
                    return True
            except OSError:
                return False

        wait_for(f"{ready_url}", up)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def page_numbers(browser):
    """Every number the page shows: (endpoint, JSON path, value, text)."""
    return browser.eval("""[...document.querySelectorAll('[data-field]')].map(e =>
        [e.dataset.endpoint, e.dataset.field, JSON.parse(e.dataset.value), e.textContent])""")


def at(obj, path):
    for key in path.split("."):
        obj = obj[int(key)] if isinstance(obj, list) else obj[key]
    return obj


def updates(browser):
    return browser.eval("window.inpathLive ? window.inpathLive.updates : 0")


def settle(browser, base):
    """Waits for two redraws after the load stopped, so the page holds the final counters."""
    start = updates(browser)
    wait_for("two redraws of the page", lambda: updates(browser) >= start + 2)


def check_page(browser, base, service, moving=()):
    """The page names the service, shows numbers, and each equals the endpoint's value now
    (`moving` fields, which change with time alone, within 20 %)."""
    assert browser.eval("window.inpathLive.service") == service
    assert browser.eval("document.title") == f"{service} live"
    numbers = page_numbers(browser)
    assert len(numbers) >= 5, numbers
    answers = {}
    for endpoint, path, value, text in numbers:
        if endpoint not in answers:
            answers[endpoint] = get_json(base + endpoint)
        want = at(answers[endpoint], path)
        assert text.strip() and text != "–" or want is None, (path, text)
        if path in moving and isinstance(want, float):
            assert value == pytest.approx(want, rel=0.2), (path, value, want)
        elif isinstance(want, float):
            assert value == pytest.approx(want, rel=1e-12), (path, value, want)
        else:
            assert value == want, (path, value, want)
    return {path: value for _, path, value, _ in numbers}


def finish(browser, service):
    shots = os.environ.get("INPATH_SCREENSHOTS")
    if shots:
        os.makedirs(shots, exist_ok=True)
        browser.screenshot(os.path.join(shots, f"live-{service.split()[-1]}.png"))
    assert not browser.errors, browser.errors
    assert browser.eval("window.inpathLive.errors") == 0


def test_wire_sink_page(browser, inpath_bin):
    port, http = free_port(), free_port()
    base = f"http://127.0.0.1:{http}"
    server = Server([inpath_bin, "wire", "sink", "--listen", f"127.0.0.1:{port}", "--http",
                     f"127.0.0.1:{http}", "--tap", "sketch:format=u32,top=5", "--tap",
                     "corr:type=u32,streams=4", "-q"], base + "/health")
    try:
        browser.reset()
        browser.open(base + "/?interval=200")
        wait_for("the first draw", lambda: updates(browser) >= 1)
        before = browser.eval("document.querySelector('[data-field=\"totals.bytes_read_c2s\"]').dataset.value")
        assert json.loads(before) == 0
        import numpy as np

        # 50,000 distinct items and two heavy ones: 7 (1 in 8 items) and 11 (1 in 16).
        items = np.random.default_rng(5).integers(100, 50_100, 1 << 20, dtype=np.uint32)
        items[::8] = 7
        items[1::16] = 11
        data = items.tobytes()
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(data)
        wait_for("the page's byte count to change", lambda: json.loads(browser.eval(
            "(document.querySelector('[data-field=\"totals.bytes_read_c2s\"]')||{dataset:{value:'0'}}).dataset.value"))
            == 3 * len(data))
        wait_for("the sketch tap's card", lambda: browser.eval(
            "!!document.querySelector('[data-field=\"combined.c2s.sketch.cardinality\"]')"))
        settle(browser, base)
        shown = check_page(browser, base, "inpath wire")
        assert shown["combined.c2s.sketch.count"] == 3 * (1 << 20)
        assert shown["combined.c2s.sketch.cardinality"] == pytest.approx(50_002, rel=0.03)
        top = get_json(base + "/combined")["combined"]["c2s"]["sketch"]["top"]
        assert [t["item"] for t in top[:2]] == [7, 11], top
        assert top[0]["estimate"] >= 3 * (1 << 17) and top[1]["estimate"] >= 3 * (1 << 16), top
        assert shown["combined.c2s.sketch.top.0.estimate"] == top[0]["estimate"]
        cells = browser.eval("[...document.querySelectorAll('table code')].map(e => e.textContent)")
        assert cells[:2] == ["7", "11"], cells
        assert shown["combined.c2s.corr.rows"] == 3 * (1 << 20) // 4
        finish(browser, "inpath wire")
    finally:
        browser.reset()
        server.stop()


def test_cache_page(browser, inpath_bin, tmp_path):
    from pymemcache.client.base import Client

    port, http = free_port(), free_port()
    base = f"http://127.0.0.1:{http}"
    server = Server([inpath_bin, "cache", "serve", "--listen", f"127.0.0.1:{port}", "--http",
                     f"127.0.0.1:{http}", "--flash", str(tmp_path / "cache.flash"),
                     "--flash-size", "64MiB", "--memory", "32MiB", "-t", "1"], base + "/health")
    try:
        browser.reset()
        browser.open(base + "/?interval=200")
        wait_for("the first draw", lambda: updates(browser) >= 1)
        client = Client(("127.0.0.1", port), connect_timeout=5, timeout=10)
        for i in range(2000):
            client.set(f"key{i}", b"v" * 100)
        for i in range(3000):
            client.get(f"key{i}")
        client.close()
        wait_for("the page's gets to change", lambda: browser.eval(
            "(document.querySelector('[data-field=\"cmd_get\"]')||{dataset:{value:'0'}}).dataset.value") == "3000")
        settle(browser, base)
        shown = check_page(browser, base, "inpath cache")
        assert (shown["get_hits"], shown["get_misses"]) == (2000, 1000)
        assert shown["hit_ratio"] == pytest.approx(2 / 3)
        assert shown["curr_items"] == 2000
        finish(browser, "inpath cache")
    finally:
        browser.reset()
        server.stop()


def test_store_page(browser, inpath_bin, tmp_path):
    from conftest import text

    store = tmp_path / "store"
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(text(2_000_000))
    run_cli(inpath_bin, "store", "put", str(store), str(corpus))
    port, http = free_port(), free_port()
    base = f"http://127.0.0.1:{http}"
    server = Server([inpath_bin, "store", "serve", str(store), "--listen", f"127.0.0.1:{port}",
                     "--http", f"127.0.0.1:{http}"], base + "/health")
    try:
        browser.reset()
        browser.open(base + "/?interval=200")
        wait_for("the first draw", lambda: updates(browser) >= 1)
        for _ in range(3):
            run_cli(inpath_bin, "store", "grep", "--remote", f"127.0.0.1:{port}", "corpus.txt", "needle", "-c")
        wait_for("the page's requests to change", lambda: browser.eval(
            "(document.querySelector('[data-field=\"requests\"]')||{dataset:{value:'0'}}).dataset.value") == "3")
        settle(browser, base)
        shown = check_page(browser, base, "inpath store", moving=("cpu_seconds_per_gb",))
        assert shown["bytes_scanned"] == 3 * corpus.stat().st_size
        rows = browser.eval("document.querySelectorAll('table tr').length")
        assert rows == 1 + 3, "the latest-scans table lists the three greps"
        recent = get_json(base + "/stats")["recent"]
        assert [(r["op"], r["handle"], r["ok"]) for r in recent] == [("grep", "corpus.txt", True)] * 3
        finish(browser, "inpath store")
    finally:
        browser.reset()
        server.stop()

"""TLS cost benchmark (issue 57): the same servers with and without TLS, one run.

    python3 bench/tls.py [--mib 1024] [--reps 5] [--gets 2000000] [--only store|cache]

store: a seeded text file (--mib MiB of lines, 1 in 10 with "needle") put into a store as raw
8 KiB pages; `inpath store serve` on loopback plain and open, and with TLS (`inpath tls init`'s
certificate, TLS 1.3) and a read token. Each row is the wall time of the whole client process,
median of --reps runs after a warm-up, page cache warm: `inpath store grep --remote ADDR 1
needle --count` (the server scans every byte, a count crosses the link: TLS costs the
handshake) and `inpath store read --remote ADDR 1` into /dev/null (every byte crosses the link:
TLS costs the encryption of each one). Throughput is the file's bytes over that time.

cache: `inpath cache serve` (DRAM only, -t 2) plain, and with memcached's -Z and ssl_chain_cert,
ssl_key; 10,000 keys of 32-byte values set first. Two client processes, one connection each
(Python, plain sockets or `ssl` ones), send `get` requests: one at a time (request and answer,
one TLS record each way per get), and pipelined in batches of 100. gets/s is the total over
the wall time; server CPU per get is the server process's user + system time (/proc) over the
gets. Client and server share the machine's cores: gets/s is the pair's, the CPU per get the
server's alone.

In the run file, "inpath" is the TLS figure and "peer" the plain one (ratio = plain time / TLS
time: below 1 means TLS is slower).
"""

import argparse
import multiprocessing
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

KEYS = 10_000
VALUE = b"v" * 32


def inpath_bin():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(common.ROOT, "target"))
    return os.path.join(target, "release", "inpath")





def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def text_file(path, mib):
    line_no = 0
    with open(path, "wb") as f:
        written = 0
        while written < mib << 20:
            lines = []
            for _ in range(10_000):
                word = b"needle" if line_no % 10 == 3 else b"hay"
                lines.append(b"record %09d stack %s value %d\n" % (line_no, word, (line_no * 7919) % 100_003))
                line_no += 1
            block = b"".join(lines)
            f.write(block)
            written += len(block)
    return os.path.getsize(path)


def timed(args, reps):
    def once():
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)

    median, _, _ = common.time_median(once, reps=reps, warmup=1)
    return median


def store_rows(report, tmp, pki, mib, reps):
    inpath = inpath_bin()
    data = os.path.join(tmp, "data.txt")
    size = text_file(data, mib)
    store = os.path.join(tmp, "store")
    subprocess.run([inpath, "store", "put", store, data], check=True, stdout=subprocess.DEVNULL)
    tokens = os.path.join(tmp, "tokens")
    token = os.path.join(tmp, "read.token")
    subprocess.run([inpath, "tls", "token", "--tokens", tokens, "--name", "bench", "--role", "read",
                    "-o", token], check=True, stdout=subprocess.DEVNULL)
    servers = {}
    for mode in ("plain", "tls"):
        port = common.free_port()
        extra = [] if mode == "plain" else [
            "--tls-cert", os.path.join(pki, "server.pem"), "--tls-key", os.path.join(pki, "server.key"),
            "--tls-min-version", "1.3", "--tokens", tokens]
        proc = subprocess.Popen([inpath, "store", "serve", store, "--listen", f"127.0.0.1:{port}", *extra],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        common.wait_port(port)
        client = [] if mode == "plain" else ["--tls-ca", os.path.join(pki, "ca.pem"), "--token-file", token]
        servers[mode] = (proc, f"127.0.0.1:{port}", client)
    try:
        for name, verb in (("store grep --count over --remote", ["grep", None, "1", "needle", "--count"]),
                           ("store read (whole handle) over --remote", ["read", None, "1"])):
            seconds = {}
            for mode, (_, addr, client) in servers.items():
                args = [inpath, "store", verb[0], "--remote", addr, *verb[2:], *client]
                seconds[mode] = timed(args, reps)
            report.add(name, size, seconds["tls"], "plain", seconds["plain"],
                       extra={"file_mib": mib, "tls": "1.3, token"})
    finally:
        for proc, _, _ in servers.values():
            stop(proc)


def connect(port, ca):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if ca:
        ctx = ssl.create_default_context(cafile=ca)
        s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
    return s


def answer_len(key):
    return len(b"VALUE %s 0 %d\r\n" % (key, len(VALUE))) + len(VALUE) + 2 + len(b"END\r\n")


def client_run(port, ca, gets, batch, seed, out):
    s = connect(port, ca)
    keys = [b"k%06d" % ((seed * 7919 + i * 104_729) % KEYS) for i in range(gets)]
    done = 0
    while done < gets:
        chunk = keys[done:done + batch]
        s.sendall(b"".join(b"get %s\r\n" % k for k in chunk))
        want = sum(answer_len(k) for k in chunk)
        got = 0
        while got < want:
            piece = s.recv(min(1 << 20, want - got))
            if not piece:
                raise RuntimeError("the server closed the connection")
            got += len(piece)
        done += len(chunk)
    s.close()
    out.put(done)


def cache_rows(report, pki, gets, clients):
    inpath = inpath_bin()
    ca = os.path.join(pki, "ca.pem")
    results = {}
    for mode in ("plain", "tls"):
        port = common.free_port()
        extra = [] if mode == "plain" else [
            "-Z", "-o", f"ssl_chain_cert={os.path.join(pki, 'server.pem')},ssl_key={os.path.join(pki, 'server.key')}"]
        proc = subprocess.Popen([inpath, "cache", "serve", "-l", "127.0.0.1", "-p", str(port), "-m", "64",
                                 "-t", "2", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        common.wait_port(port)
        try:
            s = connect(port, ca if mode == "tls" else None)
            for i in range(KEYS):
                s.sendall(b"set k%06d 0 0 %d noreply\r\n%s\r\n" % (i, len(VALUE), VALUE))
            s.sendall(b"get k000000\r\n")
            need = answer_len(b"k000000")
            got = b""
            while len(got) < need:
                got += s.recv(need)
            s.close()
            for batch, n in ((1, gets // 10), (100, gets)):
                out = multiprocessing.Queue()
                per = n // clients
                before = common.cpu_seconds(proc.pid)
                start = time.perf_counter()
                workers = [multiprocessing.Process(target=client_run,
                                                   args=(port, ca if mode == "tls" else None, per, batch, c, out))
                           for c in range(clients)]
                for w in workers:
                    w.start()
                total = sum(out.get(timeout=600) for _ in workers)
                for w in workers:
                    w.join()
                wall = time.perf_counter() - start
                cpu = common.cpu_seconds(proc.pid) - before
                results[(mode, batch)] = (total, wall, cpu)
        finally:
            stop(proc)
    for batch in (1, 100):
        name = "cache gets, one at a time" if batch == 1 else "cache gets, pipelined by 100"
        t_total, t_wall, t_cpu = results[("tls", batch)]
        p_total, p_wall, p_cpu = results[("plain", batch)]
        # The same count of gets on both sides; times scaled to it.
        report.add(name, t_total, t_wall, "plain", p_wall * t_total / p_total,
                   extra={"clients": clients, "batch": batch,
                          "server_cpu_us_per_get_tls": t_cpu / t_total * 1e6,
                          "server_cpu_us_per_get_plain": p_cpu / p_total * 1e6,
                          "tls": "1.3"},
                   unit=("k gets/s", 1e3))
        report.note(f"{name}: server CPU per get {t_cpu / t_total * 1e6:.2f} us with TLS, "
                    f"{p_cpu / p_total * 1e6:.2f} us plain")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024, help="store file size (MiB)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--gets", type=int, default=2_000_000, help="pipelined gets (one-at-a-time: a tenth)")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--only", choices=["store", "cache"])
    ap.add_argument("--no-build", action="store_true")
    args = ap.parse_args()
    if not args.no_build:
        common.build_cli()
    report = common.Report("tls", {"store_mib": args.mib, "reps": args.reps, "gets": args.gets,
                                   "clients": args.clients})
    with tempfile.TemporaryDirectory(prefix="inpath-tls-bench-") as tmp:
        pki = os.path.join(tmp, "tls")
        subprocess.run([inpath_bin(), "tls", "init", pki], check=True, stdout=subprocess.DEVNULL)
        if args.only in (None, "store"):
            store_rows(report, tmp, pki, args.mib, args.reps)
        if args.only in (None, "cache"):
            cache_rows(report, pki, args.gets, args.clients)
    report.save()


if __name__ == "__main__":
    main()

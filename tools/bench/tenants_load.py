#!/usr/bin/env python3
"""tenants_load.py — issue 25's isolation targets, measured against a real `attnd serve`.

    tools/bench/tenants_load.py [--model M] [--binary build/attnd] [--reps 8] [--slow 256]

1. Time to first token of a well-behaved key (a streamed /v1/completions, max_tokens 8), first
   with the server idle, then while another key runs a 32k-token batch (64 prompts x max_tokens
   512 = 32,768 tokens, EOS suppressed): medians of --reps each and their ratio (target <= 2).
2. GET /health latency while --slow connections trickle a request body (headers at once, then one
   byte every 5 s, as a slowloris does): 200 sequential probes, p50 / p99 and how many were not
   200 (target p99 < 50 ms).

The server runs with its defaults apart from two API keys (each key is a tenant) and one engine
thread. A measurement, not a test: it prints figures and never fails on them. Figures are
relative to this host's load at the time; take them on a quiet machine.
"""
import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KEYS = ("tenant-abusive-key", "tenant-polite-key")
# the default model's EOS ids: a batch that cannot stop early keeps generating its 32k tokens
NO_EOS = {"2": -100, "4097": -100}


def start_server(binary, model, keyfile, extra):
    log = tempfile.NamedTemporaryFile(prefix="attnd-tenants-", suffix=".log", delete=False)
    cmd = [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--model", model, "--threads", "1",
           "--api-key-file", keyfile] + extra
    proc = subprocess.Popen(cmd, stderr=log, stdout=subprocess.DEVNULL)
    for _ in range(600):
        with open(log.name) as f:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
        if m:
            return proc, int(m.group(1)), log.name
        if proc.poll() is not None:
            sys.exit("attnd serve exited; see " + log.name)
        time.sleep(0.1)
    sys.exit("attnd serve did not start; see " + log.name)


def post(port, path, body, key, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return c, c.getresponse()


def ttft(port, key):
    """Seconds from sending a short streamed request to its first text chunk."""
    t0 = time.monotonic()
    c, r = post(port, "/v1/completions", {"prompt": "We the people", "max_tokens": 8, "stream": True}, key)
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:200]))
    first = None
    for line in r:
        if first is None and line.startswith(b"data: {") and b'"text":"' in line and b'"text":""' not in line:
            first = time.monotonic() - t0
        if line.startswith(b"data: [DONE]"):
            break
    c.close()
    return first if first is not None else float("nan")


def abusive_batch(port, key, done):
    body = {"prompt": ["We the people %d" % i for i in range(64)], "max_tokens": 512, "logit_bias": NO_EOS}
    try:
        c, r = post(port, "/v1/completions", body, key, timeout=3600)
        r.read()
        done["status"] = r.status
    except OSError as e:
        done["status"] = str(e)


def measure_ttft(port, reps):
    polite, abusive = KEYS[1], KEYS[0]
    ttft(port, polite)  # warm-up: the first request reads the model's pages
    idle = [ttft(port, polite) for _ in range(reps)]
    done = {}
    t = threading.Thread(target=abusive_batch, args=(port, abusive, done), daemon=True)
    t.start()
    time.sleep(2.0)  # the batch is admitted and decoding
    busy = [ttft(port, polite) for _ in range(reps)]
    still = t.is_alive()
    mi, mb = statistics.median(idle), statistics.median(busy)
    print("TTFT of the polite key, idle:   median %.1f ms (%s)" % (mi * 1e3, " ".join("%.0f" % (x * 1e3) for x in idle)))
    print("TTFT beside a 32,768-token batch of another key: median %.1f ms (%s)%s" %
          (mb * 1e3, " ".join("%.0f" % (x * 1e3) for x in busy), "" if still else " (the batch had ENDED: too short)"))
    print("ratio %.2f (target <= 2)" % (mb / mi))
    return t


def slow_connection(port, stop, opened):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n"
                  b"Authorization: Bearer " + KEYS[0].encode() + b"\r\n\r\n{")
        opened.append(1)
        while not stop.wait(5.0):
            s.sendall(b" ")
    except OSError:
        pass


def measure_health(port, n_slow):
    stop, opened = threading.Event(), []
    slow = [threading.Thread(target=slow_connection, args=(port, stop, opened), daemon=True) for _ in range(n_slow)]
    for t in slow:
        t.start()
    time.sleep(2.0)
    lat, bad = [], 0
    for _ in range(200):
        t0 = time.monotonic()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            bad += r.status != 200
            c.close()
        except OSError:
            bad += 1
        lat.append(time.monotonic() - t0)
        time.sleep(0.02)
    stop.set()
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print("/health beside %d slow bodies (%d connected): p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d of %d not 200 "
          "(target p99 < 50 ms)" % (n_slow, len(opened), statistics.median(lat) * 1e3, p99 * 1e3, lat[-1] * 1e3,
                                    bad, len(lat)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "attnd-sotu.gguf"))
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "attnd"))
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--slow", type=int, default=256)
    a = ap.parse_args()
    with tempfile.NamedTemporaryFile("w", prefix="attnd-keys-", delete=False) as f:
        f.write("\n".join(KEYS) + "\n")
    proc, port, log = start_server(a.binary, a.model, f.name, [])
    try:
        print("# %s, %d CPUs, load average %.2f; server log %s" % (os.path.basename(a.model), os.cpu_count(),
                                                                 os.getloadavg()[0], log))
        t = measure_ttft(port, a.reps)
        proc.terminate()
        proc.wait(60)
        t.join(1)
        proc, port, log = start_server(a.binary, a.model, f.name, [])
        measure_health(port, a.slow)
    finally:
        proc.terminate()
        proc.wait(60)
        os.unlink(f.name)


if __name__ == "__main__":
    main()

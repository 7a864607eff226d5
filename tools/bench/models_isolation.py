#!/usr/bin/env python3
"""models_isolation.py — issue 50's "Isolation" target: while model B (a ~1 GB file) loads, the
p99 time to first token of model A's streams stays within 1.2x of its value with B idle.

    python3 tools/bench/models_isolation.py --attnd build/attnd --samples 200

One server of two presets: A, the shipped model (models/attnd-sotu.gguf), and B, a random-weight
TinyLlama-shaped Q8_0 file (1.17 GB) that tools/bench/make_model.py writes (kept in --cache, so a
second run reuses it). A single client sends A's streamed completions one after another and
times each from the request to its first token, while B is loaded (POST /models/load), unloaded
and left alone for --idle-s, over and over. A request counts as "while B loads" when it started
and ended during one load, as "idle" when during one idle span: the two phases alternate, so
that both see the same background load of a shared machine. Prints one JSON line: each phase's
samples, p50, p90, p99, max and mean (ms), the ratio of the p99s, B's load times, and the load average before and after (the machine may be shared: say it with the numbers).
B's file is read from the page cache after the first load (the loads measured are warm), as a
server that swaps models it used recently reads it.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from models_swap import Server  # noqa: E402  (one way to start a server)


def ttft_ms(port, prompt):
    """ms from sending A's streamed completion to its first token (the rest is read, unused)."""
    body = json.dumps({"model": "A", "prompt": prompt, "max_tokens": 4, "temperature": 0, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("A answered %d: %s" % (r.status, r.read()[:300]))
    first = None
    while True:
        line = r.readline()
        if not line:
            break
        if first is None and line.startswith(b"data: {"):
            first = (time.perf_counter() - t0) * 1e3
    c.close()
    return first


def state(base, name):
    for m in json.loads(urllib.request.urlopen(base + "/v1/models", timeout=30).read())["data"]:
        if m["id"] == name:
            return m["status"]["value"]
    return None


def post(base, path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=120).read()


def loader(base, stop, loads, spans, idle_spans, idle_s):
    """Until stop: loads B (recording the load's [start, end] in spans), unloads it, and leaves
    it unloaded for idle_s (recorded in idle_spans), so that both phases sample the same
    background load of the machine."""
    while not stop.is_set():
        t0 = time.perf_counter()
        post(base, "/models/load", {"model": "B"})
        while state(base, "B") == "loading":
            time.sleep(0.005)
        t1 = time.perf_counter()
        spans.append((t0, t1))
        loads.append((t1 - t0) * 1e3)
        post(base, "/models/unload", {"model": "B"})
        t2 = time.perf_counter()
        stop.wait(idle_s)
        idle_spans.append((t2, time.perf_counter()))


def classify(pending, spans, idle_spans, during, idle):
    """Files each finished request under the phase one of whose spans lasted all of it; returns
    the requests no closed span covers yet (their span may still be open)."""
    last = max([s1 for _, s1 in spans + idle_spans], default=0.0)
    keep = []
    for a, b, m in pending:
        if b > last:
            keep.append((a, b, m))
        elif any(s0 <= a and b <= s1 for s0, s1 in spans[-8:]):
            during.append(m)
        elif any(s0 <= a and b <= s1 for s0, s1 in idle_spans[-8:]):
            idle.append(m)
    return keep


def pct(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100 * len(xs)))], 1) if xs else None


def phase(xs):
    return {"samples": len(xs), "p50_ms": pct(xs, 50), "p90_ms": pct(xs, 90), "p99_ms": pct(xs, 99),
            "max_ms": pct(xs, 100), "mean_ms": round(sum(xs) / len(xs), 2) if xs else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnd", default=os.path.join(SOURCE, "build", "attnd"))
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "attnd-bench"),
                    help="where B's file is written once and kept")
    ap.add_argument("--samples", type=int, default=200, help="A's requests per phase")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--idle-s", type=float, default=2.0, help="B stays unloaded this long between loads")
    ap.add_argument("--max-seconds", type=float, default=300)
    args = ap.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    b_file = os.path.join(args.cache, "tinyllama-q8_0-random.gguf")
    if not os.path.exists(b_file):
        subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), "--type", "Q8_0", b_file + ".part"],
                       check=True, stdout=subprocess.DEVNULL)
        os.rename(b_file + ".part", b_file)
    work = tempfile.mkdtemp(prefix="attnd-isolation.")
    conf = os.path.join(work, "attnd.conf")
    with open(conf, "w") as f:
        f.write("[model.A]\nmodel = %s\nkv_budget_mb = 16\n" % os.path.join(SOURCE, "models", "attnd-sotu.gguf"))
        f.write("[model.B]\nmodel = %s\nkv_budget_mb = 64\nctx_size = 512\n" % b_file)
    load_before = open("/proc/loadavg").read().split()[:3]
    srv = Server(args.attnd, ["--config", conf, "--threads", str(args.threads), "--no-models-cache"],
                 os.path.join(work, "server.log"))
    port = int(re.search(r":(\d+)$", srv.base).group(1))
    prompts = ["Once upon a time", "The little dog", "We the people"]
    try:
        for i in range(10):  # warm A (and its prompt cache) up
            ttft_ms(port, prompts[i % 3])
        post(srv.base, "/models/load", {"model": "B"})  # B's file into the page cache once
        while state(srv.base, "B") == "loading":
            time.sleep(0.01)
        post(srv.base, "/models/unload", {"model": "B"})
        stop, loads, spans, idle_spans = threading.Event(), [], [], []
        t = threading.Thread(target=loader, args=(srv.base, stop, loads, spans, idle_spans, args.idle_s))
        t.start()
        i, idle, during, pending = 0, [], [], []
        deadline = time.time() + args.max_seconds
        while (len(during) < args.samples or len(idle) < args.samples) and time.time() < deadline:
            t0 = time.perf_counter()
            ms = ttft_ms(port, prompts[i % 3])
            pending.append((t0, time.perf_counter(), ms))
            i += 1
            if len(pending) >= 32:  # now and then, not per request: the client must not take a CPU
                pending = classify(pending, list(spans), list(idle_spans), during, idle)
        stop.set()
        t.join()
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)
    out = {"idle": phase(idle), "while_b_loads": phase(during),
           "p99_ratio": round(pct(during, 99) / pct(idle, 99), 2) if during and idle else None,
           "b_file_mb": os.path.getsize(b_file) >> 20, "b_loads": len(loads),
           "b_load_ms": {"p50": pct(loads, 50), "max": pct(loads, 100)}, "threads": args.threads,
           "cpus": os.cpu_count(), "loadavg_before": load_before,
           "loadavg_after": open("/proc/loadavg").read().split()[:3]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

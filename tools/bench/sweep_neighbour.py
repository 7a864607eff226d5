#!/usr/bin/env python3
"""sweep_neighbour.py — issue 44's sweep isolation target, measured against a real `attnd serve`.

    tools/bench/sweep_neighbour.py [--model M] [--binary build/attnd] [--reps 5] [--prompt 64]

A third key's short completion (--short tokens, streamed off) is timed, medians of --reps:
beside two ordinary streams of two other keys, then beside two clients that loop ablation sweeps
("measure": "ablation", "ablate_from": 0 over a --prompt-token prompt) back to back. Target: the
short request beside the sweeps within 2x its time beside the streams. Sweeps run on the
scheduler thread in turns between its steps (docs/server.md). A measurement, not a test.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from grammar_neighbour import ROOT, start_server  # noqa: E402

KEYS = ("sweep-a-key", "sweep-b-key", "short-key")


def post(port, path, body, key, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "attnd-sotu.gguf"))
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "attnd"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--short", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import tempfile
    with tempfile.NamedTemporaryFile("w", prefix="attnd-keys-", delete=False) as kf:
        kf.write("\n".join(KEYS) + "\n")
    proc, port, log = start_server(a.binary, a.model, kf.name, a.threads)
    stop = threading.Event()
    counts = {"sweeps": 0, "sweep_s": []}

    def sweeper(key):
        ids = [1 + (i * 37) % 500 for i in range(a.prompt)]
        while not stop.is_set():
            t0 = time.monotonic()
            st, _ = post(port, "/v1/attention", {"prompt": ids, "measure": "ablation", "ablate_from": 0}, key)
            counts["sweeps"] += st == 200
            counts["sweep_s"].append(time.monotonic() - t0)

    def streamer(key):
        while not stop.is_set():
            post(port, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0}, key)

    def short_times():
        out = []
        for _ in range(a.reps):
            t0 = time.monotonic()
            st, _ = post(port, "/v1/completions", {"prompt": "The cat", "max_tokens": a.short, "temperature": 0}, KEYS[2])
            out.append(time.monotonic() - t0)
            if st != 200:
                sys.exit(f"short request: HTTP {st}; see {log}")
        return statistics.median(out)

    try:
        short_times()  # warm-up
        res = {}
        for name, fn in (("beside two streams", streamer), ("beside two sweep loops", sweeper)):
            stop.clear()
            ts = [threading.Thread(target=fn, args=(k,)) for k in KEYS[:2]]
            for t in ts:
                t.start()
            time.sleep(1.0)
            res[name] = short_times()
            stop.set()
            for t in ts:
                t.join()
        print(f"cpu: {os.cpu_count()} cores, load {open('/proc/loadavg').read().split()[0]}; --threads {a.threads}; "
              f"model {os.path.basename(a.model)}; medians of {a.reps}")
        for name, v in res.items():
            print(f"short request ({a.short} tokens) {name}: {v * 1e3:8.1f} ms")
        if counts["sweep_s"]:
            print(f"sweeps done: {counts['sweeps']}, median {statistics.median(counts['sweep_s']):.2f} s each")
        r = res["beside two sweep loops"] / res["beside two streams"]
        print(f"ratio {r:.2f}x (target <= 2)")
    finally:
        proc.terminate()
        proc.wait()
        os.unlink(kf.name)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""grammar_neighbour.py — issue 44's grammar isolation target, measured against a real `attnd serve`.

    tools/bench/grammar_neighbour.py --model M [--binary build/attnd] [--tokens 60] [--n 16] [--reps 3]

One key streams a /v1/completions of --tokens tokens (EOS suppressed), first alone, then while
another key runs a grammar request of n = --n choices under an ambiguous, recursive grammar (each
rejected token makes its sequence mask the whole vocabulary: on a 152k vocabulary, the worst
case). For each run: the stream's tokens/s and its p50 / p99 / max gap between tokens, and the
ratios beside / alone (targets: speed >= 0.5x, p99 gap <= 3x); --reps runs alternate alone and
beside, and the medians are compared. The model should have a big real
vocabulary, e.g. a small random-weight one on the qwen2 BPE (151,936 tokens):

    python3 tools/bench/make_model.py --type Q8_0 --layers 1 --dim 256 --ffn 512 --heads 4 \\
        --kv-heads 2 --tokenizer tests/data/tokenizers/qwen2-bpe.gguf /tmp/q152k.gguf

The server runs with two API keys (each key a tenant) and --threads (default 2). A measurement,
not a test: it prints figures and never fails on them.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KEYS = ("grammar-key", "stream-key")
# ambiguous and recursive: every position may start or end any number of nested sentences
GRAMMAR = 'root ::= [a-c]{0,4} ("x" | "y")? .+ root "]" | [a-z ]+'


def ready(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/health")
        ok = c.getresponse().status == 200
        c.close()
        return ok
    except OSError:
        return False


def start_server(binary, model, keyfile, threads):
    log = tempfile.NamedTemporaryFile(prefix="attnd-grammar-", suffix=".log", delete=False)
    cmd = [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--model", model, "--threads", str(threads),
           "--api-key-file", keyfile]
    proc = subprocess.Popen(cmd, stderr=log, stdout=subprocess.DEVNULL)
    for _ in range(600):
        with open(log.name) as f:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
        if m and ready(int(m.group(1))):
            return proc, int(m.group(1)), log.name
        if proc.poll() is not None:
            sys.exit("attnd serve exited; see " + log.name)
        time.sleep(0.1)
    sys.exit("attnd serve did not start; see " + log.name)


def post(port, body, key, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", "/v1/completions", json.dumps(body),
              {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    return c, c.getresponse()


def stream(port, tokens, eos):
    """Arrival times of the stream's chunks (one per token)."""
    body = {"prompt": "Once upon a time", "max_tokens": tokens, "stream": True, "temperature": 0,
            "logit_bias": {str(e): -100 for e in eos}}
    c, r = post(port, body, KEYS[1])
    times = [time.monotonic()]
    for line in r:
        if line.startswith(b"data: {"):
            times.append(time.monotonic())
    c.close()
    return times


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def figures(times):
    gaps = [b - a for a, b in zip(times[1:], times[2:])]  # from the first token on
    return {"tok_s": (len(times) - 2) / (times[-1] - times[1]), "p50": pct(gaps, 50), "p99": pct(gaps, 99),
            "max": max(gaps)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "attnd"))
    ap.add_argument("--tokens", type=int, default=60)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--plain", action="store_true", help="the n choices without the grammar (what batching alone costs)")
    ap.add_argument("--eos", default="151643,151645", help="token ids to suppress in the stream")
    a = ap.parse_args()
    eos = [int(x) for x in a.eos.split(",") if x]
    with tempfile.NamedTemporaryFile("w", prefix="attnd-keys-", delete=False) as kf:
        kf.write("\n".join(KEYS) + "\n")
    proc, port, log = start_server(a.binary, a.model, kf.name, a.threads)
    try:
        stream(port, 4, eos)  # warm-up
        runs = {"alone": [], "beside grammar": []}
        done = {}

        def grammar_request():
            t0 = time.monotonic()
            req = {"prompt": "Write:", "max_tokens": a.tokens, "n": a.n, "temperature": 1.0, "seed": 7}
            if not a.plain:
                req["grammar"] = GRAMMAR
            c, r = post(port, req, KEYS[0])
            r.read()
            c.close()
            done["status"], done["s"] = r.status, time.monotonic() - t0

        for _ in range(a.reps):
            t = stream(port, a.tokens, eos)
            if len(t) < 4:
                sys.exit(f"the stream gave {len(t) - 1} chunks; see {log}")
            runs["alone"].append(figures(t))
            g = threading.Thread(target=grammar_request)
            g.start()
            time.sleep(0.5)  # the grammar request is admitted and masking
            runs["beside grammar"].append(figures(stream(port, a.tokens, eos)))
            g.join()
        cpu = open("/proc/cpuinfo").read()
        model = re.search(r"model name\s*:\s*(.*)", cpu)
        print(f"cpu: {model.group(1) if model else '?'}, {os.cpu_count()} cores, load {open('/proc/loadavg').read().split()[0]}; "
              f"--threads {a.threads}; model {os.path.basename(a.model)}; medians of {a.reps}"
              + ("; the n choices WITHOUT the grammar" if a.plain else ""))
        med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in runs.items()}
        for name, f in med.items():
            print(f"{name:15s} {f['tok_s']:7.1f} tok/s   gap p50 {f['p50'] * 1e3:7.1f} ms  p99 {f['p99'] * 1e3:7.1f} ms"
                  f"  max {f['max'] * 1e3:7.1f} ms")
        print(f"the n = {a.n} request: HTTP {done.get('status')} in {done.get('s', 0):.1f} s (the last)")
        alone, beside = med["alone"], med["beside grammar"]
        print(f"speed beside / alone {beside['tok_s'] / alone['tok_s']:.2f}x (target >= 0.5); "
              f"p99 gap {beside['p99'] / alone['p99']:.2f}x alone's (target <= 3)")
    finally:
        proc.terminate()
        proc.wait()
        os.unlink(kf.name)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""models_swap.py — issue 50's "Swapping" target, as a check anyone can rerun: three models (a
chat model that drafts with a small copy of itself, that small draft served on its own, and an
embedding model) under a memory budget that holds two of them, mixed traffic for all three from
several clients at once, and then:

  - no request failed (every answer a 200);
  - every answer equals the same request's answer from a server of that one model (temperature 0;
    the texts exactly, the embeddings within 1e-5);
  - /metrics counted loads and unloads (the budget made the server swap), and no failed load.

    python3 tools/bench/models_swap.py --attnd build/attnd --make-tiny build/make_tiny --seconds 120

The models are made from the shipped one (models/attnd-sotu.gguf, and `attnd quantize` of it to
Q4_0 for the draft) and make_tiny's small bert, in a temporary folder. Prints one JSON summary
line (requests per model, swaps, latency percentiles); exit status 0 when every check holds.
tests/test_http_models_swap.sh runs it for a few seconds; tools/bench/models_swap.sh for two
minutes. Servers listen on 127.0.0.1, on ports the system picks.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))

PROMPTS = ["Once upon a time", "The little dog", "We the people", "In the morning the sun",
           "She opened the door and", "The president said that"]
KV_MB = 16  # each model's KV budget: what models_memory_mb counts beside the file


class Server:
    """One `attnd serve` on a port of the system's choosing; stop() ends it by its pid."""

    def __init__(self, attnd, args, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([attnd, "serve", "--host", "127.0.0.1", "--port", "0"] + args,
                                     stdout=self.log, stderr=self.log)
        self.base = None
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited at start:\n" + open(log_path).read()[-2000:])
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", open(log_path).read())
            if m:
                try:
                    urllib.request.urlopen(m.group(1) + "/health", timeout=5).read()
                    self.base = m.group(1)
                    return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError("server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def post(base, path, body, timeout=600):
    """(status, parsed JSON or SSE text) of one POST."""
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    if body.get("stream"):
        return status, raw
    return status, json.loads(raw)


def requests_for(model):
    """Every distinct request of the traffic, as (key, path, body) with body's model = model."""
    out = []
    for i, p in enumerate(PROMPTS):
        out.append((("chat", i), "/v1/chat/completions",
                    {"model": "chat", "messages": [{"role": "user", "content": p}], "max_tokens": 16,
                     "temperature": 0}))
        out.append((("chat-stream", i), "/v1/chat/completions",
                    {"model": "chat", "messages": [{"role": "user", "content": p}], "max_tokens": 16,
                     "temperature": 0, "stream": True}))
        out.append((("draft", i), "/v1/completions",
                    {"model": "draft", "prompt": p, "max_tokens": 16, "temperature": 0}))
        out.append((("embed", i), "/v1/embeddings", {"model": "embed", "input": p}))
    return [(k, path, b) for k, path, b in out if k[0].split("-")[0] == model]


def answer_of(key, status, got):
    """What must equal the reference: the text, or the vector."""
    if status != 200:
        return None
    kind = key[0]
    if kind == "chat":
        return got["choices"][0]["message"]["content"]
    if kind == "chat-stream":
        text = ""
        for line in got.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for c in json.loads(line[6:]).get("choices", []):
                    text += (c.get("delta") or {}).get("content") or ""
        return text
    if kind == "draft":
        return got["choices"][0]["text"]
    return got["data"][0]["embedding"]


def same(key, a, b):
    if a is None or b is None:
        return False
    if key[0] == "embed":
        return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= 1e-5
    return a == b


def make_models(args, work):
    chat = os.path.join(SOURCE, "models", "attnd-sotu.gguf")
    draft = os.path.join(work, "sotu-q4_0.gguf")
    embed = os.path.join(work, "bert.gguf")
    subprocess.run([args.attnd, "quantize", chat, draft, "Q4_0", "--quiet"], check=True, capture_output=True)
    subprocess.run([args.make_tiny, embed, "bert"], check=True, stdout=subprocess.DEVNULL)
    return {"chat": chat, "draft": draft, "embed": embed}


def references(args, work, files):
    """Each request's answer from a server of its model alone (the three servers at once)."""
    ref, errors = {}, []
    alone = {"chat": ["--model", files["chat"], "--draft-model", files["draft"], "--draft-max", "4"],
             "draft": ["--model", files["draft"]], "embed": ["--model", files["embed"]]}

    def one(name, flags):
        try:
            srv = Server(args.attnd, flags + ["--threads", "1", "--kv-budget-mb", str(KV_MB)],
                         os.path.join(work, "ref-%s.log" % name))
        except Exception as e:  # noqa: BLE001  (said below, in the caller's thread)
            errors.append("reference server %s: %s" % (name, e))
            return
        try:
            for key, path, body in requests_for(name):
                status, got = post(srv.base, path, body)
                if status != 200:
                    errors.append("reference %s: %s %s" % (key, status, got))
                    return
                ref[key] = answer_of(key, status, got)
        finally:
            srv.stop()

    threads = [threading.Thread(target=one, args=item) for item in alone.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return ref


def loaded_sizes(args, work, files):
    """Each model's bytes as the server counts them against models_memory_mb once loaded (file,
    draft file, KV budget, the draft's KV pool), from /v1/models of a server without a budget."""
    srv = Server(args.attnd, ["--config", write_config(work, files, 0), "--threads", "1", "--no-models-cache"],
                 os.path.join(work, "sizes.log"))
    try:
        for name in files:
            status, got = post(srv.base, "/models/load", {"model": name})
            assert status == 200, "load %s: %d %s" % (name, status, got)
        deadline = time.time() + 120
        while time.time() < deadline:
            listed = json.loads(urllib.request.urlopen(srv.base + "/v1/models", timeout=30).read())["data"]
            if all(m["status"]["value"] == "loaded" for m in listed):
                return {m["id"]: m["size"] for m in listed}
            time.sleep(0.05)
        raise RuntimeError("the models did not load: %s" % listed)
    finally:
        srv.stop()


def budget_mb(sizes):
    """MiB that hold the two largest models (as loaded) and not all three."""
    sizes = sorted(sizes.values())
    mb = (sizes[-2] + sizes[-1]) // (1 << 20) + 1
    assert (sum(sizes) >> 20) > mb, "the budget must not hold all three"
    return mb


def write_config(work, files, budget):
    path = os.path.join(work, "attnd.conf")
    with open(path, "w") as f:
        f.write("kv_budget_mb = %d\nmodels_memory_mb = %d\n" % (KV_MB, budget))
        f.write("[model.chat]\nmodel = %s\ndraft_model = %s\ndraft_max = 4\n" % (files["chat"], files["draft"]))
        f.write("[model.draft]\nmodel = %s\n" % files["draft"])
        f.write("[model.embed]\nmodel = %s\nrole = embedding\n" % files["embed"])
    return path


def metric(text, name, model):
    m = re.search(r'^%s\{model="%s"\} (\d+)$' % (name, model), text, re.M)
    return int(m.group(1)) if m else -1


def traffic(base, ref, seconds, clients, seed, min_each=3):
    """clients threads send requests for `seconds` (and until every model answered min_each, so
    that a slow build swaps too): client c's i-th request is for model (c + i) mod 3, a random
    one of its requests; returns the results."""
    names = ("chat", "draft", "embed")
    pools = [requests_for(m) for m in names]
    results, lock = [], threading.Lock()
    stop_at = time.time() + seconds
    hard_stop = stop_at + 120

    def more():
        if time.time() >= hard_stop:
            return False
        with lock:
            fewest = min(sum(1 for r in results if r["key"][0].startswith(m)) for m in names)
        return time.time() < stop_at or fewest < min_each

    def client(c):
        rng = random.Random(seed + c)
        i = 0
        while more():
            key, path, body = rng.choice(pools[(c + i) % len(names)])
            i += 1
            t0 = time.time()
            try:
                status, got = post(base, path, body)
            except OSError as e:
                status, got = 0, str(e)
            dt = time.time() - t0
            ok = status == 200 and same(key, answer_of(key, status, got), ref[key])
            with lock:
                results.append({"key": key, "status": status, "ok": ok, "s": dt,
                                "error": None if ok else str(got)[:300]})

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def pct(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100 * len(xs)))], 3) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnd", default=os.path.join(SOURCE, "build", "attnd"))
    ap.add_argument("--make-tiny", default=os.path.join(SOURCE, "build", "make_tiny"))
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2, help="the server's threads")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="attnd-swap.")
    try:
        files = make_models(args, work)
        ref = references(args, work, files)
        budget = budget_mb(loaded_sizes(args, work, files))
        srv = Server(args.attnd, ["--config", write_config(work, files, budget), "--threads", str(args.threads),
                                  "--no-models-cache"], os.path.join(work, "models.log"))
        try:
            t0 = time.time()
            results = traffic(srv.base, ref, args.seconds, args.clients, args.seed)
            wall = time.time() - t0
            metrics = urllib.request.urlopen(srv.base + "/metrics", timeout=30).read().decode()
        finally:
            srv.stop()
    except Exception:
        print("work folder kept: %s" % work, file=sys.stderr)
        raise
    names = ("chat", "draft", "embed")
    failed = [r for r in results if not r["ok"]]
    summary = {
        "seconds": round(wall, 1), "clients": args.clients, "threads": args.threads,
        "budget_mb": budget, "requests": len(results), "failed": len(failed),
        "per_model": {m: sum(1 for r in results if r["key"][0].startswith(m)) for m in names},
        "loads": {m: metric(metrics, "attnd_model_loads_total", m) for m in names},
        "unloads": {m: metric(metrics, "attnd_model_unloads_total", m) for m in names},
        "load_failures": {m: metric(metrics, "attnd_model_load_failures_total", m) for m in names},
        "latency_s": {"p50": pct([r["s"] for r in results], 50), "p99": pct([r["s"] for r in results], 99),
                      "max": pct([r["s"] for r in results], 100)},
    }
    print(json.dumps(summary))
    problems = []
    if not results:
        problems.append("no request was sent")
    for r in failed[:5]:
        problems.append("%s: status %s: %s" % (r["key"], r["status"], r["error"]))
    if any(summary["per_model"][m] == 0 for m in names):
        problems.append("a model got no request")
    if sum(summary["unloads"].values()) <= 0 or any(summary["loads"][m] < 1 for m in names):
        problems.append("/metrics shows no swapping (loads %s, unloads %s)" % (summary["loads"], summary["unloads"]))
    if any(v != 0 for v in summary["load_failures"].values()):
        problems.append("failed loads: %s" % summary["load_failures"])
    for p in problems:
        print("FAIL: " + p, file=sys.stderr)
    if problems:
        print("work folder kept: %s" % work, file=sys.stderr)
        sys.exit(1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""embed_vs_llamacpp.py — embeddings per second, attnd against llama.cpp, on a bge-base-shaped
encoder (bert: 12 layers, 768 wide, random weights; tools/bench/make_model.py --shape bge-base).

    /usr/bin/python3 tools/bench/embed_vs_llamacpp.py --types "F16 Q8_0" --threads 2 --inputs 64 --reps 3

The inputs are token-id lists of 16..512 tokens (seeded; uniform lengths), the same for both.
attnd: one POST /v1/embeddings carrying every input, to `attnd serve` started once per type
(the scheduler batches them; the model is loaded before timing). llama.cpp: node-llama-cpp's
embedding context through tools/peers/llamacpp/embed.mjs, each input evaluated alone (as its
embedding context does); its time is the run's wall time less that of a run with one 16-token
input (start-up and load). attnd and llama.cpp alternate, --reps rounds, medians. Prints
embeddings/s and tokens/s of each and their ratio, the load average before and after each row,
and the cosine of the two engines' first vector (a check that both computed the same model).
With --rerank N (e.g. 100) it also ranks N documents of 32..256 tokens against a 16-token
query on a bge-reranker-base shape (the same encoder with a cross-encoder's head): attnd's
/v1/rerank with the texts, llama.cpp's ranking context on the same pairs' ids (BOS q EOS d EOS,
from attnd's /tokenize). Options: --types, --threads, --inputs, --rerank, --reps, --attnd BIN (default build/attnd), --peer-dir DIR
(default: tools/peers/llamacpp/install.sh installs one), --cache DIR (default
${XDG_CACHE_HOME:-~/.cache}/attnd/bench).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import sys
import time
import urllib.request

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def start_attnd(attnd, model, threads):
    port = free_port()
    p = subprocess.Popen([attnd, "serve", "--model", model, "--threads", str(threads), "--port", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            with urllib.request.urlopen(base + "/health", timeout=1) as r:
                if json.loads(r.read()).get("status") == "ok":
                    return p, base
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    sys.exit("embed_vs_llamacpp.py: attnd serve did not become healthy")


def attnd_run(base, inputs):
    t = time.perf_counter()
    ans = post(base + "/v1/embeddings", {"input": inputs})
    dt = time.perf_counter() - t
    if len(ans["data"]) != len(inputs):
        sys.exit("embed_vs_llamacpp.py: attnd answered %d vectors for %d inputs" % (len(ans["data"]), len(inputs)))
    return dt, np.array(ans["data"][0]["embedding"])


def peer_run(peer, model, inputs, threads, rank=False):
    with tempfile.NamedTemporaryFile("w", suffix=".ids") as f:  # a command line cannot hold 256 inputs
        f.write(";".join(",".join(map(str, x)) for x in inputs))
        f.flush()
        t = time.perf_counter()
        out = subprocess.run(["node", os.path.join(peer, "embed.mjs"), "--model", model, "--inputs", "@" + f.name,
                              "--threads", str(threads), "--ctx", "512"] + (["--rank"] if rank else []),
                             capture_output=True, text=True, check=True)
        dt = time.perf_counter() - t
    return dt, np.array(json.loads(out.stdout)["vectors"][0])


def rerank_row(a, peer, typ, rng):
    """attnd's /v1/rerank of a.rerank documents against llama.cpp's ranking context, same pairs."""
    model = ensure_model(a, "bge-reranker-base", typ)
    words = lambda n: "".join(f"w{i}" for i in rng.integers(100, 9000, n))  # noqa: E731
    query, docs = words(16), [words(int(n)) for n in rng.integers(32, 257, a.rerank)]
    l0 = load()
    srv, base = start_attnd(a.attnd, model, a.threads)
    try:
        ids = lambda text: post(base + "/tokenize", {"content": text, "add_special": False})["tokens"]  # noqa: E731
        q = ids(query)
        pairs = [[1] + q + [2] + ids(d) + [2] for d in docs]
        n_tok = sum(map(len, pairs))
        post(base + "/v1/rerank", {"query": query, "documents": docs[:1]})  # warm-up
        ta, tp = [], []
        for _ in range(a.reps):
            t = time.perf_counter()
            ans = post(base + "/v1/rerank", {"query": query, "documents": docs})
            ta.append(time.perf_counter() - t)
            if len(ans["results"]) != len(docs):
                sys.exit("embed_vs_llamacpp.py: attnd ranked %d of %d documents" % (len(ans["results"]), len(docs)))
            full, _ = peer_run(peer, model, pairs, a.threads, rank=True)
            short, _ = peer_run(peer, model, pairs[:1], a.threads, rank=True)
            tp.append(full - short)
    finally:
        srv.terminate()
        srv.wait()
    ma, mp = statistics.median(ta), statistics.median(tp)
    print(f"  {typ:5} rerank of {a.rerank} documents ({n_tok} tokens): attnd {ma:6.2f} s   llama.cpp {mp:6.2f} s   "
          f"ratio {mp / ma:5.2f}x   (load {l0:.2f} -> {load():.2f})")
    return ma, mp


def ensure_model(a, shape, typ):
    model = os.path.join(a.cache, f"{shape}-{typ}.gguf")
    if not os.path.exists(model):
        subprocess.run([sys.executable, os.path.join(ROOT, "tools/bench/make_model.py"), "--shape", shape,
                        "--type", typ, model], check=True)
    return model


def load():
    return os.getloadavg()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", default="F16 Q8_0")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--inputs", type=int, default=64)
    ap.add_argument("--rerank", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--attnd", default=os.path.join(ROOT, "build", "attnd"))
    ap.add_argument("--peer-dir")
    ap.add_argument("--cache", default=os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                                     "attnd", "bench"))
    a = ap.parse_args()
    peer = a.peer_dir or subprocess.run([os.path.join(ROOT, "tools/peers/llamacpp/install.sh")], capture_output=True,
                                        text=True, check=True).stdout.strip()
    rng = np.random.default_rng(1)
    inputs = [rng.integers(1000, 10000, int(n)).tolist() for n in rng.integers(16, 513, a.inputs)]
    n_tok = sum(map(len, inputs))
    one = [inputs[0][:16]]
    os.makedirs(a.cache, exist_ok=True)
    print(f"cpu: {cpu_name()}, {os.cpu_count()} cores; {a.inputs} inputs, {n_tok} tokens, {a.threads} threads")
    rows = []
    for typ in a.types.split():
        model = ensure_model(a, "bge-base", typ)
        l0 = load()
        srv, base = start_attnd(a.attnd, model, a.threads)
        try:
            attnd_run(base, one)  # warm-up
            ta, tp = [], []
            for _ in range(a.reps):
                dt, va = attnd_run(base, inputs)
                ta.append(dt)
                full, vp = peer_run(peer, model, inputs, a.threads)
                short, _ = peer_run(peer, model, one, a.threads)
                tp.append(full - short)
        finally:
            srv.terminate()
            srv.wait()
        ma, mp = statistics.median(ta), statistics.median(tp)
        cos = float(va @ vp / (np.linalg.norm(va) * np.linalg.norm(vp)))
        rows.append((typ, "embeddings", ma, mp))
        print(f"  {typ:5} attnd {a.inputs / ma:7.2f} emb/s {n_tok / ma:8.0f} tok/s   llama.cpp {a.inputs / mp:7.2f} emb/s "
              f"{n_tok / mp:8.0f} tok/s   ratio {mp / ma:5.2f}x   cosine {cos:.7f}   (load {l0:.2f} -> {load():.2f})")
        if a.rerank:
            rows.append((typ, f"rerank {a.rerank}", *rerank_row(a, peer, typ, rng)))
    print("\nattnd / llama.cpp speed (> 1: attnd faster), median of", a.reps)
    for typ, what, ma, mp in rows:
        print(f"{typ:5} {what:12} {a.threads} threads  {mp / ma:.2f}x")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()

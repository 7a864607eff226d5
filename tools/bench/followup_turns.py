#!/usr/bin/env python3
"""followup_turns.py — issue 45's follow-up-turn target: a 6-turn chat on a hybrid (Gated DeltaNet)
model whose history grows to ~3,000 tokens. Per turn: the prompt's tokens, how many attnd took from
its cache (`usage.prompt_tokens_details.cached_tokens`) and how many it recomputed, against the
bound the issue sets (one checkpoint spacing plus the new turn); then the same turns through
llama.cpp (tools/peers/llamacpp/followup.mjs: one sequence aligned to each prompt as a server
aligns its slot), and the hybrid state's bytes per sequence from `attnd info`.

    python3 tools/bench/followup_turns.py [--turns 6] [--words 330] [--threads 2] [--no-peer]

The model is the Qwen3.6-35B-A3B shape at reduced depth (tools/bench/make_model.py, Q4_K_M, with
the Qwen2 vocabulary from tests/data/tokenizers so the chat template's special tokens exist),
made once into --cache; the template is Qwen3.5's (tests/data/templates/qwen3.5_4b.jinja). The
user turns are paragraphs of this repository's docs, so every run sends the same text; answers
are greedy, 32 tokens. Counts, not speed: the numbers do not depend on the machine's load.
Prints a table and one JSON line. A benchmark: it never fails on the numbers.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from models_swap import Server, post  # noqa: E402  (one way to start a server)


def user_texts(n, words):
    """n user messages of about `words` words each, from the docs' paragraphs, in a fixed order."""
    paras = []
    for path in sorted(glob.glob(os.path.join(SOURCE, "docs", "*.md"))):
        paras += [p.strip() for p in open(path, encoding="utf-8").read().split("\n\n") if len(p.split()) > 20]
    out, i = [], 0
    for _ in range(n):
        w = []
        while len(w) < words:
            w += paras[i % len(paras)].split()
            i += 1
        out.append("Summarise this for me:\n" + " ".join(w[:words]))
    return out


def tokenize(base, text):
    st, r = post(base, "/tokenize", {"content": text, "add_special": False, "parse_special": True})
    if st != 200:
        raise RuntimeError("/tokenize answered %d: %s" % (st, r))
    return r["tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnd", default=os.path.join(SOURCE, "build", "attnd"))
    ap.add_argument("--cache", default=os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                                    "attnd", "bench"))
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--words", type=int, default=330, help="words per user turn (~450 tokens)")
    ap.add_argument("--reply", type=int, default=32, help="answer tokens per turn")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peer-dir")
    ap.add_argument("--no-peer", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.cache, exist_ok=True)
    model = os.path.join(a.cache, "qwen3.6-35b-a3b-qwen2vocab-Q4_K_M.gguf")
    if not os.path.exists(model):
        subprocess.run([sys.executable, os.path.join(HERE, "make_model.py"), "--shape", "qwen3.6-35b-a3b",
                        "--tokenizer", os.path.join(SOURCE, "tests/data/tokenizers/qwen2-bpe.gguf"),
                        "--type", "Q4_K_M", model + ".part"], check=True)
        os.rename(model + ".part", model)
    info = subprocess.run([a.attnd, "info", "--model", model], capture_output=True, text=True, check=True).stdout
    m = re.search(r"(\d+) bytes/sequence", info)
    state_bytes = int(m.group(1)) if m else None
    tmpl = os.path.join(SOURCE, "tests/data/templates/qwen3.5_4b.jinja")
    log = tempfile.NamedTemporaryFile(prefix="followup-", suffix=".log", delete=False).name
    srv = Server(a.attnd, ["--model", model, "--threads", str(a.threads), "--ctx-size", "8192",
                           "--chat-template-file", tmpl], log)
    rows, turns, messages = [], [], []
    try:
        for text in user_texts(a.turns, a.words):
            messages.append({"role": "user", "content": text})
            body = {"messages": messages, "max_tokens": a.reply, "temperature": 0,
                    "chat_template_kwargs": {"enable_thinking": False}}
            st, r = post(srv.base, "/apply-template", {"messages": messages,
                                                       "chat_template_kwargs": {"enable_thinking": False}})
            if st != 200:
                raise RuntimeError("/apply-template answered %d: %s" % (st, r))
            prompt_ids = tokenize(srv.base, r["prompt"])
            st, r = post(srv.base, "/v1/chat/completions", body)
            if st != 200:
                raise RuntimeError("chat answered %d: %s" % (st, r))
            u = r["usage"]
            cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
            answer = r["choices"][0]["message"].get("content") or ""
            new_turn = len(prompt_ids) - (turns[-1]["history"] if turns else 0)
            print("# turn %d: %d prompt tokens, %d cached, answer %r" % (len(rows) + 1, u["prompt_tokens"], cached, answer[:40]), file=sys.stderr)
            rows.append({"prompt_tokens": u["prompt_tokens"], "cached": cached,
                         "recomputed": u["prompt_tokens"] - cached, "new_turn_tokens": new_turn})
            turns.append({"prompt": prompt_ids, "reply": tokenize(srv.base, answer), "history": len(prompt_ids)})
            messages.append({"role": "assistant", "content": answer})
        metrics = urllib.request.urlopen(srv.base + "/metrics", timeout=30).read().decode()
        m = re.search(r"^attnd_kv_checkpoint_bytes(?:\{[^}]*\})? (\d+)", metrics, re.M)
        ckpt_bytes = int(m.group(1)) if m else None
    finally:
        srv.stop()
    interval = 512  # kv_checkpoint_interval's default (docs/configuration.md)
    peer = None
    if not a.no_peer:
        pdir = a.peer_dir or subprocess.run([os.path.join(SOURCE, "tools/peers/llamacpp/install.sh")],
                                            capture_output=True, text=True, check=True).stdout.strip()
        tf = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump([{"prompt": t["prompt"], "reply": t["reply"]} for t in turns], tf)
        tf.close()
        out = subprocess.run(["node", os.path.join(pdir, "followup.mjs"), "--model", model, "--turns", tf.name,
                              "--threads", str(a.threads)], capture_output=True, text=True)
        os.unlink(tf.name)
        if out.returncode:
            print("# llama.cpp failed: " + out.stderr.strip()[-500:], file=sys.stderr)
        else:
            peer = json.loads(out.stdout.strip().splitlines()[-1])["turns"]
    print("# %s; recurrent state %s bytes per sequence; attnd: kv_checkpoint_interval %d, checkpoints held "
          "after the last turn %s bytes; llama.cpp (node-llama-cpp's defaults): %s bytes" %
          (os.path.basename(model), state_bytes, interval, ckpt_bytes, peer[-1].get("checkpoint_bytes") if peer else "-"))
    print("| turn | prompt tokens | attnd cached | attnd recomputed | bound (interval + new turn) |"
          " llama.cpp kept | llama.cpp evaluated |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for i, r in enumerate(rows):
        p = peer[i] if peer else {}
        print("| %d | %d | %d | %d | %d | %s | %s |" % (i + 1, r["prompt_tokens"], r["cached"], r["recomputed"],
                                                     interval + r["new_turn_tokens"], p.get("kept", "-"),
                                                     p.get("evaluated", "-")))
    print(json.dumps({"model": os.path.basename(model), "state_bytes_per_sequence": state_bytes,
                      "attnd_checkpoint_bytes": ckpt_bytes, "attnd": rows,
                      "llamacpp": peer, "within_bound": all(r["recomputed"] <= interval + r["new_turn_tokens"]
                                                            for r in rows)}))


if __name__ == "__main__":
    main()

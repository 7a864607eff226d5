#!/usr/bin/env python3
"""render_reference.py — the expected renderings of tests/data/templates, made by jinja2 exactly
as Hugging Face's apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loop controls, the {% generation %} tag, HF's tojson, raise_exception and a fixed
strftime_now clock). Writes expected.json: {template: {case: {"text": ...} | {"error": ...}}}, and
semantics.json: each line of semantics.txt (one-line templates exercising Python value semantics,
filters, tests and methods) with its rendering or error.

    python3 tests/data/templates/render_reference.py      # Debian: python3-jinja2
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)  # what the C suite passes as --now


class RaisedError(Exception):
    pass


class Generation(Extension):
    """HF's AssistantTracker, minus the mask bookkeeping: renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise RaisedError(message)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


def main():
    meta = json.load(open(os.path.join(HERE, "templates.json")))
    cases = json.load(open(os.path.join(HERE, "cases.json")))
    env = environment()
    out = {}
    for name, m in meta.items():
        src = open(os.path.join(HERE, name + ".jinja"), encoding="utf-8").read()
        tmpl = env.from_string(src)
        out[name] = {}
        for cname, case in cases.items():
            vars = dict(case, bos_token=m["bos_token"], eos_token=m["eos_token"])
            try:
                out[name][cname] = {"text": tmpl.render(**vars)}
            except RaisedError as e:  # the template's own raise_exception: the C engine must say the same
                out[name][cname] = {"error": str(e)}
            except jinja2.TemplateError as e:  # e.g. UndefinedError: the C engine must fail too
                out[name][cname] = {"error_kind": type(e).__name__, "detail": str(e)}
            except TypeError as e:
                out[name][cname] = {"error_kind": "TypeError", "detail": str(e)}
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")
    sem = []
    for line in open(os.path.join(HERE, "semantics.txt"), encoding="utf-8").read().split("\n"):
        if not line:
            continue
        try:
            sem.append({"template": line, "text": env.from_string(line).render()})
        except Exception as e:  # noqa: BLE001 - any failure: the C engine must fail too
            sem.append({"template": line, "error_kind": type(e).__name__, "detail": str(e)})
    with open(os.path.join(HERE, "semantics.json"), "w", encoding="utf-8") as f:
        json.dump(sem, f, indent=1, ensure_ascii=False)
        f.write("\n")
    n = sum(len(v) for v in out.values())
    print("%d templates, %d renderings (jinja2 %s)" % (len(out), n, jinja2.__version__), file=sys.stderr)


if __name__ == "__main__":
    main()

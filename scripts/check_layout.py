#!/usr/bin/env python3
"""check_layout.py — the source tree's structural rules, checked (tests/test_source_layout.sh).

  1. The quoted includes of server/ and cli/ form a DAG: no file reaches itself. With a build
     directory (--objects DIR), also the modules: a .c file depends on the .c files defining the
     functions and data it uses (from the object files' symbols), and no module reaches itself.
  2. The server's layers: server/runtime/ includes nothing from server/api/ and never
     <microhttpd.h> (the scheduler and the stores know no HTTP).
  3. docs/README.md's file map names every .c file of engine/, server/ and cli/.
  4. docs/server.md names every path of the route table (server/api/routes.c) in backticks:
     `POST /v1/completions`, `/completions`, `GET /v1/models/{id}`...

Prints one line per violation and exits 1 when there is any; exits 0 silently otherwise.
Usage: check_layout.py [--objects BUILD_DIR] [SOURCE_DIR]
"""
import os
import re
import subprocess
import sys

ARGS = sys.argv[1:]
OBJECTS = None
if ARGS[:1] == ["--objects"]:
    OBJECTS, ARGS = ARGS[1], ARGS[2:]
ROOT = os.path.abspath(ARGS[0] if ARGS else os.path.join(os.path.dirname(__file__), ".."))
SERVER_DIRS = ["server/runtime", "server/api", "server/process"]
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', re.M)


def sources(top, exts=(".c", ".h")):
    out = []
    for d, _, files in os.walk(os.path.join(ROOT, top)):
        out += [os.path.relpath(os.path.join(d, f), ROOT) for f in files if f.endswith(exts)]
    return sorted(out)


def resolve(src, name):
    """The repository path a quoted include of src names, or None (a public or system header)."""
    here = os.path.dirname(src)
    dirs = [here] + (SERVER_DIRS if src.startswith("server/") else [])
    for d in dirs:
        p = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(os.path.join(ROOT, p)):
            return p
    return None


def include_graph(files):
    graph, system = {}, {}
    for f in files:
        text = open(os.path.join(ROOT, f), encoding="utf-8", errors="replace").read()
        graph[f], system[f] = [], []
        for kind, name in INCLUDE.findall(text):
            if kind == "<":
                system[f].append(name)
            else:
                p = resolve(f, name)
                if p:
                    graph[f].append(p)
    return graph, system


def cycles(graph):
    """Every include circle, as a list of files (each reported once, from its smallest member)."""
    found, state = set(), {}

    def visit(f, stack):
        state[f] = 1
        stack.append(f)
        for g in graph.get(f, []):
            if state.get(g) == 1:
                loop = stack[stack.index(g):]
                i = loop.index(min(loop))
                found.add(tuple(loop[i:] + loop[:i]))
            elif g in graph and not state.get(g):
                visit(g, stack)
        stack.pop()
        state[f] = 2

    for f in graph:
        if not state.get(f):
            visit(f, [])
    return sorted(found)


def module_graph(build):
    """source file -> the source files whose symbols it uses, for server/ and cli/ objects."""
    objs = {}
    for d, _, files in os.walk(os.path.join(build, "CMakeFiles")):
        for f in files:
            if not f.endswith(".c.o"):
                continue
            m = re.search(r"/CMakeFiles/(attnd_server|attnd)\.dir/((?:server|cli)/.*)\.o$", os.path.join(d, f))
            if m:
                objs[m.group(2)] = os.path.join(d, f)
    defined, used = {}, {}
    for src, obj in objs.items():
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        used[src] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                used[src].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDRBC":
                defined[parts[2]] = src
    return {src: sorted({defined[u] for u in us if u in defined and defined[u] != src}) for src, us in used.items()}


def main():
    problems = []
    if OBJECTS:
        graph = module_graph(OBJECTS)
        if not graph:
            problems.append(f"no server or cli object files under {OBJECTS}")
        for loop in cycles(graph):
            problems.append("module circle: " + " -> ".join(loop + (loop[0],)))
    files = sources("server") + sources("cli")
    graph, system = include_graph(files)
    for loop in cycles(graph):
        problems.append("include circle: " + " -> ".join(loop + (loop[0],)))
    for f in files:
        if not f.startswith("server/runtime/"):
            continue
        for g in graph[f]:
            if g.startswith("server/api/"):
                problems.append(f"layering: {f} includes {g} (runtime must not know the API layer)")
        if "microhttpd.h" in system[f]:
            problems.append(f"layering: {f} includes <microhttpd.h> (runtime knows no HTTP)")
    readme = open(os.path.join(ROOT, "docs/README.md"), encoding="utf-8").read()
    named = set(re.findall(r"`([A-Za-z0-9_./*]+\.c)`", readme))
    for f in sources("engine", (".c",)) + sources("server", (".c",)) + sources("cli", (".c",)):
        base = os.path.basename(f)
        if base not in named and f not in named and not any(
                "*" in n and re.fullmatch(n.replace(".", r"\.").replace("*", ".*"), base) for n in named):
            problems.append(f"docs/README.md: the file map does not name {f}")
    routes = open(os.path.join(ROOT, "server/api/routes.c"), encoding="utf-8").read()
    server_md = open(os.path.join(ROOT, "docs/server.md"), encoding="utf-8").read()
    quoted = " ".join(span for line in server_md.splitlines() for span in line.split("`")[1::2])
    for method, path, flags in re.findall(r'\{"(\w+)", "([^"]*)", \w+, "\w+", ([A-Z_| 0]+)\}', routes):
        shown = path + "{id}" if "ROUTE_PREFIX" in flags else path
        if not re.search(r"(^|[\s(])" + re.escape(shown) + r"($|[\s),])", quoted):
            problems.append(f"docs/server.md: the route {method} {shown} (routes.c) is not named")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""check_layout.py — the source tree's structural rules, checked (tests/test_source_layout.sh).

  1. The quoted includes of engine/, server/, cli/ and include/ form a DAG: no file reaches
     itself. With a build directory (--objects DIR), also the modules of engine/, server/ and
     cli/: a .c file depends on the .c files defining the functions and data it uses (from the
     object files' symbols), and no module reaches itself. The .c files that share a private
     header (x_internal.h: the scheduler's, the config's, the Jinja interpreter's, the model's,
     the grammar's) are one module: they are one unit split into files. A template (.inc) is
     included one level deep: no .inc includes another .inc.
  2. The server's layers: server/runtime/ includes nothing from server/api/ and never
     <microhttpd.h> (the scheduler and the stores know no HTTP).
     In server/api/, only the transport (http.c and its libmicrohttpd entry points http_mhd.h,
     conn.c, origin.c, routes.c and their headers) reaches <microhttpd.h>, directly or through
     quoted includes: the endpoints answer through http.h, which knows no libmicrohttpd. The
     generation request's header (genreq.h) reaches neither http.h nor <microhttpd.h>: it knows no
     HTTP at all.
  3. docs/README.md's file map names every .c file of engine/, server/ and cli/.
  4. No function of engine/, server/ or cli/ is longer than 80 lines (LONG_OK lists the known
     exceptions being rewritten; an exception that is gone is simply ignored).
  5. docs/server.md names every path of the route table (server/api/routes.c) in backticks:
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
# every folder of server/ is an include directory of the server (CMakeLists.txt's SERVER_INCLUDE_DIRS)
SERVER_DIRS = sorted("server/" + d for d in os.listdir(os.path.join(ROOT, "server"))
                     if os.path.isdir(os.path.join(ROOT, "server", d)) and d != "web")
# the engine's include directories (CMakeLists.txt's ENGINE_INCLUDE_DIRS); include/ is everyone's
ENGINE_DIRS = ["engine", "engine/kernels"]
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', re.M)


MAX_FUNCTION_LINES = 80
LONG_OK = set()  # no exemptions: every function of engine/, server/ and cli/ is within the limit
FUNC_START = re.compile(r"^(?!typedef|struct\s+\w+\s*\{|static const|const |enum |union |#)[A-Za-z_][^;]*?\b(\w+)\s*\(")


def long_functions(path):
    """(name, first line, length) of every top-level function over MAX_FUNCTION_LINES lines."""
    lines = open(os.path.join(ROOT, path), encoding="utf-8", errors="replace").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FUNC_START.match(lines[i])
        if not m:
            i += 1
            continue
        j = i  # the signature may span lines: the body opens where a line ends with '{'
        # (a blank line first means no function: e.g. a row of macro calls, G_RUN(...))
        while j < len(lines) and lines[j].strip() and not lines[j].rstrip().endswith(("{", ";")):
            j += 1
        if j >= len(lines) or not lines[j].strip() or lines[j].rstrip().endswith(";"):
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and lines[k] != "}":
            k += 1
        if k - i + 1 > MAX_FUNCTION_LINES:
            out.append((m.group(1), i + 1, k - i + 1))
        i = k + 1
    return out


def sources(top, exts=(".c", ".h")):
    out = []
    for d, _, files in os.walk(os.path.join(ROOT, top)):
        out += [os.path.relpath(os.path.join(d, f), ROOT) for f in files if f.endswith(exts)]
    return sorted(out)


def resolve(src, name):
    """The repository path a quoted include of src names, or None (a public or system header)."""
    here = os.path.dirname(src)
    dirs = [here, "include"] + (SERVER_DIRS if src.startswith("server/") else []) + (
        ENGINE_DIRS if src.startswith("engine/") else [])
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
    """source file -> the source files whose symbols it uses, for engine/, server/ and cli/ objects."""
    objs = {}
    for d, _, files in os.walk(os.path.join(build, "CMakeFiles")):
        for f in files:
            if not f.endswith(".c.o"):
                continue
            m = re.search(r"/CMakeFiles/(attnd_engine|attnd_server|attnd)\.dir/((?:engine|server|cli)/.*)\.o$",
                          os.path.join(d, f))
            if m and os.path.isfile(os.path.join(ROOT, m.group(2))):  # not an object of a removed file
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
    unit = {src: internal_header(src) or src for src in objs}
    graph = {}
    for src, us in used.items():
        deps = {unit[defined[u]] for u in us if u in defined}
        graph.setdefault(unit[src], set()).update(deps - {unit[src]})
    return {m: sorted(d) for m, d in graph.items()}


# server/api/'s transport: the files that may see libmicrohttpd
TRANSPORT = {"server/api/" + stem + ext for stem in ("http", "http_mhd", "conn", "origin", "routes")
             for ext in (".c", ".h")}
# the headers that know no HTTP: neither http.h nor <microhttpd.h>, even through other headers
NO_HTTP = ("server/api/genreq.h",)


def reach(graph, system, f):
    """Every file f includes, directly or through other quoted includes, and every system header
    any of them includes."""
    seen, todo, sys_seen = set(), [f], set()
    while todo:
        g = todo.pop()
        if g in seen:
            continue
        seen.add(g)
        sys_seen.update(system.get(g, []))
        todo += graph.get(g, [])
    return seen - {f}, sys_seen


def http_layering(graph, system):
    """The transport rule and the no-HTTP headers' rule (2. above)."""
    problems = []
    for f in sorted(graph):
        if not f.startswith("server/api/") or f in TRANSPORT:
            continue
        files, headers = reach(graph, system, f)
        if "microhttpd.h" in headers:
            via = [g for g in sorted(files | {f}) if "microhttpd.h" in system.get(g, [])]
            problems.append(f"layering: {f} reaches <microhttpd.h> (through {', '.join(via)}); only the "
                            "transport (http.c, conn.c, origin.c, routes.c) may")
        if f in NO_HTTP and "server/api/http.h" in files:
            problems.append(f"layering: {f} reaches http.h (the generation request knows no HTTP)")
    return problems


def internal_header(src):
    """The x_internal.h a source file includes, directly or through its own headers (its module's
    private header), or None."""
    seen, todo = set(), [src]
    while todo:
        f = todo.pop(0)
        path = os.path.join(ROOT, f)
        if f in seen or not os.path.isfile(path):
            continue
        seen.add(f)
        for kind, name in INCLUDE.findall(open(path, encoding="utf-8", errors="replace").read()):
            p = resolve(f, name) if kind == '"' else None
            if p and os.path.basename(p).endswith("_internal.h"):
                return p
            if p:
                todo.append(p)
    return None


def main():
    problems = []
    if OBJECTS:
        graph = module_graph(OBJECTS)
        if not graph:
            problems.append(f"no engine, server or cli object files under {OBJECTS}")
        for loop in cycles(graph):
            problems.append("module circle: " + " -> ".join(loop + (loop[0],)))
    files = sources("engine", (".c", ".h", ".inc")) + sources("include") + sources("server") + sources("cli")
    graph, system = include_graph(files)
    for loop in cycles(graph):
        problems.append("include circle: " + " -> ".join(loop + (loop[0],)))
    for f in files:
        for g in graph[f] if f.endswith(".inc") else []:
            if g.endswith(".inc"):
                problems.append(f"template depth: {f} includes {g} (the includer should include both)")
    for f in files:
        if not f.startswith("server/runtime/"):
            continue
        for g in graph[f]:
            if g.startswith("server/api/"):
                problems.append(f"layering: {f} includes {g} (runtime must not know the API layer)")
        if "microhttpd.h" in system[f]:
            problems.append(f"layering: {f} includes <microhttpd.h> (runtime knows no HTTP)")
    problems += http_layering(graph, system)
    readme = open(os.path.join(ROOT, "docs/README.md"), encoding="utf-8").read()
    named = set(re.findall(r"`([A-Za-z0-9_./*]+\.c)`", readme))
    for f in sources("engine", (".c",)) + sources("server", (".c",)) + sources("cli", (".c",)):
        base = os.path.basename(f)
        if base not in named and f not in named and not any(f.endswith("/" + n) for n in named) and not any(
                "*" in n and re.fullmatch(n.replace(".", r"\.").replace("*", ".*"), base) for n in named):
            problems.append(f"docs/README.md: the file map does not name {f}")
    for f in sources("engine", (".c", ".inc")) + sources("server", (".c",)) + sources("cli", (".c",)):
        for name, line, n in long_functions(f):
            if (f, name) not in LONG_OK:
                problems.append(f"{f}:{line}: {name} is {n} lines (at most {MAX_FUNCTION_LINES})")
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

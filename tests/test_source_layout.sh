#!/usr/bin/env bash
# test_source_layout.sh — the source tree's structure, checked by scripts/check_layout.py: no
# include or symbol circle in engine/, server/ and cli/, no template (.inc) including another,
# runtime/ independent of the API layer, no function over 80 lines, every .c file on
# docs/README.md's map and every route in docs/server.md. Uses the build's object files.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${ATTND_SOURCE_DIR:-$here/..}
build=${ATTND_BUILD_DIR:-$src/build}
command -v python3 >/dev/null || { echo "not ok - python3 is not installed (scripts/dev.sh test installs it)"; exit 1; }
command -v nm >/dev/null || { echo "not ok - nm is not installed (binutils, with gcc)"; exit 1; }
if out=$(python3 "$src/scripts/check_layout.py" --objects "$build" "$src"); then
    echo "ok - includes and modules form a DAG, runtime/ knows no API, the maps are complete"
else
    printf 'not ok - %s\n' "$out" | sed '2,$s/^/not ok - /'
    exit 1
fi
# the checker itself catches what it claims to: a header circle and a missing map entry
tmp=$(mktemp -d /tmp/attnd-layout.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/server/runtime" "$tmp/server/api" "$tmp/server/process" "$tmp/cli" "$tmp/engine/kernels" "$tmp/docs"
printf '#include "b.h"\n' > "$tmp/server/api/a.h"
printf '#include "a.h"\n' > "$tmp/server/api/b.h"
printf '#include "q.h"\n' > "$tmp/engine/kernels/p.h" # engine/ and engine/kernels/ are include directories
printf '#include "p.h"\n' > "$tmp/engine/q.h"
printf '#include "y.inc"\n' > "$tmp/engine/kernels/x.inc"
printf '\n' > "$tmp/engine/kernels/y.inc"
printf '#include "a.h"\n' > "$tmp/server/runtime/r.c"
printf '{"GET", "/x", ep_x, "x", 0},\n' > "$tmp/server/api/routes.c"
{ echo 'int long_one(void) {'; for i in $(seq 90); do echo "    int v$i = $i;"; done; echo '    return 0;'; echo '}'; } > "$tmp/server/runtime/r.c.long"
cat "$tmp/server/runtime/r.c.long" >> "$tmp/server/runtime/r.c"
printf '`r.c`\n' > "$tmp/docs/README.md"
printf '`GET /y`\n' > "$tmp/docs/server.md"
out=$(python3 "$src/scripts/check_layout.py" "$tmp")
for want in "include circle: server/api/a.h -> server/api/b.h" "layering: server/runtime/r.c includes server/api/a.h" \
            "does not name server/api/routes.c" "route GET /x" "long_one is 93 lines" \
            "include circle: engine/kernels/p.h -> engine/q.h" \
            "template depth: engine/kernels/x.inc includes engine/kernels/y.inc"; do
    if grep -qF "$want" <<<"$out"; then echo "ok - a planted fault is found: $want"
    else echo "not ok - the checker missed: $want"; echo "$out"; exit 1; fi
done
# and a module circle from object files: a.c calls b.c, which calls a.c
obj="$tmp/build/CMakeFiles/attnd_server.dir/server/api"
mkdir -p "$obj"
printf 'int b(void); int a(void) { return b(); }\n' > "$tmp/server/api/a.c"
printf 'int a(void); int b(void) { return a(); }\n' > "$tmp/server/api/b.c"
cc -c "$tmp/server/api/a.c" -o "$obj/a.c.o" && cc -c "$tmp/server/api/b.c" -o "$obj/b.c.o" || { echo "not ok - cc"; exit 1; }
out=$(python3 "$src/scripts/check_layout.py" --objects "$tmp/build" "$tmp")
if grep -qF "module circle: server/api/a.c -> server/api/b.c" <<<"$out"; then
    echo "ok - a planted fault is found: a module circle"
else
    echo "not ok - the checker missed a module circle"; exit 1
fi
# the engine's too (generate_loop.c and spec.c called each other through engine_argmax)
obj="$tmp/build/CMakeFiles/attnd_engine.dir/engine"
mkdir -p "$obj"
printf 'int d(void); int c(void) { return d(); }\n' > "$tmp/engine/c.c"
printf 'int c(void); int d(void) { return c(); }\n' > "$tmp/engine/d.c"
cc -c "$tmp/engine/c.c" -o "$obj/c.c.o" && cc -c "$tmp/engine/d.c" -o "$obj/d.c.o" || { echo "not ok - cc"; exit 1; }
out=$(python3 "$src/scripts/check_layout.py" --objects "$tmp/build" "$tmp")
if grep -qF "module circle: engine/c.c -> engine/d.c" <<<"$out"; then
    echo "ok - a planted fault is found: a module circle in engine/"
else
    echo "not ok - the checker missed a module circle in engine/"; exit 1
fi

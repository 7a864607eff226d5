#!/usr/bin/env bash
# install.sh — install attnd's llama.cpp peer (node-llama-cpp, pinned in package-lock.json) into a
# writable folder outside the source tree, and print that folder.
#
#   tools/peers/llamacpp/install.sh [DIR]
#
# DIR defaults to $ATTND_PEER_DIR, then ${XDG_CACHE_HOME:-~/.cache}/attnd/peers/llamacpp.
# The scripts (*.mjs) are refreshed on every call; `npm ci` runs only when the lock file changed
# since the last install (about 15 s and ~730 MB; node-llama-cpp's prebuilt CPU libraries come
# with the npm packages, NODE_LLAMA_CPP_SKIP_DOWNLOAD keeps it from fetching or building more).
# Needs node >= 20 and npm, and the npm registry (or a filled npm cache) the first time.
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
dir=${1:-${ATTND_PEER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attnd/peers/llamacpp}}

command -v node >/dev/null && command -v npm >/dev/null || {
    echo "install.sh: node and npm are needed (apt-get install nodejs npm)" >&2
    exit 1
}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ "$dir" = "$src" ]; then
    echo "install.sh: refusing to install into the source tree; give another folder" >&2
    exit 1
fi
stamp=$dir/.installed-lock.sha256
want=$(sha256sum "$src/package-lock.json" | cut -d' ' -f1)
if [ ! -d "$dir/node_modules/node-llama-cpp" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "install.sh: installing node-llama-cpp into $dir ..." >&2
    rm -f "$stamp"
    cp "$src/package.json" "$src/package-lock.json" "$dir/"
    (cd "$dir" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$want" >"$stamp"
fi
cp "$src"/*.mjs "$dir/"
echo "$dir"

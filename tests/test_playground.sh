#!/usr/bin/env bash
# test_playground.sh — the web playground at GET / in headless Chromium (Debian's `chromium`,
# driven by `puppeteer-core`, installed once into the build directory as test_openai_client.sh
# installs `openai`): load, generate, the heatmap drawn, pickers, hover, chat, the API-key
# prompt; no console errors and no request leaving the machine (tests/js/playground.mjs).
# The screenshot is kept as playground.png in the build directory.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
need_node
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
    echo "FAIL: chromium is not installed (scripts/dev.sh test installs it)"
    exit 1
fi
build=${ATTND_BUILD_DIR:-$(dirname "$ATTND_BINARY")}
dir=$build/.npm-puppeteer
if [ ! -f "$dir/node_modules/puppeteer-core/package.json" ]; then
    mkdir -p "$dir"
    [ -f "$dir/package.json" ] || echo '{"name":"attnd-playground-test","private":true}' > "$dir/package.json"
    if ! (cd "$dir" && npm install --no-audit --no-fund --loglevel=error puppeteer-core >/dev/null); then
        echo "FAIL: npm install puppeteer-core failed (no registry access?)"
        exit 1
    fi
fi
echo "# puppeteer-core $(node -p "require('$dir/node_modules/puppeteer-core/package.json').version"), $("$CHROMIUM" --version)"
MODEL=$here/../models/attnd-sotu.gguf
start_server srv --model "$MODEL" --threads 2
start_server keyed --model "$MODEL" --threads 1 --api-key page-s3cret
node "$here/js/playground.mjs" "$dir/node_modules" "$CHROMIUM" "http://127.0.0.1:$srv_PORT" "$build/playground.png" \
    "http://127.0.0.1:$keyed_PORT" page-s3cret
rc=$?
stop_server srv || rc=1
stop_server keyed || rc=1
exit $rc

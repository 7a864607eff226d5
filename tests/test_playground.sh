#!/usr/bin/env bash
# test_playground.sh — the web playground at GET / in headless Chromium (Debian's `chromium`,
# driven by `puppeteer-core`, installed once into the build directory as test_openai_client.sh
# installs `openai`): load, generate, the heatmap drawn, pickers, hover, chat, the API-key
# prompt, an encoder's rows both ways (make_tiny's bert), the model picker of a server of two
# models, a hybrid model's signed DeltaNet rows (tiny_model's qwen35); no console errors and no
# request leaving
# the machine (tests/js/playground.mjs).
# The screenshots (after a generation, and a 200-token map) are written to the build directory;
# ATTND_UPDATE_SCREENSHOTS=1 also copies them to docs/, the only way the pictures there are made.
# The test fails when a picture in docs/ is older than the page (by commit, or by a change not
# yet committed), so the docs never show a page that is gone.
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
npm_packages .npm-puppeteer puppeteer-core
dir=$NPM_DIR
echo "# $("$CHROMIUM" --version)"
MODEL=$here/../models/attnd-sotu.gguf
start_server srv --model "$MODEL" --threads 2
start_server keyed --model "$MODEL" --threads 1 --api-key page-s3cret
"$build/make_tiny" "$TMP/bert.gguf" bert || fail "make_tiny bert"
start_server enc --model "$TMP/bert.gguf" --threads 1
mkdir -p "$TMP/models" && ln -s "$MODEL" "$TMP/models/sotu-a.gguf" && ln -s "$MODEL" "$TMP/models/sotu-b.gguf"
start_server multi --models-dir "$TMP/models" --no-models-cache --threads 1 --kv-budget-mb 16
"$build/tiny_model" qwen35 "$TMP/q35.gguf" || fail "tiny_model qwen35"
start_server hy --model "$TMP/q35.gguf" --threads 1
node "$here/js/playground.mjs" "$dir/node_modules" "$CHROMIUM" "http://127.0.0.1:$srv_PORT" "$build/playground.png" \
    "http://127.0.0.1:$keyed_PORT" page-s3cret "http://127.0.0.1:$enc_PORT" "http://127.0.0.1:$multi_PORT" \
    "http://127.0.0.1:$hy_PORT"
rc=$?
docs=$here/../docs
if [ $rc -eq 0 ] && [ "${ATTND_UPDATE_SCREENSHOTS:-0}" = 1 ]; then
    cp "$build/playground.png" "$build/playground-200.png" "$docs/" && echo "# screenshots copied to docs/"
fi
# Freshness: each picture's last commit is no older than the page's, and a page edited since its
# last commit comes with pictures edited too.
src=$here/..
page=server/web/playground.html
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    t_page=$(git -C "$src" log -1 --format=%ct -- "$page")
    for pic in docs/playground.png docs/playground-200.png; do
        t_pic=$(git -C "$src" log -1 --format=%ct -- "$pic")
        changed_page=$(git -C "$src" status --porcelain -- "$page")
        changed_pic=$(git -C "$src" status --porcelain -- "$pic")
        if [ -z "$t_pic" ] && [ -z "$changed_pic" ]; then
            echo "FAIL: $pic is missing (ATTND_UPDATE_SCREENSHOTS=1 ctest -R test_playground makes it)"; rc=1
        elif [ -z "$changed_pic" ] && { [ "${t_pic:-0}" -lt "${t_page:-0}" ] || [ -n "$changed_page" ]; }; then
            echo "FAIL: $pic is older than $page (ATTND_UPDATE_SCREENSHOTS=1 ctest -R test_playground)"; rc=1
        else
            echo "ok: $pic is as new as the page"
        fi
    done
else
    for pic in docs/playground.png docs/playground-200.png; do
        if [ ! "$src/$pic" -nt "$src/$page" ] && [ ! "$src/$pic" -ef "$src/$page" ]; then
            [ "$src/$pic" -ot "$src/$page" ] && { echo "FAIL: $pic is older than $page"; rc=1; }
        fi
    done
fi
stop_server srv || rc=1
stop_server keyed || rc=1
stop_server enc || rc=1
stop_server multi || rc=1
exit $rc

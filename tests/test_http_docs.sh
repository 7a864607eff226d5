# test_http_docs.sh — the examples of docs/server.md and README.md run against a real server:
# every ```sh block that calls the server or `attnd`, with the port substituted and the build's
# attnd first on PATH, must exit 0 (curl -f fails on HTTP errors) and every JSON answer must
# parse; where a `# => OUTPUT` line follows a curl line, the answer must be exactly that (on the
# shipped default model). Every other `attnd ...` line in README.md's code blocks runs too: with a
# model file the reader downloads first, the default model stands in; `attnd pull org/repo:QUANT`
# lines pull the default model from a local stand-in for the Hub (tests/fake_hub.py) that holds
# it under that name, so the README's hf:// references then load from the cache; `attnd serve`
# lines are checked with --print-config (flags and values valid) instead of serving. The README
# stays within 300 lines.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
src=${ATTND_SOURCE_DIR:-$here/..}
start_server docs --model "$MODEL" --threads 1 --embeddings # the embedding examples run on it
mkdir -p "$TMP/bin" && ln -sf "$ATTND_BINARY" "$TMP/bin/attnd"
export PATH="$TMP/bin:$PATH"
# the sh blocks that call the server on 127.0.0.1:8080, one file each, from docs/server.md and
# from README.md (where the lead folds the server docs in)
for doc in "$src/docs/server.md" "$src/README.md"; do
    [ -f "$doc" ] || continue
    awk -v dir="$TMP" -v tag="$(basename "$doc" .md)" '
        /^```(sh|bash|shell)$/ {n++; f=sprintf("%s/block-%s-%02d.sh", dir, tag, n); on=1; next}
        /^```$/ {on=0} on {print > f}' "$doc"
done
for b in "$TMP"/block-*.sh; do grep -q "curl .*127.0.0.1:8080\|^attnd " "$b" || rm -f "$b"; done
blocks=("$TMP"/block-*.sh)
[ -f "${blocks[0]}" ] && [ ${#blocks[@]} -ge 4 ] || fail "expected the curl examples in docs/server.md or README.md"
status=0
for b in "${blocks[@]}"; do
    sed -i "s/127.0.0.1:8080/127.0.0.1:$docs_PORT/g" "$b"
    if out=$(bash -e "$b" 2>&1); then
        # each non-SSE, non-metrics answer is a JSON object
        bad=$(printf '%s\n' "$out" | grep -v '^data: \|^event: \|^$\|^#\|^attnd_' | while read -r line; do
            printf '%s' "$line" | node -e 'JSON.parse(require("fs").readFileSync(0,"utf8"))' 2>/dev/null || echo "$line"; done)
        if [ -n "$bad" ]; then echo "not ok - $(basename "$b"): not JSON: ${bad:0:200}"; status=1
        else echo "ok - $(basename "$b") ($(head -c 60 "$b" | tr '\n' ' ')...)"; fi
    else
        echo "not ok - $(basename "$b") failed: ${out:0:300}"
        status=1
    fi
done
# a `# => OUTPUT` line right after a curl line shows that command's exact answer on the shipped
# model: run each such pair and compare
pairs=0
for doc in "$src/docs/server.md" "$src/README.md"; do
    [ -f "$doc" ] || continue
    while IFS= read -r -d '' cmd && IFS= read -r -d '' want; do
        got=$(bash -c "${cmd//127.0.0.1:8080/127.0.0.1:$docs_PORT}" 2>&1)
        pairs=$((pairs + 1))
        if [ "$got" = "$want" ]; then echo "ok - $(basename "$doc"): ${cmd:0:70}... answers as shown"
        else echo "not ok - $(basename "$doc"): ${cmd:0:70}: shown $want, got $got"; status=1; fi
    done < <(awk '/^curl / {c=$0; next} c != "" && /^# => / {printf "%s%c%s%c", c, 0, substr($0, 6), 0} {c=""}' "$doc")
done
[ $pairs -ge 4 ] || { echo "not ok - expected at least 4 '# =>' examples, found $pairs"; status=1; }

# the Hub the README's `attnd pull` lines reach: each org/repo:QUANT holds the default model
while read -r ref; do
    repo=${ref%%:*} tag=${ref#*:}
    mkdir -p "$TMP/hub/$repo" && cp "$MODEL" "$TMP/hub/$repo/model-$tag.gguf"
done < <(grep -o 'attnd pull [^ ]*' "$src/README.md" | awk '{print $3}')
python3 "$here/fake_hub.py" "$TMP/hub" "$TMP/hub.port" "$TMP/hub.log" &
hub_pid=$!
for _ in $(seq 1 100); do [ -s "$TMP/hub.port" ] && break; sleep 0.05; done
export HF_ENDPOINT="http://127.0.0.1:$(cat "$TMP/hub.port")" XDG_CACHE_HOME="$TMP/cache"

# every `attnd ...` line of README.md's other code blocks (the ```sh ones ran above)
n_cmd=0
while IFS= read -r line; do
    cmd=${line#\$ }
    cmd=${cmd%%#*}
    eval "argv=($cmd)" # the README's own quoting
    for i in "${!argv[@]}"; do # a model the reader downloads: the default model stands in
        m=${argv[$((i + 1))]:-}
        if [ "${argv[$i]}" = --model ] && [ ! -f "$m" ] && [ "${m#hf://}" = "$m" ]; then argv[$((i + 1))]=$MODEL; fi
    done
    [ "${argv[1]:-}" = serve ] && argv+=(--print-config)
    n_cmd=$((n_cmd + 1))
    if (cd "$TMP" && timeout 120 "${argv[@]}" >/dev/null 2>"$TMP/cmd.err"); then echo "ok - README: ${cmd:0:70}"
    else echo "not ok - README: $cmd: $(head -c 300 "$TMP/cmd.err")"; status=1; fi
done < <(awk '/^```/ {if (on) on = 0; else {on = 1; sh = /^```(sh|bash|shell)$/}; next} on && !sh && /^(\$ )?attnd / {print}' \
         "$src/README.md")
[ $n_cmd -ge 2 ] || { echo "not ok - expected attnd commands in README.md's code blocks, found $n_cmd"; status=1; }
kill "$hub_pid" 2>/dev/null
lines=$(wc -l < "$src/README.md")
[ "$lines" -le 300 ] && echo "ok - README.md is $lines lines" || { echo "not ok - README.md is $lines lines (at most 300)"; status=1; }

# docs/models.md's examples on a server of several models: its names stand for the default model
mkdir -p "$TMP/models-dir"
for name in coder small; do ln -sf "$MODEL" "$TMP/models-dir/$name.gguf"; done
start_server multi --models-dir "$TMP/models-dir" --no-models-cache --threads 1 --kv-budget-mb 16
awk -v dir="$TMP" '/^```sh$/ {n++; f=sprintf("%s/models-block-%02d.sh", dir, n); on=1; next} /^```$/ {on=0} on {print > f}' \
    "$src/docs/models.md"
n_models=0
for b in "$TMP"/models-block-*.sh; do
    [ -f "$b" ] || continue
    n_models=$((n_models + 1))
    sed -i "s/127.0.0.1:8080/127.0.0.1:$multi_PORT/g" "$b"
    if out=$(bash -e "$b" 2>&1) && printf '%s\n' "$out" | while read -r line; do
        printf '%s' "$line" | node -e 'JSON.parse(require("fs").readFileSync(0,"utf8"))' || exit 1; done; then
        echo "ok - docs/models.md: $(basename "$b")"
    else echo "not ok - docs/models.md: $(basename "$b"): ${out:0:300}"; status=1; fi
done
[ $n_models -ge 2 ] || { echo "not ok - expected the curl examples of docs/models.md"; status=1; }
stop_server multi || { echo "not ok - SIGTERM (several models)"; status=1; }

stop_server docs || { echo "not ok - SIGTERM"; status=1; }
exit $status

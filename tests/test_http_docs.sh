# test_http_docs.sh — the curl examples of docs/server.md run against a real server: every
# ```sh block, with the port substituted, must exit 0 (curl -f fails on HTTP errors) and every
# JSON answer must parse; where a `# => OUTPUT` line follows a curl line, the answer must be exactly
# that (on the shipped default model).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
src=${ATTND_SOURCE_DIR:-$here/..}
start_server docs --model "$MODEL" --threads 1
# the sh blocks that call the server on 127.0.0.1:8080, one file each, from docs/server.md and
# from README.md (where the lead folds the server docs in)
for doc in "$src/docs/server.md" "$src/README.md"; do
    [ -f "$doc" ] || continue
    awk -v dir="$TMP" -v tag="$(basename "$doc" .md)" '
        /^```(sh|bash|shell)$/ {n++; f=sprintf("%s/block-%s-%02d.sh", dir, tag, n); on=1; next}
        /^```$/ {on=0} on {print > f}' "$doc"
done
for b in "$TMP"/block-*.sh; do grep -q "curl .*127.0.0.1:8080" "$b" || rm -f "$b"; done
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

stop_server docs || { echo "not ok - SIGTERM"; status=1; }
exit $status

#!/usr/bin/env bash
# test_deploy_nginx.sh — scaling out: two `attnd serve` instances behind nginx configured with
# the shipped deploy/nginx/attnd.conf (ports substituted), all on loopback.
#   - sessions created through nginx (client-proposed ids, X-Session-Id header) live on exactly
#     one instance, and every turn of a session is answered by that instance (also when the id
#     is only in the path, /v1/sessions/{id});
#   - sessions spread over both instances;
#   - requests without a session id go to the instance with the fewest connections;
#   - after one instance is killed, new requests through nginx still succeed (passive health
#     check + next upstream), while the dead instance's sessions are gone (404 from the other:
#     each instance keeps its own sessions here; test_deploy_failover.sh shares them).
# nginx runs as a plain foreground process with a config in a temp dir, serving the default model.
# Fails with a message when nginx or curl is missing (scripts/dev.sh test installs them).
set -euo pipefail
source "$(dirname "$0")/nginx_lib.sh" # nginx_prereqs, nginx_config
nginx_prereqs curl

source "$(dirname "$0")/proc_lib.sh" # $T, PIDS, cleanup on exit
chmod 755 "$T" # nginx workers may run as another user
fail() {
    echo "FAIL: $*" >&2
    for f in "$T"/a.err "$T"/b.err "$T"/logs/error.log; do
        [ -f "$f" ] && { echo "--- $f (tail)" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}

USED=" "
free_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 12000)) # below Linux's ephemeral range (32768-60999): no outgoing
                                      # connection of this machine can be holding it by the time we bind
        [[ "$USED" == *" $p "* ]] && continue
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
        USED+="$p "
        echo "$p"
        return
    done
    echo "no free port" >&2
    exit 1
}
PA=$(free_port); USED+="$PA "
PB=$(free_port); USED+="$PB "
PN=$(free_port)

start_instance() { # name port
    mkdir -p "$T/$1-state"
    env -u ATTND_CONFIG "$ATTND_BINARY" serve --model "$MODEL" --host 127.0.0.1 --port "$2" --threads 1 \
        --state-dir "$T/$1-state" 2>"$T/$1.err" >/dev/null &
    PIDS+=($!)
    eval "PID_$1=$!"
}
start_instance a "$PA"
start_instance b "$PB"

# nginx: the shipped snippet with its example ports replaced by ours.
nginx_config "$PA" "$PB" "$PN" || fail "nginx configuration"
"$NGINX" -p "$T" -e "$T/logs/error.log" -c "$T/nginx.conf" 2>>"$T/logs/error.log" &
PIDS+=($!)

wait_health() { # port
    for _ in $(seq 600); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health" || true)" = 200 ] && return 0
        sleep 0.1
    done
    fail "127.0.0.1:$1 not healthy within 60 s"
}
wait_health "$PA"
wait_health "$PB"
wait_health "$PN"
echo "ok: 2 instances ($PA, $PB) behind nginx ($PN)"

# curl through nginx; prints "<status> <upstream port>" and keeps the body in $T/body.
via_nginx() { # method path [session-id] [json]
    local hdr=()
    [ -n "${3:-}" ] && hdr=(-H "X-Session-Id: $3")
    curl -s -o "$T/body" -D "$T/headers" -X "$1" "${hdr[@]}" -H 'Content-Type: application/json' \
        ${4:+--data "$4"} "http://127.0.0.1:$PN$2" -w '%{http_code}' >"$T/code" || true
    local up
    up=$(tr -d '\r' <"$T/headers" | sed -n 's/^X-Attnd-Upstream: .*:\([0-9]*\)$/\1/Ip' | tail -1)
    echo "$(cat "$T/code") ${up:-none}"
}
direct_status() { # port path
    curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1$2" || true
}

declare -A HOME_OF
N_SESSIONS=12
for i in $(seq $N_SESSIONS); do
    sid="deploy-test-session-$i-$RANDOM"
    read -r code up < <(via_nginx POST /v1/sessions "$sid" "{\"id\":\"$sid\"}")
    [[ "$code" == 20? ]] || { cat "$T/body"; fail "create session $sid via nginx: HTTP $code"; }
    [ "$up" = "$PA" ] || [ "$up" = "$PB" ] || fail "no X-Attnd-Upstream on session create"
    HOME_OF[$sid]=$up
    # Three turns; each must be answered by the instance that holds the session.
    for turn in 1 2 3; do
        read -r code up2 < <(via_nginx POST /v1/completions "$sid" \
            "{\"prompt\":\" turn $turn\",\"max_tokens\":2,\"temperature\":0,\"session_id\":\"$sid\"}")
        [ "$code" = 200 ] || { cat "$T/body"; fail "turn $turn of $sid: HTTP $code"; }
        [ "$up2" = "$up" ] || fail "turn $turn of $sid went to $up2, session lives on $up"
    done
    # Without the header, the id in the path /v1/sessions/{id} routes to the same instance.
    read -r code up2 < <(via_nginx GET "/v1/sessions/$sid" "")
    [ "$code" = 200 ] && [ "$up2" = "$up" ] || fail "GET /v1/sessions/$sid without header: HTTP $code via $up2 (home $up)"
    # The session exists on its instance only.
    other=$([ "$up" = "$PA" ] && echo "$PB" || echo "$PA")
    [ "$(direct_status "$up" "/v1/sessions/$sid")" = 200 ] || fail "$sid missing on its instance $up"
    [ "$(direct_status "$other" "/v1/sessions/$sid")" = 404 ] || fail "$sid also present on $other"
done
on_a=0; on_b=0
for sid in "${!HOME_OF[@]}"; do [ "${HOME_OF[$sid]}" = "$PA" ] && on_a=$((on_a + 1)) || on_b=$((on_b + 1)); done
echo "ok: $N_SESSIONS sessions x 3 turns, each pinned to one instance ($on_a on $PA, $on_b on $PB)"
[ $on_a -gt 0 ] && [ $on_b -gt 0 ] || fail "all sessions on one instance: the hash does not spread"

# Streaming through nginx: a complete SSE stream, ending in [DONE], with one data: line per event.
curl -sN -H 'Content-Type: application/json' "http://127.0.0.1:$PN/v1/completions" \
    --data '{"prompt":"Once upon","max_tokens":8,"temperature":0,"stream":true}' >"$T/stream" || fail "streamed request"
grep -q '^data: \[DONE\]' "$T/stream" || { cat "$T/stream"; fail "stream through nginx did not end with data: [DONE]"; }
[ "$(grep -c '^data: {' "$T/stream")" -ge 2 ] || { cat "$T/stream"; fail "stream through nginx has too few events"; }
echo "ok: streamed completion through nginx is complete"

# Without a session id: least connections. One request is held on a stopped (SIGSTOP) instance
# B, which accepts the connection but never answers; every short request meanwhile goes to A
# (round robin would send every other one to B, where it would hang until curl gives up).
kill -STOP "$PID_b"
held=""
for i in $(seq 4); do # ties alternate between the two: within two tries one is held by B
    curl -s -o /dev/null -H 'Content-Type: application/json' "http://127.0.0.1:$PN/v1/completions" --max-time 60 \
        --data '{"prompt":"Once","max_tokens":1,"temperature":0}' &
    p=$!
    sleep 0.5
    if kill -0 "$p" 2>/dev/null; then held=$p; break; fi
    wait "$p" || true
done
[ -n "$held" ] || { kill -CONT "$PID_b"; fail "no request reached the stopped instance $PB in 4 tries"; }
seen=""
for i in $(seq 6); do
    code=$(curl -s -o "$T/body" -D "$T/headers" -H 'Content-Type: application/json' --max-time 10 -w '%{http_code}' \
        "http://127.0.0.1:$PN/v1/completions" --data '{"prompt":"Once","max_tokens":1,"temperature":0}' || true)
    up=$(tr -d '\r' <"$T/headers" | sed -n 's/^X-Attnd-Upstream: .*:\([0-9]*\)$/\1/Ip' | tail -1)
    [ "$code" = 200 ] || { kill -CONT "$PID_b"; fail "anonymous request $i beside one held by $PB: HTTP $code (via ${up:-?})"; }
    seen+="$up "
done
kill -CONT "$PID_b"
wait "$held" || fail "the request held on the stopped instance did not complete after SIGCONT"
[ "$(echo $seen | tr ' ' '\n' | sort -u)" = "$PA" ] || fail "requests without a session id went to $seen while $PB held one: not least-connections"
echo "ok: requests without a session id go to the least busy instance ($seen)"

# Kill instance A. New work through nginx must keep succeeding on B.
{ kill -9 "$PID_a"; wait "$PID_a"; } 2>/dev/null || true
for i in $(seq 8); do
    read -r code up < <(via_nginx POST /v1/completions "" '{"prompt":"Once","max_tokens":2,"temperature":0}')
    [ "$code" = 200 ] || { cat "$T/body"; fail "request $i after killing $PA: HTTP $code"; }
    [ "$up" != "$PA" ] || fail "request $i answered by the dead instance?"
done
sid="deploy-test-after-$RANDOM"
read -r code up < <(via_nginx POST /v1/sessions "$sid" "{\"id\":\"$sid\"}")
[[ "$code" == 20? ]] || fail "new session after failover: HTTP $code"
read -r code up < <(via_nginx POST /v1/completions "$sid" \
    "{\"prompt\":\"Hi\",\"max_tokens\":2,\"temperature\":0,\"session_id\":\"$sid\"}")
[ "$code" = 200 ] || fail "new session's turn after failover: HTTP $code"
echo "ok: after killing $PA, new requests and new sessions succeed via $PB"

# The honest limit without a shared session store (test_deploy_failover.sh runs with one):
# sessions that lived on A are not on B.
for sid in "${!HOME_OF[@]}"; do
    [ "${HOME_OF[$sid]}" = "$PA" ] || continue
    read -r code up < <(via_nginx GET "/v1/sessions/$sid" "$sid")
    [ "$code" = 404 ] || fail "session $sid of the dead instance: HTTP $code (expected 404)"
    echo "ok: session of the dead instance is gone (404), as documented"
    break
done
echo "PASS"

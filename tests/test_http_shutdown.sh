# test_http_shutdown.sh — an honest shutdown (issue 51): the drain logs a countdown naming what it
# waits for, and a second SIGTERM exits at once (under 1 s) instead of waiting out
# shutdown_timeout_s. A request held open by its client (half a body) keeps the drain waiting.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
status=0
start_server s --model "$MODEL" --threads 1 --shutdown-timeout-s 30
# a request whose body never ends: in flight until the server gives up on it
exec 3<>"/dev/tcp/127.0.0.1/$s_PORT"
printf 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"prompt": "Once' >&3
sleep 0.3
kill -TERM "$s_PID"
seen=0
for _ in $(seq 50); do
    grep -q 'shutdown: waiting for 1 request to finish, [0-9]* s left' "$s_LOG" && { seen=1; break; }
    sleep 0.1
done
check "the drain logs a countdown ($(grep -o 'shutdown: waiting.*' "$s_LOG" | head -1))" test $seen = 1
t0=$(date +%s%N)
kill -TERM "$s_PID"
rc=0
wait "$s_PID" || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
check "a second SIGTERM exits in under 1 s (${ms} ms)" test "$ms" -lt 1000
check "... with status 1 (got $rc)" test "$rc" = 1
check "... and says so" grep -q 'SIGTERM received again; exiting without waiting' "$s_LOG"
exec 3>&-
exit $status

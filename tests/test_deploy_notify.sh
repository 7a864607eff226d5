#!/usr/bin/env bash
# test_deploy_notify.sh — `attnd serve` started the way deploy/attnd.service starts it (its
# ExecStart, with the environment systemd gives: NOTIFY_SOCKET, WATCHDOG_USEC/PID,
# STATE_DIRECTORY, CONFIGURATION_DIRECTORY holding attnd.conf) speaks the notify protocol:
#   - STATUS= lines while starting, READY=1 only once GET /health answers 200 (the listener
#     asks /health at the moment READY=1 arrives),
#   - WATCHDOG=1 keep-alives at half of WATCHDOG_USEC,
#   - SIGTERM -> STOPPING=1 and exit status 0,
#   - with stderr connected to the journal (JOURNAL_STREAM), every stderr line carries a syslog
#     priority prefix (<3>, <4>, <6>, <7>) for journald; elsewhere there is none (test_http_api).
# Runs the default model; fails with a message when curl or a C compiler is missing.
set -euo pipefail
: "${ATTND_BINARY:?}" "${ATTND_SOURCE_DIR:?}"
MODEL="$ATTND_SOURCE_DIR/models/attnd-sotu.gguf"
[ -f "$MODEL" ] || { echo "FAIL: $MODEL not found"; exit 1; }
command -v curl >/dev/null || { echo "FAIL: curl not installed (scripts/dev.sh test installs it)"; exit 1; }
CC=${CC:-cc}
command -v "$CC" >/dev/null || { echo "FAIL: no C compiler for the notify listener"; exit 1; }

source "$(dirname "$0")/proc_lib.sh" # $T, PIDS, cleanup on exit
fail() {
    echo "FAIL: $*" >&2
    echo "--- notify log" >&2; cat "$T/notify.log" >&2 || true
    echo "--- server stderr (tail)" >&2; tail -n 30 "$T/server.err" >&2 || true
    exit 1
}

# The service manager's side: a datagram socket that logs each message; when READY=1 arrives it
# immediately asks GET /health and logs the HTTP status it got (HEALTH_AT_READY=<code>).
cat >"$T/listen.c" <<'CEOF'
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
static int health(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) { close(fd); return 0; }
    const char *req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, req, strlen(req)) < 0) { close(fd); return 0; }
    char buf[64] = {0};
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    int code = 0;
    if (n > 12) sscanf(buf, "HTTP/1.%*d %d", &code);
    return code;
}
int main(int argc, char **argv) {
    if (argc != 4) return 2;
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", argv[1]);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) { perror("bind"); return 1; }
    FILE *out = fopen(argv[2], "w");
    int port = atoi(argv[3]);
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        if (n < 0) continue;
        buf[n] = '\0';
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
            fprintf(out, "%ld.%03ld %s\n", (long)ts.tv_sec, ts.tv_nsec / 1000000, line);
        if (strstr(buf, "READY=1")) fprintf(out, "%ld.%03ld HEALTH_AT_READY=%d\n", (long)ts.tv_sec,
                                             ts.tv_nsec / 1000000, health(port));
        fflush(out);
    }
}
CEOF
"$CC" -O1 -o "$T/listen" "$T/listen.c" || fail "compiling the notify listener"

free_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 12000)) # below Linux's ephemeral range (32768-60999): no outgoing
                                      # connection of this machine can be holding it by the time we bind
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
    fail "no free port"
}
PORT=$(free_port)

# What systemd would give the service: its directories and the notify/watchdog variables.
mkdir -p "$T/etc" "$T/state"
cat >"$T/etc/attnd.conf" <<CONF
# written by test_deploy_notify.sh
model = $MODEL
port = $PORT
threads = 1
CONF
EXEC=$(sed -n 's/^ExecStart=//p' "$ATTND_SOURCE_DIR/deploy/attnd.service")
[ -n "$EXEC" ] || fail "no ExecStart in deploy/attnd.service"
EXEC=${EXEC/\/usr\/local\/bin\/attnd/$ATTND_BINARY}
WATCHDOG_USEC=1000000 # keep-alives expected every 0.5 s

"$T/listen" "$T/notify.sock" "$T/notify.log" "$PORT" &
PIDS+=($!)
for _ in $(seq 50); do [ -S "$T/notify.sock" ] && break; sleep 0.1; done
[ -S "$T/notify.sock" ] || fail "listener did not start"

# WATCHDOG_PID must be the service's own pid: exec keeps the pid of this bash -c. As journald
# does, JOURNAL_STREAM names the device:inode of the stream stderr is connected to.
: >"$T/server.err"
JOURNAL=$(stat -c '%d:%i' "$T/server.err")
env -u ATTND_MODEL -u ATTND_PORT -u ATTND_CONFIG NOTIFY_SOCKET="$T/notify.sock" WATCHDOG_USEC=$WATCHDOG_USEC \
    STATE_DIRECTORY="$T/state" CONFIGURATION_DIRECTORY="$T/etc" JOURNAL_STREAM="$JOURNAL" \
    bash -c 'export WATCHDOG_PID=$$; exec '"$EXEC" 2>"$T/server.err" >"$T/server.out" &
SERVER=$!
PIDS+=($SERVER)

for _ in $(seq 600); do
    grep -q "READY=1" "$T/notify.log" 2>/dev/null && break
    kill -0 $SERVER 2>/dev/null || fail "server exited before READY=1"
    sleep 0.1
done
grep -q "READY=1" "$T/notify.log" || fail "no READY=1 within 60 s"
grep -q "HEALTH_AT_READY=200" "$T/notify.log" || fail "READY=1 arrived before /health answered 200"
grep -q "STATUS=" "$T/notify.log" || fail "no STATUS= line"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] || fail "/health not 200 after READY"
echo "ok: READY=1 after /health is 200"

# Watchdog: at half of WATCHDOG_USEC (0.5 s), so at least 3 keep-alives in 2.5 s.
before=$(grep -c "WATCHDOG=1" "$T/notify.log" || true)
sleep 2.5
after=$(grep -c "WATCHDOG=1" "$T/notify.log" || true)
[ $((after - before)) -ge 3 ] || fail "only $((after - before)) WATCHDOG=1 in 2.5 s (want >= 3)"
echo "ok: $((after - before)) watchdog keep-alives in 2.5 s"

kill -TERM $SERVER
status=0
for _ in $(seq 300); do kill -0 $SERVER 2>/dev/null || break; sleep 0.1; done
kill -0 $SERVER 2>/dev/null && fail "server still running 30 s after SIGTERM"
wait $SERVER || status=$?
[ $status -eq 0 ] || fail "exit status $status after SIGTERM (want 0)"
grep -q "STOPPING=1" "$T/notify.log" || fail "no STOPPING=1"
ready_line=$(grep -n "READY=1" "$T/notify.log" | head -1 | cut -d: -f1)
stop_line=$(grep -n "STOPPING=1" "$T/notify.log" | head -1 | cut -d: -f1)
[ "$stop_line" -gt "$ready_line" ] || fail "STOPPING=1 before READY=1"
echo "ok: SIGTERM -> STOPPING=1, exit 0"

# journald levels: every line on stderr must start with <N> (stderr is the "journal" here).
[ -s "$T/server.err" ] || fail "the server logged nothing on stderr"
bad=$(grep -v -E '^<[0-7]>' "$T/server.err" | grep -v '^$' | head -3 || true)
[ -z "$bad" ] || fail "stderr lines without a syslog priority prefix: $bad"
grep -q -E '^<6>' "$T/server.err" || fail "no info-level (<6>) line on stderr"
echo "ok: stderr lines carry syslog priorities"
echo "PASS"

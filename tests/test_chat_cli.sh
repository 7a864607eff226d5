#!/usr/bin/env bash
# test_chat_cli.sh — `attnd chat` as a person uses it, through a pseudo-terminal (python3's pty):
#   1. on the default model: three turns; the second turn's cached tokens cover the whole first
#      turn (its prompt and its reply), /clear starts the third from nothing; a line ending in '\'
#      and a """ block are one message each; /save writes the conversation and /load brings it
#      back (the next prompt holds it again); unknown /commands are named; /exit exits 0; Ctrl-C
#      ends a reply, not the chat;
#   2. --url against a fake server (python3's http.server): the HTTP/1.1 client reads a chunked
#      event stream, reasoning (reasoning_content, and "<think>" split over two chunks) is dimmed
#      on a terminal and plain through a pipe, usage's cached_tokens is reported, the session the
#      client made is sent with every turn and deleted at the end;
#   3. --url against a real `attnd serve`: the second turn is cached by the server's session.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/http_lib.sh"
status=0
BIN=$ATTND_BINARY

# ---- the pseudo-terminal driver: python3 chat_pty.py OUT_JSON -- ARGV... with a script on stdin:
# "say TEXT" types a line; "ctrl-c" types Ctrl-C; "expect REGEX" reads until the output matches
# (60 s); "turn" reads to the --verbose status line and records its numbers; "exit" waits for the
# exit status.
cat >"$TMP/chat_pty.py" <<'PY'
import json, os, pty, re, select, sys, time
out_path, argv = sys.argv[1], sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
buf, seen, turns, rc = b"", b"", [], None
def read_until(pat, timeout=60):
    global buf, seen
    deadline = time.time() + timeout
    while True:
        m = re.search(pat, buf)
        if m:
            seen += buf[:m.end()]
            got, buf = buf[:m.end()], buf[m.end():]
            return m, got
        r, _, _ = select.select([fd], [], [], max(0.0, deadline - time.time()))
        data = b""
        if r:
            try:
                data = os.read(fd, 4096)
            except OSError:
                pass
        if not data:
            sys.exit("waiting for %r: %s; got %r" % (pat, "end of output" if r else "timeout", buf))
        buf += data
for cmd in sys.stdin.read().splitlines():
    verb, _, arg = cmd.partition(" ")
    if verb == "say":
        os.write(fd, arg.encode() + b"\n")
    elif verb == "ctrl-c":
        os.write(fd, b"\x03")
    elif verb == "expect":
        read_until(arg.encode())
    elif verb == "turn":
        m, got = read_until(rb"\[prompt (\d+) tokens, (\d+) cached; reply (\d+) tokens \((\w+)\)")
        text = got[:m.start()].decode("utf-8", "replace")
        turns.append({"prompt": int(m[1]), "cached": int(m[2]), "reply": int(m[3]), "finish": m[4].decode(),
                      "text": text})
    elif verb == "exit":
        rc = os.waitpid(pid, 0)[1]
        rc = os.waitstatus_to_exitcode(rc)
json.dump({"turns": turns, "rc": rc, "output": (seen + buf).decode("utf-8", "replace")}, open(out_path, "w"))
PY
# field FILE EXPR: a Python expression over a JSON file (d; t = its "turns" when it has them)
field() {
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); t = d.get("turns"); print(eval(sys.argv[2]))' "$1" "$2"
}

# ---- 1. the default model: three turns, /clear, /save, /load ---------------------------------
SAVE=$TMP/conversation.json
python3 "$TMP/chat_pty.py" "$TMP/local.json" -- "$BIN" chat --verbose --temp 0 -n 12 -t 1 <<EOF
expect attnd chat: .*chat template.*\n
expect > 
say Tell me about the Army.
turn
expect > 
say What about\\
expect \.\.\. 
say the Navy?
turn
expect > 
say /save $SAVE
expect \(4 messages saved to
say /clear
expect \(the conversation is cleared\)
say """Hello,
expect \.\.\. 
say who are you?"""
turn
expect > 
say /frobnicate
expect /frobnicate: unknown command
say /load $SAVE
expect \(4 messages loaded from
say And the public debt?
turn
expect > 
say /exit
exit
EOF
[ $? = 0 ] && ok "attnd chat ran through the pseudo-terminal" || bad "the pty driver failed"
L=$TMP/local.json
if [ -s "$L" ]; then
    echo "# turns: $(field "$L" '[(t["prompt"], t["cached"], t["reply"]) for t in d["turns"]]')"
    check "four turns reported" test "$(field "$L" 'len(d["turns"])')" = 4
    check "turn 1 computes everything (0 cached)" test "$(field "$L" 'd["turns"][0]["cached"]')" = 0
    check "turn 1 streams a reply" test "$(field "$L" 'd["turns"][0]["reply"] > 0 and len(d["turns"][0]["text"].strip()) > 0')" = True
    # the KV holds turn 1's prompt and all its reply but the last token (never evaluated)
    check "turn 2's cached tokens cover turn 1's prompt and reply" \
        test "$(field "$L" 't[1]["cached"] >= t[0]["prompt"] + t[0]["reply"] - 1')" = True
    check "turn 2 computes only its new tokens" \
        test "$(field "$L" 't[1]["prompt"] - t[1]["cached"] < t[1]["prompt"] // 2')" = True
    check "/clear: turn 3 computes everything again" test "$(field "$L" 'd["turns"][2]["cached"]')" = 0
    check "/clear: turn 3's prompt is its own message only" \
        test "$(field "$L" 't[2]["prompt"] < t[0]["prompt"] + 8')" = True
    check "/load: turn 4's prompt holds the loaded conversation" \
        test "$(field "$L" 't[3]["prompt"] > t[1]["prompt"]')" = True
    check "/exit exits 0" test "$(field "$L" 'd["rc"]')" = 0
    check "no dim codes for a model without reasoning" test "$(field "$L" '"\x1b[2m" in d["output"]')" = False
fi
check "/save wrote the conversation" test "$(field "$SAVE" '[m["role"] for m in d["messages"]]')" = \
    "['user', 'assistant', 'user', 'assistant']"
check "a trailing backslash continues the message" test "$(field "$SAVE" 'd["messages"][2]["content"]')" = \
    "$(printf 'What about\nthe Navy?')"
# the """ block went into turn 3, which /load replaced; its prompt was counted above. Through a
# pipe: no prompt, no banner, the same conversation.
out=$(printf '"""Line one\nline two"""\n/save %s\n' "$TMP/block.json" | "$BIN" chat --temp 0 -n 4 -t 1 2>&1)
check "a \"\"\" block is one message of its lines" test "$(field "$TMP/block.json" 'd["messages"][0]["content"]')" = \
    "$(printf 'Line one\nline two')"
grep -q '^> ' <<<"$out" && bad "a prompt printed to a pipe" || ok "no prompt when stdin is not a terminal"

# Ctrl-C ends a long reply (up to the context's end, never an end-of-turn token), not the chat
python3 "$TMP/chat_pty.py" "$TMP/interrupt.json" -- "$BIN" chat --verbose --temp 0 --ignore-eos -t 1 <<EOF
expect > 
say Tell me about the Army.
expect Army\.\r\n
expect [A-Za-z]
ctrl-c
turn
expect > 
say /exit
exit
EOF
I=$TMP/interrupt.json
check "Ctrl-C ends the reply as interrupted" test "$(field "$I" 't[0]["finish"]')" = interrupted
check "Ctrl-C ends the reply early" test "$(field "$I" 't[0]["prompt"] + t[0]["reply"] < 512')" = True
check "the chat goes on after Ctrl-C (/exit exits 0)" test "$(field "$I" 'd["rc"]')" = 0

# ---- 2. --url against a fake server: chunked stream, reasoning dimmed -------------------------
cat >"$TMP/fake.py" <<'PY'
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
log = open(sys.argv[1], "a")
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def answer(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def body(self):
        n = int(self.headers.get("Content-Length", 0))
        b = self.rfile.read(n).decode()
        log.write(json.dumps({"method": self.command, "path": self.path, "body": b}) + "\n")
        log.flush()
        return b
    def do_GET(self):
        self.body()
        self.answer(200, {"object": "list", "data": [{"id": "fake-model"}]})
    def do_DELETE(self):
        self.body()
        self.answer(200, {"deleted": True})
    def do_POST(self):
        self.body()
        if self.path == "/v1/sessions":
            return self.answer(200, {"id": "s-42"})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        def delta(d, **kw):
            return "data: " + json.dumps({"choices": [dict({"index": 0, "delta": d}, **kw)], **kw.pop("extra", {})}) + "\n\n"
        events = [delta({"reasoning_content": "pondering"}), delta({"content": "Sure. <thi"}),
                  delta({"content": "nk>inner</think> done"}),
                  "data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 30, "completion_tokens": 5,
                                                   "prompt_tokens_details": {"cached_tokens": 7}}}) + "\n\n",
                  "data: [DONE]\n\n"]
        for e in events:  # one event split over two chunks too
            for part in (e[:7], e[7:]):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part.encode()), part.encode()))
        self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
PY
python3 "$TMP/fake.py" "$TMP/fake.log" >"$TMP/fake.port" &
FAKE=$!
SERVER_PIDS+=("$FAKE")
for _ in $(seq 100); do [ -s "$TMP/fake.port" ] && break; sleep 0.1; done
FPORT=$(head -1 "$TMP/fake.port")
python3 "$TMP/chat_pty.py" "$TMP/remote.json" -- "$BIN" chat --verbose --url "http://127.0.0.1:$FPORT" --temp 0.5 -n 9 <<EOF
expect fake-model on http://127.0.0.1
expect > 
say Hi there
turn
expect > 
say /exit
exit
EOF
R=$TMP/remote.json
check "--url: /exit exits 0" test "$(field "$R" 'd["rc"]')" = 0
check "--url: the turn reports the server's cached tokens" test "$(field "$R" 'd["turns"][0]["cached"]')" = 7
check "--url: reasoning_content is dimmed on a terminal" \
    test "$(field "$R" '"\x1b[2mpondering\x1b[0m\r\nSure. " in d["turns"][0]["text"]')" = True
check "--url: a <think> block split over two chunks is dimmed" \
    test "$(field "$R" '"\x1b[2m<think>inner</think>\x1b[0m done" in d["turns"][0]["text"]')" = True
out=$(printf 'Hi there\n' | "$BIN" chat --url "http://127.0.0.1:$FPORT" 2>/dev/null)
check "--url through a pipe: the text without escape codes" test "$out" = "$(printf 'pondering\nSure. <think>inner</think> done')"
req=$(grep '"/v1/chat/completions"' "$TMP/fake.log" | head -1)
check "--url: the turn streams in the session the client made" \
    test "$(python3 -c 'import json,sys; b = json.loads(json.loads(sys.argv[1])["body"]); print(b["stream"], b["session_id"], b["max_tokens"], b["temperature"], b["messages"])' "$req")" = \
    "True s-42 9 0.5 [{'role': 'user', 'content': 'Hi there'}]"
check "--url: the session is deleted at the end" test "$(grep -c '"DELETE", "path": "/v1/sessions/s-42"' "$TMP/fake.log")" = 2
"$BIN" chat --url "https://127.0.0.1:$FPORT" </dev/null >/dev/null 2>"$TMP/err"
check "--url https:// is refused with a message (exit 1)" test "$?:$(grep -c 'no TLS' "$TMP/err")" = "1:1"

# ---- 3. --url against attnd serve: the session keeps the KV --------------------------------------
start_server real --model "$MODEL" --threads 1
out=$(printf 'Tell me about the Army.\nWhat about the Navy?\n' |
      "$BIN" chat --verbose --temp 0 -n 8 --url "http://127.0.0.1:$real_PORT" 2>&1)
echo "$out" | sed 's/^/# /'
read -r p1 c1 r1 p2 c2 < <(grep -o '\[prompt [0-9]* tokens, [0-9]* cached; reply [0-9]*' <<<"$out" |
                             grep -o '[0-9]*' | tr '\n' ' ' | cut -d' ' -f1-5)
check "serve: turn 1 computes everything" test "${c1:-x}" = 0
check "serve: turn 2's cached tokens cover turn 1 (prompt $p1 + reply $r1)" test "${c2:-0}" -ge "$((p1 + r1 - 1))"
check "serve: the chat's session is gone after it" \
    test "$(curl -s "http://127.0.0.1:$real_PORT/v1/sessions")" = '{"object":"list","data":[]}'
stop_server real || bad "serve exits 0 on SIGTERM"
exit $status

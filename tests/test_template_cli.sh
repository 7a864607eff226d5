#!/usr/bin/env bash
# test_template_cli.sh — `attnd template` prints what the model sees: the default model's own
# ChatML template rendered from JSON variables (stdin or --vars), a template file with a fixed
# strftime_now clock (--now), and a template that raises exits 1 with its message and line.
set -u
BIN=${ATTND_BINARY:?ATTND_BINARY not set}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/check_lib.sh"
vars='{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi {{ x }}"}], "add_generation_prompt": true}'
got=$(printf '%s' "$vars" | "$BIN" template)
want=$(printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi {{ x }}<|im_end|>\n<|im_start|>assistant')
check "the default model's template, variables on stdin" "$got" "$want"   # $( ) drops the final newline

printf '%s' "$vars" >"$tmp/vars.json"
printf '{{ strftime_now("%%d %%B %%Y") }}: {{ messages | length }} messages\n' >"$tmp/date.jinja"
got=$("$BIN" template --template "$tmp/date.jinja" --vars "$tmp/vars.json" --now 2025-03-14T09:26:53)
check "--template with --vars and --now" "$got" "14 March 2025: 2 messages"

printf 'one\n{%% if messages[0].role != "user" %%}{{ raise_exception("Conversation must start with a user turn") }}{%% endif %%}' \
    >"$tmp/raise.jinja"
err=$("$BIN" template --template "$tmp/raise.jinja" --vars "$tmp/vars.json" 2>&1 >/dev/null)
check "a raising template exits 1" "$?" 1
check "with the template's message and line" "$err" "attnd template: template line 2: Conversation must start with a user turn"

printf '{%% for m in messages %%}' >"$tmp/bad.jinja"
err=$("$BIN" template --template "$tmp/bad.jinja" --vars "$tmp/vars.json" 2>&1 >/dev/null)
check "a template that does not parse exits 1" "$?" 1
[[ "$err" == *"template line 1: missing {% endfor %}"* ]]
check "naming what is missing" "$?" 0

echo '[1, 2]' | "$BIN" template --template "$tmp/date.jinja" >/dev/null 2>&1
check "variables that are not an object exit 1" "$?" 1
"$BIN" template --model x.gguf --template "$tmp/date.jinja" </dev/null >/dev/null 2>&1
check "--model and --template together are a usage error" "$?" 2

# a file without tokenizer.chat_template renders what serve would use (ChatML), not an error
notmpl=$(cd "$(dirname "$0")" && pwd)/data/tokenizers/llama-spm.gguf
got=$(printf '%s' "$vars" | "$BIN" template --model "$notmpl" 2>"$tmp/err")
check "no template in the file: serve's ChatML, exit 0" "$?/$got" "0/$want"
check "saying so on stderr" "$(grep -c 'has no tokenizer.chat_template; the built-in chatml template, as serve uses' "$tmp/err")" 1
exit $fail

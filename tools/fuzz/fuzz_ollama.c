/*
 * fuzz_ollama.c — (fuzzing only) /api/chat and /api/generate request parsing on arbitrary bytes,
 * and the NDJSON lines of a reply.
 *
 * The input's first byte picks the endpoint (odd: chat). A body that parses is taken through
 * oai_parse (accepted, or refused with a message); a refusal must give an error body that
 * serialises. The input's own bytes are then a model's reply, streamed in chunks cut by the
 * input: every line must be one JSON object, only the last one done, and the lines' content must
 * join to the whole answer's. A generate body with a suffix is laid out first (ollama_fim_prompt,
 * on a tiny byte-level vocabulary with FIM tokens): it must succeed, and a fill-in-the-middle
 * prompt must become token ids ending with the middle token.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "oai.h"
#include "ollama.h"
#include "settings.h"

static server_settings g_cfg; /* the defaults */
static tokenizer *g_tok;      /* with FIM tokens */

static void check_reply(bool chat_api, bool split, const json_t *tools, const char *text, size_t n, unsigned seed) {
    ollama_result run = {.model = "m", .created_at = "t"}, done = run;
    done.done_reason = "stop";
    /* the seed's low bits: the reply starts inside reasoning, a call ends it (Qwen3.5) */
    const toolcall_reading how = {.calls = tools != NULL, .tools = tools, .id_base = "f", .in_reasoning = seed & 1,
                                  .think_to_call = seed & 2};
    const toolcall_reading *read = split ? &how : NULL;
    ollama_stream st;
    FUZZ_CHECK(ollama_stream_init(&st, chat_api, read), "no stream");
    buf out;
    buf_init(&out);
    for (size_t i = 0; i < n;) {
        seed = seed * 1103515245u + 12345u;
        size_t k = 1 + (seed >> 16) % 9;
        if (k > n - i) k = n - i;
        ollama_stream_delta(&st, &run, text + i, k, &out);
        i += k;
    }
    ollama_stream_end(&st, &done, &out);
    json_t *whole = ollama_answer(&done, text, n, chat_api, read);
    fuzz_check_json(whole, "answer");
    buf joined;
    buf_init(&joined);
    bool ended = false;
    for (char *line = out.p, *nl; line && (nl = strchr(line, '\n')); line = nl + 1) {
        FUZZ_CHECK(!ended, "a line after the done line");
        json_t *o = json_loadb(line, (size_t)(nl - line), 0, NULL);
        FUZZ_CHECK(json_is_object(o), "a line is not a JSON object");
        const json_t *piece = chat_api ? json_object_get(json_object_get(o, "message"), "content") : json_object_get(o, "response");
        FUZZ_CHECK(json_is_string(piece), "a line without its text");
        buf_append(&joined, json_string_value(piece), json_string_length(piece));
        ended = json_is_true(json_object_get(o, "done"));
        json_decref(o);
    }
    FUZZ_CHECK(ended, "no done line");
    const json_t *want = chat_api ? json_object_get(json_object_get(whole, "message"), "content") : json_object_get(whole, "response");
    FUZZ_CHECK(json_string_length(want) == joined.len && !memcmp(json_string_value(want), joined.p ? joined.p : "", joined.len),
               "the lines' text differs from the whole answer's");
    buf_free(&joined);
    buf_free(&out);
    json_decref(whole);
    ollama_stream_free(&st);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    server_settings_default(&g_cfg);
    g_tok = fuzz_tiny_tokenizer(false, "qwen2");
    if (!g_tok) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool chat_api = data[0] & 1;
    json_t *body = fuzz_body(data, size, 1);
    if (!body) return 0;
    ollama_request r;
    const char *param = NULL;
    attnd_err err;
    if (ollama_parse(body, chat_api, &g_cfg, &r, &param, &err) != ATTND_OK) {
        json_t *e = json_pack("{s:s}", "error", err.msg);
        fuzz_check_json(e, "error body");
        json_decref(e);
    } else {
        bool fim = r.fim && !r.load_only;
        FUZZ_CHECK(ollama_fim_prompt(&r, g_tok, 64, 8, &err) == ATTND_OK, "the FIM layout failed: %s", err.msg);
        const json_t *ids = json_object_get(r.body, "prompt");
        FUZZ_CHECK(!fim || json_integer_value(json_array_get(ids, json_array_size(ids) - 1)) == tok_fim(g_tok, TOK_FIM_MID),
                   "a FIM prompt that does not end with the middle token");
        oai_request q;
        attnd_status st = oai_parse(r.body, r.chat, &g_cfg, 32000, &q, &param, &err);
        FUZZ_CHECK(st == ATTND_OK || err.msg[0], "oai_parse refused the body without a message");
        check_reply(chat_api, r.chat, st == ATTND_OK ? q.tools.tools : NULL, (const char *)data, size, (unsigned)size);
        oai_request_free(&q);
    }
    ollama_request_free(&r);
    json_decref(body);
    return 0;
}

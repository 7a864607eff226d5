/*
 * fuzz_anthropic.c — (fuzzing only) /v1/messages request parsing on arbitrary bytes, and the
 * content blocks of a reply.
 *
 * A body that parses is taken as far as the server takes it before generation: its chat body
 * through oai_parse (which must accept or refuse it with a message, never crash); a refusal must
 * give an Anthropic error body that serialises. The input's own bytes are then a model's reply
 * (reasoning markers, calls and all): streamed in chunks cut by the input, its events must come
 * in order (starts and stops paired, block indexes counting up, deltas only into the open block)
 * and as many blocks must stream as the whole Message has.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "anthropic.h"
#include "fuzz_util.h"
#include "oai.h"
#include "settings.h"

static server_settings g_cfg; /* the defaults */

/* Checks the stream's frames in sse against the whole Message m. */
static void check_events(const char *sse, const json_t *m) {
    int open = -1, started = 0, stops = 0;
    for (const char *p = sse; (p = strstr(p, "\ndata: "));) {
        p += 7;
        const char *end = strstr(p, "\n\n");
        FUZZ_CHECK(end != NULL, "a frame without its blank line");
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        FUZZ_CHECK(ev != NULL, "an event is not JSON");
        const char *type = json_string_value(json_object_get(ev, "type"));
        int at = (int)json_integer_value(json_object_get(ev, "index"));
        FUZZ_CHECK(type != NULL, "an event without its type");
        if (!strcmp(type, "content_block_start")) {
            FUZZ_CHECK(open == -1 && at == started, "block %d starts while %d is open (%d started)", at, open, started);
            open = at, started++;
        } else if (!strcmp(type, "content_block_delta")) {
            FUZZ_CHECK(at == open, "a delta into block %d while %d is open", at, open);
        } else if (!strcmp(type, "content_block_stop")) {
            FUZZ_CHECK(at == open, "block %d stops while %d is open", at, open);
            open = -1, stops++;
        } else if (!strcmp(type, "message_stop")) {
            FUZZ_CHECK(open == -1, "the message stops inside block %d", open);
        }
        json_decref(ev);
        p = end;
    }
    FUZZ_CHECK(started == stops, "%d blocks started, %d stopped", started, stops);
    FUZZ_CHECK((size_t)started == json_array_size(json_object_get(m, "content")), "%d blocks streamed, %zu in the Message",
               started, json_array_size(json_object_get(m, "content")));
}

/* The reply text[n] streamed in chunks cut by seed, against the whole Message. */
static void check_reply(const json_t *tools, const char *text, size_t n, unsigned seed) {
    anthropic_result res = {.id = "msg_f", .model = "m", .stop_reason = "end_turn", .input_tokens = 1};
    /* the seed's low bits: the reply starts inside reasoning, a call ends it (Qwen3.5) */
    const toolcall_reading how = {.calls = tools != NULL, .tools = tools, .id_base = "msg_f", .in_reasoning = seed & 1,
                                  .think_to_call = seed & 2};
    anthropic_stream st;
    FUZZ_CHECK(anthropic_stream_init(&st, &how), "no stream");
    buf out;
    buf_init(&out);
    anthropic_stream_begin(&st, &res, &out);
    for (size_t i = 0; i < n;) {
        seed = seed * 1103515245u + 12345u;
        size_t k = 1 + (seed >> 16) % 9;
        if (k > n - i) k = n - i;
        anthropic_stream_delta(&st, text + i, k, &out);
        i += k;
    }
    anthropic_stream_end(&st, &res, &out);
    json_t *m = anthropic_message(&res, text, n, &how);
    fuzz_check_json(m, "Message");
    check_events(out.p ? out.p : "", m);
    json_decref(m);
    buf_free(&out);
    anthropic_stream_free(&st);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    server_settings_default(&g_cfg);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *body = fuzz_body(data, size, 0);
    if (!body) return 0;
    anthropic_request r;
    const char *param = NULL;
    attnd_err err;
    if (anthropic_parse(body, &g_cfg, size & 1, &r, &param, &err) != ATTND_OK) {
        json_t *e = anthropic_error(400, err.msg);
        fuzz_check_json(e, "error body");
        json_decref(e);
    } else {
        oai_request q;
        attnd_status st = oai_parse(r.chat_body, true, &g_cfg, 32000, &q, &param, &err);
        FUZZ_CHECK(st == ATTND_OK || err.msg[0], "oai_parse refused the chat body without a message");
        check_reply(st == ATTND_OK ? q.tools.tools : NULL, (const char *)data, size, (unsigned)size);
        oai_request_free(&q);
    }
    anthropic_request_free(&r);
    json_decref(body);
    return 0;
}

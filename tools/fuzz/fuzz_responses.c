/*
 * fuzz_responses.c — (fuzzing only) /v1/responses request parsing on arbitrary bytes, and the
 * output items of a reply.
 *
 * A body that parses is taken as far as the server takes it before generation: the chat body
 * of the turn (with an earlier conversation built from the input itself), the conversation to
 * store, and a response object and its JSON text; a refusal must give an error body that
 * serialises. The input's own bytes are then a model's reply (reasoning markers, calls and all,
 * since a body's strings can hold them): streamed in chunks, its events must rebuild the final
 * object, each item's output_item.done equal to that item, items added at the next index.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "oai.h"
#include "responses.h"
#include "settings.h"

/* Checks the stream's frames in sse[n] against the final output items. */
static void check_events(const char *sse, const json_t *out) {
    int added = 0;
    for (const char *p = sse; (p = strstr(p, "\ndata: "));) {
        p += 7;
        const char *end = strstr(p, "\n\n");
        FUZZ_CHECK(end != NULL, "a frame without its blank line");
        json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
        FUZZ_CHECK(ev != NULL, "an event is not JSON");
        const char *type = json_string_value(json_object_get(ev, "type"));
        json_int_t at = json_integer_value(json_object_get(ev, "output_index"));
        if (type && !strcmp(type, "response.output_item.added")) FUZZ_CHECK(at == added++, "item added out of order");
        if (type && !strcmp(type, "response.output_item.done"))
            FUZZ_CHECK(json_equal(json_object_get(ev, "item"), json_array_get(out, (size_t)at)),
                       "item %lld's .done differs from the final object's", (long long)at);
        json_decref(ev);
        p = end;
    }
    FUZZ_CHECK((size_t)added == json_array_size(out), "%d items streamed, %zu in the object", added,
               json_array_size(out));
}

/* The reply text[n] streamed in chunks cut by seed, against the final object. */
static void check_reply(const responses_request *r, const char *text, size_t n, unsigned seed) {
    responses_result res = {.id = "resp_f", .msg_id = "msg_f", .model = "m", .status = "in_progress", .text = "",
                            .req = r, .open_reasoning = seed & 1};
    responses_stream st = {0};
    char *all = responses_stream_begin(&st, &res);
    FUZZ_CHECK(all != NULL, "no stream begin");
    size_t len = strlen(all);
    for (size_t i = 0; i < n;) {
        seed = seed * 1103515245u + 12345u;
        size_t k = 1 + (seed >> 16) % 9;
        if (k > n - i) k = n - i;
        char *f = responses_stream_delta(&st, &res, text + i, k);
        FUZZ_CHECK(f != NULL, "no frames for a delta");
        all = realloc(all, len + strlen(f) + 1);
        memcpy(all + len, f, strlen(f) + 1), len += strlen(f);
        free(f);
        i += k;
    }
    res.status = "completed", res.text = text, res.text_len = n;
    char *f = responses_stream_end(&st, &res);
    json_t *o = responses_object(&res), *conv = responses_conversation(&res, NULL);
    FUZZ_CHECK(f && o && conv, "no end, object or conversation");
    all = realloc(all, len + strlen(f) + 1);
    memcpy(all + len, f, strlen(f) + 1);
    check_events(all, json_object_get(o, "output"));
    free(f), free(all);
    json_decref(o), json_decref(conv);
    responses_stream_free(&st);
}

static server_settings g_cfg; /* the defaults */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    server_settings_default(&g_cfg);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *body = fuzz_body(data, size, 0);
    if (!body) return 0;
    responses_request r;
    const char *param = NULL;
    attnd_err err;
    if (responses_parse(body, &g_cfg, &r, &param, &err) != ATTND_OK) {
        json_t *e = oai_error(400, err.msg, param);
        fuzz_check_json(e, "error body");
        json_decref(e);
    } else {
        json_t *chat = responses_chat_body(&r, NULL);
        FUZZ_CHECK(chat != NULL, "no chat body for a valid request");
        responses_result res = {.id = "resp_f", .msg_id = "msg_f", .model = "m", .status = "completed",
                                .text = "reply", .text_len = 5, .req = &r};
        json_t *conv = responses_conversation(&res, NULL);
        FUZZ_CHECK(conv != NULL, "no conversation for a valid request");
        json_t *chat2 = responses_chat_body(&r, conv); /* a follow-up turn on top of it */
        fuzz_check_json(chat2, "chat body on an earlier conversation");
        json_decref(chat);
        json_decref(chat2);
        json_decref(conv);
        check_reply(&r, (const char *)data, size, (unsigned)size);
    }
    responses_request_free(&r);
    json_decref(body);
    return 0;
}

/*
 * fuzz_responses.c — (fuzzing only) /v1/responses request parsing on arbitrary bytes.
 *
 * A body that parses is taken as far as the server takes it before generation: the chat body
 * of the turn (with an earlier conversation built from the input itself), the conversation to
 * store, and a response object and its JSON text; a refusal must give an error body that
 * serialises.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "oai.h"
#include "responses.h"
#include "settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t jerr;
    json_t *body = json_loadb((const char *)data, size, 0, &jerr);
    if (!body) return 0;
    server_settings cfg;
    server_settings_default(&cfg);
    responses_request r;
    const char *param = NULL;
    attnd_err err;
    if (responses_parse(body, &cfg, &r, &param, &err) != ATTND_OK) {
        json_t *e = oai_error(400, err.msg, param);
        fuzz_check_json(e, "error body");
        json_decref(e);
    } else {
        json_t *chat = responses_chat_body(&r, NULL);
        FUZZ_CHECK(chat != NULL, "no chat body for a valid request");
        json_t *conv = responses_conversation(&r, NULL, "reply", 5);
        FUZZ_CHECK(conv != NULL, "no conversation for a valid request");
        json_t *chat2 = responses_chat_body(&r, conv); /* a follow-up turn on top of it */
        fuzz_check_json(chat2, "chat body on an earlier conversation");
        json_decref(chat);
        json_decref(chat2);
        json_decref(conv);
    }
    responses_request_free(&r);
    json_decref(body);
    return 0;
}

/*
 * fuzz_oai.c — (fuzzing only) OpenAI request parsing with chat-template rendering, on
 * arbitrary bytes.
 *
 * Byte 0 picks chat or completions and the chat family; the rest is the request body. A body
 * that parses is taken as far as the server takes it: chat messages rendered with the family's
 * template and tokenized with a tiny vocabulary that has every family's markers, prompts
 * tokenized, and error bodies built for refusals.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/tokenizer.h"
#include "chat.h"
#include "fuzz_util.h"
#include "oai.h"
#include "settings.h"

static tokenizer *g_tok;
static server_settings g_cfg; /* the defaults */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    g_tok = fuzz_tiny_tokenizer(true, NULL);
    if (!g_tok) abort();
    server_settings_default(&g_cfg);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    bool chat = data[0] & 1;
    chat_family fam = (chat_family)((data[0] >> 1) % CHAT_FAMILY_COUNT);
    json_t *body = fuzz_body(data, size, 1);
    if (!body) return 0;
    oai_request r;
    const char *param = NULL;
    attnd_err err;
    int nv = tok_n_vocab(g_tok);
    attnd_status st = oai_parse(body, chat, &g_cfg, nv, &r, &param, &err);
    if (st != ATTND_OK) {
        json_t *e = oai_error(400, err.msg, param);
        fuzz_check_json(e, "error body");
        json_decref(e);
    } else {
        int32_t *ids = NULL;
        size_t n = 0;
        if (chat) {
            FUZZ_CHECK(r.n_msgs > 0 && r.msgs, "chat request without messages");
            if (chat_encode(g_tok, fam, r.msgs, r.n_msgs, &ids, &n, &err) == ATTND_OK) free(ids);
            char *text = NULL;
            if (chat_render(fam, r.msgs, r.n_msgs, &text, &err) == ATTND_OK) free(text);
        } else {
            for (int k = 0; k < r.n_prompts; k++) {
                const oai_prompt *p = &r.prompts[k];
                if (p->text) {
                    if (tok_encode(g_tok, p->text, strlen(p->text), true, true, &ids, &n, &err) == ATTND_OK) free(ids);
                    continue;
                }
                for (int i = 0; i < p->n_ids; i++)
                    FUZZ_CHECK(p->ids[i] >= 0 && p->ids[i] < nv, "prompt id %d passed", p->ids[i]);
            }
        }
        for (int i = 0; i < r.n_bias; i++)
            FUZZ_CHECK(r.bias[i].id >= 0 && r.bias[i].id < nv, "logit_bias id %d passed", (int)r.bias[i].id);
        FUZZ_CHECK(r.max_tokens == -1 || (r.max_tokens >= 0 && r.max_tokens <= g_cfg.max_tokens_cap),
                   "max_tokens %d passed", r.max_tokens);
    }
    oai_request_free(&r);
    json_decref(body);
    return 0;
}

/*
 * test_server_ablate_api.c — the "ablate" request field (server/api/ablate_api.c): entries read
 * with their defaults, every kind of bad entry refused naming "ablate" and the entry, ranges
 * checked against a model's sizes, and the echo in the response.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "ablate_api.h"

static attnd_status parse(const char *text, engine_ablation_head **h, int *n, const char **param, attnd_err *err) {
    json_error_t je;
    json_t *b = json_loads(text, 0, &je);
    cr_assert(b, "bad test JSON: %s", je.text);
    *param = NULL;
    attnd_status st = ablate_api_parse(b, h, n, param, err);
    json_decref(b);
    return st;
}

Test(ablate_api, entries_are_read_with_zero_mode_and_scale_by_default) {
    engine_ablation_head *h;
    int n;
    const char *param;
    attnd_err err;
    cr_assert_eq(parse("{\"ablate\": [{\"layer\": 2, \"head\": 1}, {\"layer\": 0, \"head\": 3, \"mode\": \"mean\", "
                       "\"scale\": 0.5}]}",
                       &h, &n, &param, &err),
                 ATTND_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_assert(h[0].layer == 2 && h[0].head == 1 && h[0].mode == ENGINE_ABLATE_ZERO && h[0].scale == 0);
    cr_assert(h[1].layer == 0 && h[1].head == 3 && h[1].mode == ENGINE_ABLATE_MEAN && h[1].scale == 0.5f);
    json_t *echo = ablate_api_json(h, n);
    char *text = json_dumps(echo, JSON_COMPACT);
    cr_assert_str_eq(text, "[{\"layer\":2,\"head\":1,\"mode\":\"zero\",\"scale\":0.0},"
                           "{\"layer\":0,\"head\":3,\"mode\":\"mean\",\"scale\":0.5}]");
    free(text), json_decref(echo), free(h);
}

Test(ablate_api, absent_null_and_empty_are_no_ablation) {
    const char *bodies[] = {"{}", "{\"ablate\": null}", "{\"ablate\": []}"};
    for (size_t i = 0; i < ATTND_ARRAY_LEN(bodies); i++) {
        engine_ablation_head *h = (void *)1;
        int n = -1;
        const char *param;
        attnd_err err;
        cr_assert_eq(parse(bodies[i], &h, &n, &param, &err), ATTND_OK, "%s", bodies[i]);
        cr_assert(h == NULL && n == 0, "%s", bodies[i]);
    }
}

Test(ablate_api, bad_entries_are_refused_naming_the_field_and_entry) {
    struct { const char *body, *word; } bad[] = {
        {"{\"ablate\": 3}", "must be a list"},
        {"{\"ablate\": [7]}", "ablate[0]' must be an object"},
        {"{\"ablate\": [{\"head\": 1}]}", "needs 'layer'"},
        {"{\"ablate\": [{\"layer\": 0}]}", "needs 'head'"},
        {"{\"ablate\": [{\"layer\": -1, \"head\": 0}]}", "ablate[0].layer"},
        {"{\"ablate\": [{\"layer\": 0, \"head\": 1.5}]}", "ablate[0].head"},
        {"{\"ablate\": [{\"layer\": 0, \"head\": 0}, {\"layer\": 0, \"head\": 0, \"mode\": \"half\"}]}", "ablate[1].mode"},
        {"{\"ablate\": [{\"layer\": 0, \"head\": 0, \"scale\": \"0\"}]}", "ablate[0].scale"},
        {"{\"ablate\": [{\"layer\": 0, \"head\": 0, \"scale\": 1e9}]}", "ablate[0].scale"},
        {"{\"ablate\": [{\"layer\": 0, \"head\": 0, \"sacle\": 1}]}", "unknown key 'sacle'"},
        {"{\"ablate\": [{\"layer\": 1, \"head\": 2}, {\"layer\": 1, \"head\": 2}]}", "repeats ablate[0]"},
    };
    for (size_t i = 0; i < ATTND_ARRAY_LEN(bad); i++) {
        engine_ablation_head *h = NULL;
        int n = 0;
        const char *param;
        attnd_err err;
        cr_assert_eq(parse(bad[i].body, &h, &n, &param, &err), ATTND_ERR_INVALID, "%s", bad[i].body);
        cr_assert_str_eq(param, "ablate", "%s", bad[i].body);
        cr_assert(strstr(err.msg, bad[i].word), "%s: %s", bad[i].body, err.msg);
        cr_assert(h == NULL && n == 0);
    }
}

Test(ablate_api, ranges_are_checked_against_the_model) {
    model_info mi = {.n_layer = 6, .n_head = 4};
    engine_ablation_head h[] = {{.layer = 5, .head = 3}, {.layer = 6, .head = 0}};
    attnd_err err;
    cr_assert_eq(ablate_api_check(&mi, h, 1, &err), ATTND_OK);
    cr_assert_eq(ablate_api_check(&mi, h, 2, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "'ablate[1]'") && strstr(err.msg, "layer 6") && strstr(err.msg, "0..5"), "%s", err.msg);
    h[1] = (engine_ablation_head){.layer = 0, .head = 4, .mode = ENGINE_ABLATE_MEAN};
    cr_assert_eq(ablate_api_check(&mi, h, 2, &err), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "head 4") && strstr(err.msg, "0..3"), "%s", err.msg);
}

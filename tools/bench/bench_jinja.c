/*
 * bench_jinja.c — (benchmark, not a test) the cost of rendering a chat prompt with a real
 * template: a 20-message conversation with 5 tools, rendered by the Qwen3 and Llama 3.2
 * templates of tests/data/templates, as the server does for every chat request (variables
 * built from JSON, render, output segments). Prints the median and best time per rendering.
 *
 *     tools/bench/build.sh && build/bench_jinja [ITERATIONS]
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"
#include "jinja_json.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = '\0';
    fclose(f);
    return s;
}

/* 20 messages (system, 9 user/assistant pairs with tool calls and results among them, user)
 * and 5 tools. */
static json_t *conversation(void) {
    json_t *msgs = json_array(), *tools = json_array();
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", "You are a helpful assistant."));
    for (int i = 0; i < 9; i++) {
        char q[160], a[320];
        snprintf(q, sizeof(q), "Question %d: what is the weather and the time in city number %d, please?", i, i);
        snprintf(a, sizeof(a), "In city %d it is sunny, 21 degrees, and the local time is 14:%02d. Anything else?", i, i);
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", q));
        if (i % 3 == 1)
            json_array_append_new(msgs, json_pack("{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:{s:s}}}]}", "role", "assistant", "content", "",
                                                  "tool_calls", "id", "c1", "type", "function", "function", "name",
                                                  "get_weather", "arguments", "city", "Paris"));
        else
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", a));
    }
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", "Thanks, and tomorrow?"));
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof(name), "tool_%d", i);
        json_array_append_new(tools, json_pack("{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s,s:s},s:{s:s,s:[s,s]}},s:[s]}}}",
                                               "type", "function", "function", "name", name, "description",
                                               "Looks something up for the user", "parameters", "type", "object",
                                               "properties", "city", "type", "string", "description", "City name",
                                               "unit", "type", "string", "enum", "celsius", "fahrenheit", "required",
                                               "city"));
    }
    return json_pack("{s:o,s:o,s:b,s:s,s:s}", "messages", msgs, "tools", tools, "add_generation_prompt", 1,
                     "bos_token", "<|begin_of_text|>", "eos_token", "<|eot_id|>");
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    if (iters < 1) iters = 1;
    const char *names[] = {"qwen3", "llama3_2", "qwen3-coder_30b"};
    json_t *vars = conversation();
    double *t = malloc((size_t)iters * sizeof(*t));
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        char path[256];
        snprintf(path, sizeof(path), "tests/data/templates/%s.jinja", names[k]);
        char *src = read_file(path);
        jinja_template *tpl;
        attnd_err err;
        if (!src || jinja_parse(src, strlen(src), &tpl, &err) != ATTND_OK) {
            fprintf(stderr, "%s: %s\n", path, src ? err.msg : "cannot read (run from the repository root)");
            return 1;
        }
        size_t out_len = 0;
        for (int i = 0; i < iters; i++) {
            double t0 = now_s();
            jinja_ctx *c = jinja_ctx_create(NULL);
            jinja_set_json_vars(c, vars, JINJA_DATA);
            jinja_output o;
            if (jinja_render(c, tpl, &o, &err) != ATTND_OK) {
                fprintf(stderr, "%s: %s\n", names[k], err.msg);
                return 1;
            }
            out_len = o.len;
            jinja_output_free(&o);
            jinja_ctx_destroy(c);
            t[i] = now_s() - t0;
        }
        qsort(t, (size_t)iters, sizeof(*t), cmp);
        printf("%-16s 20 messages, 5 tools: %zu bytes; median %.1f us, best %.1f us (%d renderings)\n", names[k], out_len,
               t[iters / 2] * 1e6, t[0] * 1e6, iters);
        jinja_template_destroy(tpl);
        free(src);
    }
    free(t);
    json_decref(vars);
    return 0;
}

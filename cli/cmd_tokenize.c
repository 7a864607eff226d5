/*
 * cmd_tokenize.c — `attnd tokenize`, `attnd detokenize` and `attnd tokenize-bench`: the
 * tokenizer of a GGUF model on JSON lines, and its speed.
 *
 * Both converters read one JSON object per input line and write exactly one line per input
 * line, in order, so outputs can be pasted next to inputs; a line that cannot be processed
 * yields {"error": "..."} in its place and makes the exit status 1.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "attnd/tokenizer.h"
#include "attnd/utf8.h"
#include "commands.h"

static const char *USAGE_TOK =
    "usage: attnd tokenize [--model PATH] [--parse-special] [--no-bos] < in.jsonl > out.jsonl\n"
    "\n"
    "Reads lines {\"text\": \"...\"} and writes one line {\"ids\": [...]} per input line.\n"
    "  --model PATH       the GGUF file whose tokenizer.* metadata is used (default: shipped model)\n"
    "  --parse-special    also turn control-token strings in the text (\"<|im_start|>\") into their ids\n"
    "  --no-bos           do not add BOS/EOS even when the model's metadata asks for them\n";

static const char *USAGE_DETOK =
    "usage: attnd detokenize [--model PATH] [--render-special] < in.jsonl > out.jsonl\n"
    "\n"
    "Reads lines {\"ids\": [...]} and writes one line {\"text\": \"...\"} per input line.\n"
    "Bytes that do not form valid UTF-8 are written as U+FFFD.\n"
    "  --model PATH        the GGUF file (default: the shipped default model)\n"
    "  --render-special    write control tokens (\"<s>\", \"<|im_end|>\") as their text\n";

static const char *USAGE_BENCH =
    "usage: attnd tokenize-bench [--model PATH] [--file PATH] [--mb N] [--repeat N]\n"
    "\n"
    "Measures tokenization speed: tokenizes N MB of text (the file repeated as needed; by default\n"
    "the shipped license texts under /usr/share/common-licenses) and prints MB/s, tokens/s and\n"
    "bytes per token, then the decode speed.\n"
    "  --mb N       megabytes of text per run (default 4)\n"
    "  --repeat N   runs; the best is reported (default 3)\n"
    "  --hostile    instead, time pathological inputs (one long word, a run of spaces, random\n"
    "               bytes) at 1/10 and full size (--mb, default 10 here) and print the ratio:\n"
    "               about 10-13 means n log n, 100 would mean quadratic\n";

/* Opens the model and loads its tokenizer, or exits 1 with the error. */
static tokenizer *load_tokenizer(const char *cmd, const char *model) {
    char *dflt;
    model = cli_resolve_model(cmd, model, &dflt);
    gguf_file *f;
    attnd_err err;
    tokenizer *t = NULL;
    if (gguf_open(&f, model, &err) != ATTND_OK || tok_load(&t, f, &err) != ATTND_OK) {
        fprintf(stderr, "attnd %s: %s: %s\n", cmd, model, err.msg);
        free(dflt);
        exit(1);
    }
    gguf_close(f);
    free(dflt);
    return t;
}

/* Writes {"<name>": <value>} and a newline, spaced like the {"ids": [...]} lines; steals value. */
static void print_field_line(const char *name, json_t *value) {
    char *v = value ? json_dumps(value, JSON_ENCODE_ANY) : NULL;
    printf("{\"%s\": %s}\n", name, v ? v : "null");
    free(v);
    json_decref(value);
}

static void print_error_line(const char *msg) { print_field_line("error", json_string(msg)); }

/*
 * The JSON-lines loop shared by tokenize and detokenize: reads stdin line by line, parses each
 * line and hands the object (or NULL when the line is not JSON) to fn, which prints one output
 * line. fn returns NULL on success or an error message, printed as {"error": "line N: ..."} in
 * the line's place. Returns the exit status: 1 when any line failed.
 */
typedef const char *(*line_fn)(void *ctx, json_t *in, char *msg, size_t msg_len);

static int each_json_line(size_t json_flags, line_fn fn, void *ctx) {
    char *line = NULL, msg[512], out[600];
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    long lineno = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        json_error_t jerr;
        json_t *in = json_loadb(line, (size_t)n, json_flags, &jerr);
        snprintf(msg, sizeof(msg), "%s", in ? "" : jerr.text);
        const char *problem = fn(ctx, in, msg, sizeof(msg));
        if (problem) {
            snprintf(out, sizeof(out), "line %ld: %s", lineno, problem);
            print_error_line(out);
            rc = 1;
        }
        json_decref(in);
    }
    free(line);
    return rc;
}

typedef struct tokenize_ctx {
    tokenizer *t;
    bool add_special, parse_special;
} tokenize_ctx;

/* {"text": "..."} -> {"ids": [...]} */
static const char *tokenize_line(void *ctx, json_t *in, char *msg, size_t msg_len) {
    tokenize_ctx *c = ctx;
    json_t *text = json_object_get(in, "text");
    if (!json_is_string(text)) {
        char why[256];
        snprintf(why, sizeof(why), "%s%s", *msg ? ": " : "", msg);
        snprintf(msg, msg_len, "expected {\"text\": \"...\"}%s", why);
        return msg;
    }
    int32_t *ids;
    size_t n_ids;
    attnd_err err;
    if (tok_encode(c->t, json_string_value(text), json_string_length(text), c->add_special, c->parse_special, &ids,
                   &n_ids, &err) != ATTND_OK) {
        snprintf(msg, msg_len, "%s", err.msg);
        return msg;
    }
    fputs("{\"ids\": [", stdout);
    for (size_t k = 0; k < n_ids; k++) printf(k ? ", %d" : "%d", ids[k]);
    fputs("]}\n", stdout);
    free(ids);
    return NULL;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL;
    bool parse_special = false, add_special = true;
    for (int i = 1; i < argc;) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE_TOK, stdout);
            return 0;
        } else if (cli_flag_value("tokenize", argc, argv, &i, "--model", &v)) {
            model = v;
        } else if (!strcmp(argv[i], "--parse-special")) {
            parse_special = true, i++;
        } else if (!strcmp(argv[i], "--no-bos")) {
            add_special = false, i++;
        } else {
            cli_usage_error("tokenize", "unknown option '%s'", argv[i]);
        }
    }
    tokenize_ctx c = {load_tokenizer("tokenize", model), add_special, parse_special};
    int rc = each_json_line(JSON_ALLOW_NUL, tokenize_line, &c);
    tok_destroy(c.t);
    return rc;
}

typedef struct detokenize_ctx {
    tokenizer *t;
    bool render_special;
} detokenize_ctx;

/* {"ids": [...]} -> {"text": "..."}; bytes that are not valid UTF-8 become U+FFFD (JSON text). */
static const char *detokenize_line(void *ctx, json_t *in, char *msg, size_t msg_len) {
    detokenize_ctx *c = ctx;
    json_t *arr = json_object_get(in, "ids");
    size_t n_ids = json_array_size(arr);
    int32_t *ids = malloc((n_ids ? n_ids : 1) * sizeof(int32_t));
    bool ok = json_is_array(arr) && ids;
    for (size_t k = 0; ok && k < n_ids; k++) {
        json_t *v = json_array_get(arr, k);
        ok = json_is_integer(v) && json_integer_value(v) >= INT32_MIN && json_integer_value(v) <= INT32_MAX;
        if (ok) ids[k] = (int32_t)json_integer_value(v);
    }
    const char *problem = NULL;
    char *text = NULL;
    size_t len;
    attnd_err err;
    if (!ok) {
        char why[256];
        snprintf(why, sizeof(why), "%s%s", *msg ? ": " : "", msg);
        snprintf(msg, msg_len, "expected {\"ids\": [integers]}%s", why);
        problem = msg;
    } else if (tok_decode(c->t, ids, n_ids, c->render_special, &text, &len, &err) != ATTND_OK) {
        snprintf(msg, msg_len, "%s", err.msg);
        problem = msg;
    } else {
        size_t vn;
        char *valid = utf8_sanitize(text, len, false, &vn);
        print_field_line("text", valid ? json_stringn(valid, vn) : json_string(""));
        free(valid);
    }
    free(text);
    free(ids);
    return problem;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL;
    bool render_special = false;
    for (int i = 1; i < argc;) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE_DETOK, stdout);
            return 0;
        } else if (cli_flag_value("detokenize", argc, argv, &i, "--model", &v)) {
            model = v;
        } else if (!strcmp(argv[i], "--render-special")) {
            render_special = true, i++;
        } else {
            cli_usage_error("detokenize", "unknown option '%s'", argv[i]);
        }
    }
    detokenize_ctx c = {load_tokenizer("detokenize", model), render_special};
    int rc = each_json_line(0, detokenize_line, &c);
    tok_destroy(c.t);
    return rc;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU time of this thread: on a machine shared with other jobs, wall time also counts the time
 * the scheduler gave to others, so both are reported. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Appends the whole file at path to *buf. */
static bool slurp(const char *path, char **buf, size_t *len, size_t *cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (*len + n > *cap) {
            *cap = (*len + n) * 2;
            char *nb = realloc(*buf, *cap);
            if (!nb) {
                fclose(f);
                return false;
            }
            *buf = nb;
        }
        memcpy(*buf + *len, chunk, n);
        *len += n;
    }
    fclose(f);
    return true;
}

/* Wall seconds to encode text[0..len) once (CPU seconds in *cpu); -1 on error. */
static double time_encode(const tokenizer *t, const char *text, size_t len, size_t *n_ids, double *cpu) {
    int32_t *ids;
    attnd_err err;
    double t0 = now_s(), c0 = cpu_s();
    if (tok_encode(t, text, len, false, false, &ids, n_ids, &err) != ATTND_OK) {
        fprintf(stderr, "attnd tokenize-bench: %s\n", err.msg);
        return -1;
    }
    double dt = now_s() - t0;
    *cpu = cpu_s() - c0;
    free(ids);
    return dt;
}

static int bench_hostile(const tokenizer *t, size_t len) {
    static const char *KINDS[] = {"one word 'aaa...'", "one word of random letters", "spaces", "random bytes"};
    char *text = malloc(len);
    if (!text) return 1;
    uint64_t rng = 0x9E3779B97F4A7C15ULL;
    for (size_t k = 0; k < ATTND_ARRAY_LEN(KINDS); k++) {
        for (size_t i = 0; i < len; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            text[i] = k == 0 ? 'a' : k == 1 ? (char)('a' + rng % 26) : k == 2 ? ' ' : (char)(rng >> 24);
        }
        size_t n_small, n_full;
        double cpu_small, cpu_full;
        double small = time_encode(t, text, len / 10, &n_small, &cpu_small);
        double full = time_encode(t, text, len, &n_full, &cpu_full);
        if (small < 0 || full < 0) {
            free(text);
            return 1;
        }
        printf("%-28s %6.2f MB: %7.3f s (cpu %.3f s, %zu tokens)   %5.2f MB: %7.3f s (cpu %.3f s)   cpu ratio %.1f\n",
               KINDS[k], len / 1e6, full, cpu_full, n_full, len / 10 / 1e6, small, cpu_small, cpu_full / cpu_small);
    }
    free(text);
    return 0;
}

int cmd_tokenize_bench(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    long long mb = 4, repeat = 3;
    bool hostile = false, mb_given = false;
    for (int i = 1; i < argc;) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE_BENCH, stdout);
            return 0;
        } else if (cli_flag_value("tokenize-bench", argc, argv, &i, "--model", &v)) {
            model = v;
        } else if (cli_flag_value("tokenize-bench", argc, argv, &i, "--file", &v)) {
            file = v;
        } else if (cli_flag_value("tokenize-bench", argc, argv, &i, "--mb", &v)) {
            mb = cli_parse_int("tokenize-bench", "--mb", v, 1, 1024);
            mb_given = true;
        } else if (!strcmp(argv[i], "--hostile")) {
            hostile = true, i++;
        } else if (cli_flag_value("tokenize-bench", argc, argv, &i, "--repeat", &v)) {
            repeat = cli_parse_int("tokenize-bench", "--repeat", v, 1, 100);
        } else {
            cli_usage_error("tokenize-bench", "unknown option '%s'", argv[i]);
        }
    }
    if (hostile) {
        tokenizer *t = load_tokenizer("tokenize-bench", model);
        int rc = bench_hostile(t, (size_t)(mb_given ? mb : 10) * 1000000);
        tok_destroy(t);
        return rc;
    }
    char *src = NULL;
    size_t src_len = 0, src_cap = 0;
    if (file) {
        if (!slurp(file, &src, &src_len, &src_cap)) {
            fprintf(stderr, "attnd tokenize-bench: cannot read %s\n", file);
            return 1;
        }
    } else {
        static const char *LICENSES[] = {"GPL-3", "LGPL-3", "GFDL-1.3", "Apache-2.0", "MPL-2.0", "Artistic", "GPL-2"};
        for (size_t k = 0; k < ATTND_ARRAY_LEN(LICENSES); k++) {
            char path[256];
            snprintf(path, sizeof(path), "/usr/share/common-licenses/%s", LICENSES[k]);
            slurp(path, &src, &src_len, &src_cap);
        }
    }
    if (!src_len) {
        fprintf(stderr, "attnd tokenize-bench: no text (give --file)\n");
        free(src);
        return 1;
    }
    size_t len = (size_t)mb << 20;
    char *text = malloc(len);
    if (!text) {
        free(src);
        return 1;
    }
    for (size_t k = 0; k < len; k += src_len) memcpy(text + k, src, len - k < src_len ? len - k : src_len);
    free(src);
    tokenizer *t = load_tokenizer("tokenize-bench", model);

    double best = 1e30, best_dec = 1e30, best_cpu = 1e30;
    size_t n_ids = 0;
    for (long long r = 0; r < repeat; r++) {
        int32_t *ids;
        attnd_err err;
        double t0 = now_s(), c0 = cpu_s();
        if (tok_encode(t, text, len, false, false, &ids, &n_ids, &err) != ATTND_OK) {
            fprintf(stderr, "attnd tokenize-bench: %s\n", err.msg);
            return 1;
        }
        double t1 = now_s(), c1 = cpu_s();
        char *out;
        size_t out_len;
        if (tok_decode(t, ids, n_ids, false, &out, &out_len, &err) != ATTND_OK) {
            fprintf(stderr, "attnd tokenize-bench: %s\n", err.msg);
            return 1;
        }
        double t2 = now_s();
        if (out_len != len || memcmp(out, text, len))
            fprintf(stderr, "attnd tokenize-bench: note: decode(encode(text)) differs from the text\n");
        free(out);
        free(ids);
        if (t1 - t0 < best) best = t1 - t0;
        if (c1 - c0 < best_cpu) best_cpu = c1 - c0;
        if (t2 - t1 < best_dec) best_dec = t2 - t1;
    }
    printf("encode: %.2f MB in %.3f s = %.1f MB/s (cpu time: %.1f MB/s), %.0f tokens/s, %.2f bytes/token (%zu tokens)\n",
           len / 1e6, best, len / 1e6 / best, len / 1e6 / best_cpu, n_ids / best, (double)len / (double)n_ids, n_ids);
    printf("decode: %.1f MB/s\n", len / 1e6 / best_dec);
    /* A prompt-sized text on its own (each call starts with an empty word cache). */
    size_t small = len < (128u << 10) ? len : (128u << 10), n_small = 0;
    double best_small = 1e30, best_small_cpu = 1e30;
    for (long long r = 0; r < repeat * 5; r++) {
        double cpu, dt = time_encode(t, text, small, &n_small, &cpu);
        if (dt < 0) return 1;
        if (dt < best_small) best_small = dt;
        if (cpu < best_small_cpu) best_small_cpu = cpu;
    }
    printf("encode, first %zu KiB alone (%zu tokens, a fresh call): %.1f MB/s (cpu time: %.1f MB/s)\n", small >> 10,
           n_small, small / 1e6 / best_small, small / 1e6 / best_small_cpu);
    free(text);
    tok_destroy(t);
    return 0;
}

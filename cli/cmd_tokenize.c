/*
 * cmd_tokenize.c — `attnd tokenize`, `attnd detokenize` and `attnd tokenize-bench`: the
 * tokenizer of a GGUF model on JSON lines, and its speed.
 *
 * Both speak the server's language: tokenize prints {"tokens": [...]} like POST /tokenize (same
 * defaults: no BOS, special-token text parsed), detokenize prints {"content": "..."} like POST
 * /detokenize. Each writes exactly one line per input line, in order, so outputs can be pasted
 * next to inputs; a line that cannot be processed yields {"error": "..."} in its place and makes
 * the exit status 1.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "attnd/tokenizer.h"
#include "attnd/utf8.h"
#include "commands.h"

static const char *USAGE_TOK =
    "usage: attnd tokenize [--model PATH] [--text TEXT | --jsonl] [--add-special] [--no-parse-special]\n"
    "                      [--with-pieces]\n"
    "\n"
    "Tokenizes TEXT, or else each line of stdin (without its newline), and prints one line per input:\n"
    "{\"tokens\": [...]}, the answer of the server's POST /tokenize, with the same defaults:\n"
    "  --model PATH         the GGUF file whose tokenizer.* metadata is used (default: shipped model)\n"
    "  --text TEXT          tokenize TEXT instead of reading stdin\n"
    "  --jsonl              stdin lines are /tokenize request bodies: {\"content\": \"...\", \"add_special\":\n"
    "                       bool, \"parse_special\": bool, \"with_pieces\": bool}; absent fields take the\n"
    "                       flags' values\n"
    "  --add-special        add BOS/EOS as the model's metadata asks (default: no, as /tokenize)\n"
    "  --no-parse-special   keep special-token text (\"<|im_start|>\") as plain text (default: parse it)\n"
    "  --with-pieces        print {\"id\": N, \"piece\": \"...\"} objects instead of bare ids\n"
    "A line that cannot be processed prints {\"error\": \"line N: ...\"} in its place; exit status 1.\n";

static const char *USAGE_DETOK =
    "usage: attnd detokenize [--model PATH] [--tokens 1,2,3] [--render-special]\n"
    "\n"
    "Turns token ids back into text: the ids of --tokens, or else of each stdin line, given either as\n"
    "a /detokenize request body {\"tokens\": [...]} or as plain ids (\"1 2 3\" or \"1,2,3\"). Prints\n"
    "one line {\"content\": \"...\"} per input, the answer of POST /detokenize. Bytes that do not\n"
    "form valid UTF-8 are written as U+FFFD.\n"
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
 * The line loop shared by tokenize and detokenize: reads stdin line by line (without the newline
 * or a CR before it) and hands each to fn, which prints one output line. fn returns NULL on
 * success or an error message, printed as {"error": "line N: ..."} in the line's place. Returns the
 * exit status: 1 when any line failed.
 */
typedef const char *(*line_fn)(void *ctx, const char *line, size_t len, char *msg, size_t msg_len);

static int each_line(line_fn fn, void *ctx) {
    char *line = NULL, msg[512], out[600];
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    long lineno = 0;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        if (n && line[n - 1] == '\n') n--;
        if (n && line[n - 1] == '\r') n--;
        msg[0] = '\0';
        const char *problem = fn(ctx, line, (size_t)n, msg, sizeof(msg));
        if (problem) {
            snprintf(out, sizeof(out), "line %ld: %s", lineno, problem);
            print_error_line(out);
            rc = 1;
        }
    }
    free(line);
    return rc;
}

typedef struct tokenize_ctx {
    tokenizer *t;
    bool add_special, parse_special, with_pieces, jsonl;
} tokenize_ctx;

/* Prints {"tokens": [...]} for text[0..len) (ids, or {"id","piece"} objects). */
static const char *tokenize_print(const tokenize_ctx *c, const char *text, size_t len, bool add_special,
                                  bool parse_special, bool with_pieces, char *msg, size_t msg_len) {
    int32_t *ids;
    size_t n_ids;
    attnd_err err;
    if (tok_encode(c->t, text, len, add_special, parse_special, &ids, &n_ids, &err) != ATTND_OK) {
        snprintf(msg, msg_len, "%s", err.msg);
        return msg;
    }
    json_t *arr = json_array();
    for (size_t k = 0; k < n_ids; k++) {
        if (!with_pieces) {
            json_array_append_new(arr, json_integer(ids[k]));
            continue;
        }
        const char *piece = tok_piece(c->t, ids[k]);
        size_t vn;
        char *valid = utf8_sanitize(piece ? piece : "", piece ? strlen(piece) : 0, false, &vn);
        json_array_append_new(arr, json_pack("{s:i, s:s%}", "id", (int)ids[k], "piece", valid ? valid : "", vn));
        free(valid);
    }
    free(ids);
    print_field_line("tokens", arr);
    return NULL;
}

/* Reads an optional boolean field of a /tokenize body into *out; false when it is not a boolean. */
static bool body_flag(json_t *body, const char *name, bool *out) {
    json_t *v = json_object_get(body, name);
    if (!v) return true;
    if (!json_is_boolean(v)) return false;
    *out = json_is_true(v);
    return true;
}

/* A plain text line, or with --jsonl a /tokenize body -> {"tokens": [...]} */
static const char *tokenize_line(void *ctx, const char *line, size_t len, char *msg, size_t msg_len) {
    tokenize_ctx *c = ctx;
    if (!c->jsonl) return tokenize_print(c, line, len, c->add_special, c->parse_special, c->with_pieces, msg, msg_len);
    json_error_t jerr;
    json_t *in = json_loadb(line, len, JSON_ALLOW_NUL, &jerr), *content = json_object_get(in, "content");
    bool as = c->add_special, ps = c->parse_special, wp = c->with_pieces;
    const char *problem = NULL;
    if (!json_is_string(content))
        problem = "expected {\"content\": \"...\"}";
    else if (!body_flag(in, "add_special", &as) || !body_flag(in, "parse_special", &ps) ||
             !body_flag(in, "with_pieces", &wp))
        problem = "add_special, parse_special and with_pieces must be booleans";
    if (problem) {
        snprintf(msg, msg_len, "%s%s%s", problem, in ? "" : ": ", in ? "" : jerr.text);
        json_decref(in);
        return msg;
    }
    problem = tokenize_print(c, json_string_value(content), json_string_length(content), as, ps, wp, msg, msg_len);
    json_decref(in);
    return problem;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL;
    tokenize_ctx c = {.parse_special = true};
    const cli_opt opts[] = {
        CLI_OPT_STR("--model", &model),
        CLI_OPT_STR("--text", &text),
        CLI_OPT_SET("--jsonl", &c.jsonl),
        CLI_OPT_SET("--add-special", &c.add_special),
        CLI_OPT_CLEAR("--no-parse-special", &c.parse_special),
        CLI_OPT_SET("--with-pieces", &c.with_pieces),
    };
    if (!cli_parse_opts("tokenize", USAGE_TOK, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    if (text && c.jsonl) cli_usage_error("tokenize", "--text and --jsonl do not go together");
    c.t = load_tokenizer("tokenize", model);
    int rc = 0;
    if (text) {
        char msg[512];
        const char *problem = tokenize_print(&c, text, strlen(text), c.add_special, c.parse_special, c.with_pieces,
                                             msg, sizeof msg);
        if (problem) fprintf(stderr, "attnd tokenize: %s\n", problem), rc = 1;
    } else {
        rc = each_line(tokenize_line, &c);
    }
    tok_destroy(c.t);
    return rc;
}
typedef struct detokenize_ctx {
    tokenizer *t;
    bool render_special;
} detokenize_ctx;

/* Parses "1 2 3", "1,2,3" or {"tokens": [1, 2, 3]} into a malloc'd array; NULL (msg set) when the
 * line is neither. */
static int32_t *parse_id_line(const char *line, size_t len, size_t *n_ids, char *msg, size_t msg_len) {
    size_t cap = len / 2 + 1, n = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids) return snprintf(msg, msg_len, "out of memory"), NULL;
    json_t *in = len && line[0] == '{' ? json_loadb(line, len, 0, NULL) : NULL, *arr = json_object_get(in, "tokens");
    if (len && line[0] == '{') {
        bool ok = json_is_array(arr) && json_array_size(arr) <= cap;
        for (size_t k = 0; ok && k < json_array_size(arr); k++) {
            json_t *v = json_array_get(arr, k);
            ok = json_is_integer(v) && json_integer_value(v) >= INT32_MIN && json_integer_value(v) <= INT32_MAX;
            if (ok) ids[n++] = (int32_t)json_integer_value(v);
        }
        json_decref(in);
        if (!ok) return free(ids), snprintf(msg, msg_len, "expected {\"tokens\": [integers]}"), NULL;
    } else {
        for (size_t p = 0; p < len;) {
            if (line[p] == ' ' || line[p] == ',' || line[p] == '\t') { p++; continue; }
            long long v = 0;
            size_t q = p;
            while (q < len && q - p < 10 && line[q] >= '0' && line[q] <= '9') v = v * 10 + (line[q++] - '0');
            if (q == p || v > INT32_MAX || (q < len && line[q] != ' ' && line[q] != ',' && line[q] != '\t'))
                return free(ids), snprintf(msg, msg_len, "expected token ids (\"1 2 3\") or {\"tokens\": [...]}"), NULL;
            ids[n++] = (int32_t)v;
            p = q;
        }
    }
    *n_ids = n;
    return ids;
}

/* ids -> {"content": "..."}; bytes that are not valid UTF-8 become U+FFFD (JSON text). */
static const char *detokenize_ids(const detokenize_ctx *c, const int32_t *ids, size_t n_ids, char *msg,
                                  size_t msg_len) {
    char *text = NULL;
    size_t len;
    attnd_err err;
    if (tok_decode(c->t, ids, n_ids, c->render_special, &text, &len, &err) != ATTND_OK) {
        snprintf(msg, msg_len, "%s", err.msg);
        return msg;
    }
    size_t vn;
    char *valid = utf8_sanitize(text, len, false, &vn);
    print_field_line("content", valid ? json_stringn(valid, vn) : json_string(""));
    free(valid);
    free(text);
    return NULL;
}

static const char *detokenize_line(void *ctx, const char *line, size_t len, char *msg, size_t msg_len) {
    size_t n_ids;
    int32_t *ids = parse_id_line(line, len, &n_ids, msg, msg_len);
    if (!ids) return msg;
    const char *problem = detokenize_ids(ctx, ids, n_ids, msg, msg_len);
    free(ids);
    return problem;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL;
    bool render_special = false;
    const cli_opt opts[] = {
        CLI_OPT_STR("--model", &model),
        CLI_OPT_STR("--tokens", &tokens),
        CLI_OPT_SET("--render-special", &render_special),
    };
    if (!cli_parse_opts("detokenize", USAGE_DETOK, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    int n_ids = 0;
    int32_t *ids = tokens ? cli_parse_ids("detokenize", "--tokens", tokens, &n_ids) : NULL;
    detokenize_ctx c = {load_tokenizer("detokenize", model), render_special};
    int rc = 0;
    if (ids) {
        char msg[512];
        const char *problem = detokenize_ids(&c, ids, (size_t)n_ids, msg, sizeof msg);
        if (problem) fprintf(stderr, "attnd detokenize: %s\n", problem), rc = 1;
    } else {
        rc = each_line(detokenize_line, &c);
    }
    free(ids);
    tok_destroy(c.t);
    return rc;
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
        if (!attnd_grow(buf, cap, *len + n, 1, 0)) {
            fclose(f);
            return false;
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
    double t0 = attnd_now_s(), c0 = cpu_s();
    if (tok_encode(t, text, len, false, false, &ids, n_ids, &err) != ATTND_OK) {
        fprintf(stderr, "attnd tokenize-bench: %s\n", err.msg);
        return -1;
    }
    double dt = attnd_now_s() - t0;
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

/* mb MiB of text: the file repeated, or (no file) the licence texts Debian ships. Owned by the
 * caller; NULL (after a message) when there is no text or no memory. */
static char *bench_text(const char *file, int mb) {
    char *src = NULL;
    size_t src_len = 0, src_cap = 0;
    if (file) {
        if (!slurp(file, &src, &src_len, &src_cap)) {
            fprintf(stderr, "attnd tokenize-bench: cannot read %s\n", file);
            return NULL;
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
        return NULL;
    }
    size_t len = (size_t)mb << 20;
    char *text = malloc(len);
    if (!text) {
        free(src);
        return NULL;
    }
    for (size_t k = 0; k < len; k += src_len) memcpy(text + k, src, len - k < src_len ? len - k : src_len);
    free(src);
    return text;
}

int cmd_tokenize_bench(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    int mb = 0, repeat = 3; /* mb 0: not given (4 MB of prose, 10 MB of hostile text) */
    bool hostile = false;
    const cli_opt opts[] = {
        CLI_OPT_STR("--model", &model),
        CLI_OPT_STR("--file", &file),
        CLI_OPT_INT("--mb", &mb, 1, 1024),
        CLI_OPT_SET("--hostile", &hostile),
        CLI_OPT_INT("--repeat", &repeat, 1, 100),
    };
    if (!cli_parse_opts("tokenize-bench", USAGE_BENCH, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    if (hostile) {
        tokenizer *t = load_tokenizer("tokenize-bench", model);
        int rc = bench_hostile(t, (size_t)(mb ? mb : 10) * 1000000);
        tok_destroy(t);
        return rc;
    }
    if (!mb) mb = 4;
    size_t len = (size_t)mb << 20;
    char *text = bench_text(file, mb);
    if (!text) return 1;
    tokenizer *t = load_tokenizer("tokenize-bench", model);

    double best = 1e30, best_dec = 1e30, best_cpu = 1e30;
    size_t n_ids = 0;
    for (int r = 0; r < repeat; r++) {
        int32_t *ids;
        attnd_err err;
        double t0 = attnd_now_s(), c0 = cpu_s();
        if (tok_encode(t, text, len, false, false, &ids, &n_ids, &err) != ATTND_OK) {
            fprintf(stderr, "attnd tokenize-bench: %s\n", err.msg);
            return 1;
        }
        double t1 = attnd_now_s(), c1 = cpu_s();
        char *out;
        size_t out_len;
        if (tok_decode(t, ids, n_ids, false, &out, &out_len, &err) != ATTND_OK) {
            fprintf(stderr, "attnd tokenize-bench: %s\n", err.msg);
            return 1;
        }
        double t2 = attnd_now_s();
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
    for (int r = 0; r < repeat * 5; r++) {
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

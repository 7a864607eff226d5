/*
 * cmd_bench.c — `attnd bench`: prefill and decode speed of attnd next to llama.cpp on the same
 * GGUF, in one run, as ratios; and ms/token along one long generation to show that a decode
 * step costs O(position) (linear growth, no recompute of the prefix).
 *
 * llama.cpp runs through the project's node-llama-cpp peer (tools/peers/llamacpp): --peer-dir names
 * an installed copy; otherwise the peer's install.sh installs it on first use into $ATTND_PEER_DIR or
 * ~/.cache/attnd/peers/llamacpp (quick when it is already there) and says where.
 * attnd and llama.cpp runs alternate, and each figure is the median of --reps runs, so a machine
 * whose load drifts affects both sides alike. A benchmark, not a test: it asserts nothing.
 */
#include <jansson.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attnd/engine.h"
#include "commands.h"

static const char *USAGE =
    "usage: attnd bench --model PATH [--threads 1] [--prompt-len 128] [--n 128] [--reps 3]\n"
    "                   [--kv-type f16|f32] [--peer-dir DIR | --no-peer] [--growth-len N | --no-growth]\n"
    "\n"
    "Prints attnd's prefill and decode tokens/s, the same for llama.cpp (node-llama-cpp peer) on the\n"
    "same GGUF and prompt, and their ratios; then ms/token at positions 64, 128, 256, ... of one long\n"
    "greedy generation.\n"
    "  --threads N       threads for both engines (default 1: stable on a shared machine)\n"
    "  --prompt-len P    prompt tokens for the prefill measurement (default 128)\n"
    "  --n N             tokens to generate for the decode measurement (default 128)\n"
    "  --reps R          runs per engine; medians are reported (default 3)\n"
    "  --kv-type T       KV cache type for both engines (default f16, llama.cpp's default)\n"
    "  --peer-dir DIR    an installed llama.cpp peer (tools/peers/llamacpp/install.sh DIR)\n"
    "  --no-peer         measure attnd only\n"
    "  --growth-len N    length of the long generation (default: the model's context, at most 2048)\n"
    "  --no-growth       skip the long generation\n";

typedef struct bench_opts {
    const char *model, *peer_dir;
    int threads, prompt_len, n_gen, reps, growth_len;
    bool no_peer, no_growth;
    kv_type kv;
} bench_opts;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Finds (or installs) the llama.cpp peer; NULL when unavailable (reason printed). The peer's
 * sources are tools/peers/llamacpp (installed next to the binary as share/attnd/peers/llamacpp);
 * its install.sh puts node-llama-cpp into $ATTND_PEER_DIR or ~/.cache/attnd/peers/llamacpp. */
static char *find_peer(const char *given) {
    char buf[4096];
    if (given) {
        snprintf(buf, sizeof(buf), "%.2000s/node_modules", given);
        if (is_dir(buf)) return strdup(given);
        fprintf(stderr, "attnd bench: --peer-dir %s has no node_modules (run tools/peers/llamacpp/install.sh DIR)\n",
                given);
        return NULL;
    }
    char src[PATH_MAX] = "", exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        snprintf(buf, sizeof(buf), "%.2000s/../share/attnd/peers/llamacpp/install.sh", exe);
        if (access(buf, X_OK) == 0) snprintf(src, sizeof(src), "%.2000s/../share/attnd/peers/llamacpp", exe);
    }
    if (!*src) snprintf(src, sizeof(src), "%s", ATTND_PEER_SOURCE_DIR);
    fprintf(stderr, "attnd bench: llama.cpp peer: %s/install.sh (installs node-llama-cpp once, ~30 s)\n", src);
    snprintf(buf, sizeof(buf), "'%.2000s/install.sh'", src);
    FILE *p = popen(buf, "r");
    char dir[PATH_MAX] = "";
    if (p && !fgets(dir, sizeof(dir), p)) dir[0] = '\0';
    if (!p || pclose(p) != 0 || !*dir) {
        fprintf(stderr, "attnd bench: installing the llama.cpp peer failed (give --peer-dir or --no-peer)\n");
        return NULL;
    }
    dir[strcspn(dir, "\n")] = '\0';
    return strdup(dir);
}

/* One llama.cpp run; false when it failed. */
static bool peer_run(const char *dir, const bench_opts *o, const char *ids, int n, int ctx, double *prefill_tps,
                     double *decode_tps) {
    /* the peer runs in its own directory: give it an absolute model path */
    char *model = realpath(o->model, NULL);
    if (!model) return false;
    size_t cap = strlen(ids) + strlen(model) + 2048;
    char *cmd = malloc(cap);
    snprintf(cmd, cap,
             "cd '%s' && node generate.mjs --model '%s' --tokens %s --n %d --threads %d --ctx %d --kv-type %s "
             "--json 2>/dev/null",
             dir, model, ids, n, o->threads, ctx, o->kv == KV_F32 ? "f32" : "f16");
    free(model);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p) return false;
    json_error_t je;
    json_t *j = json_loadf(p, JSON_DISABLE_EOF_CHECK, &je);
    int rc = pclose(p);
    bool ok = j && rc == 0;
    if (ok) {
        *prefill_tps = json_number_value(json_object_get(j, "prefill_tok_per_s"));
        *decode_tps = json_number_value(json_object_get(j, "decode_tok_per_s"));
    }
    json_decref(j);
    return ok;
}

typedef struct growth_log {
    double *t; /* (n) time at which token i was chosen */
    int n;
} growth_log;

static bool on_growth_token(void *user, int32_t id) {
    (void)id;
    growth_log *g = user;
    g->t[g->n++] = now_ms();
    return true;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = {.threads = 1, .prompt_len = 128, .n_gen = 128, .reps = 3, .kv = KV_F16};
    for (int i = 1; i < argc;) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (cli_flag_value("bench", argc, argv, &i, "--model", &v)) {
            o.model = v;
        } else if (cli_flag_value("bench", argc, argv, &i, "--threads", &v)) {
            o.threads = (int)cli_parse_int("bench", "--threads", v, 1, 1024);
        } else if (cli_flag_value("bench", argc, argv, &i, "--prompt-len", &v)) {
            o.prompt_len = (int)cli_parse_int("bench", "--prompt-len", v, 1, 1 << 16);
        } else if (cli_flag_value("bench", argc, argv, &i, "--n", &v)) {
            o.n_gen = (int)cli_parse_int("bench", "--n", v, 2, 1 << 16);
        } else if (cli_flag_value("bench", argc, argv, &i, "--reps", &v)) {
            o.reps = (int)cli_parse_int("bench", "--reps", v, 1, 100);
        } else if (cli_flag_value("bench", argc, argv, &i, "--growth-len", &v)) {
            o.growth_len = (int)cli_parse_int("bench", "--growth-len", v, 128, 1 << 20);
        } else if (cli_flag_value("bench", argc, argv, &i, "--peer-dir", &v)) {
            o.peer_dir = v;
        } else if (cli_flag_value("bench", argc, argv, &i, "--kv-type", &v)) {
            if (!strcmp(v, "f16")) o.kv = KV_F16;
            else if (!strcmp(v, "f32")) o.kv = KV_F32;
            else cli_usage_error("bench", "--kv-type: '%s' is not f16 or f32", v);
        } else if (!strcmp(argv[i], "--no-peer")) {
            o.no_peer = true;
            i++;
        } else if (!strcmp(argv[i], "--no-growth")) {
            o.no_growth = true;
            i++;
        } else {
            cli_usage_error("bench", "unknown option '%s'", argv[i]);
        }
    }
    char *dflt;
    o.model = cli_resolve_model("bench", o.model, &dflt);

    int rc = 1;
    attnd_err err;
    model *m = NULL;
    engine *e = NULL;
    kv_pool *pool = NULL;
    int32_t *prompt = NULL;
    char *ids = NULL, *peer = NULL;
    growth_log gl = {0};
    double *a_pre = NULL, *a_dec = NULL, *p_pre = NULL, *p_dec = NULL;
    if (model_load(&m, o.model, &err)) goto fail;
    const model_info *mi = model_info_get(m);
    if (o.prompt_len + o.n_gen > mi->n_ctx) {
        snprintf(err.msg, sizeof(err.msg), "--prompt-len %d + --n %d exceed the context of %d", o.prompt_len,
                 o.n_gen, mi->n_ctx);
        goto fail;
    }
    if (engine_create(&e, m, o.prompt_len, o.threads, &err)) goto fail;
    if (kv_pool_create(&pool, m, SIZE_MAX, o.kv, &err)) goto fail;

    /* A fixed pseudo-random prompt (BOS first when the id exists), the same for both engines. */
    prompt = malloc(sizeof(int32_t) * (size_t)o.prompt_len);
    ids = malloc((size_t)o.prompt_len * 12 + 1);
    if (!prompt || !ids) {
        snprintf(err.msg, sizeof(err.msg), "out of memory");
        goto fail;
    }
    uint64_t rng = 12345;
    size_t k = 0;
    for (int i = 0; i < o.prompt_len; i++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        prompt[i] = i == 0 ? 1 % mi->n_vocab : (int32_t)(3 + (rng >> 33) % (uint64_t)(mi->n_vocab - 3));
        k += (size_t)sprintf(ids + k, "%s%d", i ? "," : "", prompt[i]);
    }
    if (!o.no_peer) peer = find_peer(o.peer_dir);

    printf("model %s (%s, %d layers, embd %d, vocab %d), %d thread(s), KV %s, prompt %d, generate %d\n", o.model,
           mi->arch, mi->n_layer, mi->n_embd, mi->n_vocab, o.threads, o.kv == KV_F32 ? "f32" : "f16", o.prompt_len,
           o.n_gen);
    fflush(stdout);
    a_pre = calloc((size_t)o.reps, sizeof(double)), a_dec = calloc((size_t)o.reps, sizeof(double));
    p_pre = calloc((size_t)o.reps, sizeof(double)), p_dec = calloc((size_t)o.reps, sizeof(double));
    if (!a_pre || !a_dec || !p_pre || !p_dec) {
        snprintf(err.msg, sizeof(err.msg), "out of memory");
        goto fail;
    }
    int n_peer = 0;
    /* one untimed warm-up: page in the weights, start the thread pool */
    for (int r = -1; r < o.reps; r++) {
        kv_seq *s;
        if (kv_seq_create(&s, pool, &err)) goto fail;
        engine_gen g = {.n_predict = o.n_gen};
        engine_timings tm;
        int n_out;
        attnd_status st = engine_generate(e, s, prompt, o.prompt_len, &g, NULL, &n_out, &tm, &err);
        kv_seq_destroy(s);
        if (st) goto fail;
        if (r < 0) continue;
        a_pre[r] = o.prompt_len / (tm.prefill_ms / 1e3);
        a_dec[r] = tm.n_decode / (tm.decode_ms / 1e3);
        if (peer && peer_run(peer, &o, ids, o.n_gen, o.prompt_len + o.n_gen + 16, &p_pre[n_peer], &p_dec[n_peer]))
            n_peer++;
    }
    double ap = median(a_pre, o.reps), ad = median(a_dec, o.reps);
    printf("%-10s %14s %14s\n", "", "prefill tok/s", "decode tok/s");
    printf("%-10s %14.1f %14.1f\n", "attnd", ap, ad);
    if (n_peer) {
        double pp = median(p_pre, n_peer), pd = median(p_dec, n_peer);
        printf("%-10s %14.1f %14.1f\n", "llama.cpp", pp, pd);
        printf("%-10s %14.2f %14.2f   (attnd / llama.cpp, median of %d)\n", "ratio", ap / pp, ad / pd, n_peer);
    } else if (!o.no_peer) {
        printf("llama.cpp: not measured (peer unavailable or failed)\n");
    }
    fflush(stdout);

    if (!o.no_growth) {
        int len = o.growth_len ? o.growth_len : (mi->n_ctx < 2048 ? mi->n_ctx : 2048);
        if (len > mi->n_ctx) len = mi->n_ctx;
        gl.t = malloc(sizeof(double) * (size_t)len);
        double *steps = malloc(sizeof(double) * (size_t)len * o.reps); /* (reps, len) ms per step */
        double *win = malloc(sizeof(double) * 32 * (size_t)o.reps);
        if (!gl.t || !steps || !win) {
            free(steps), free(win);
            snprintf(err.msg, sizeof(err.msg), "out of memory");
            goto fail;
        }
        int n_steps = len;
        for (int r = 0; r < o.reps; r++) {
            kv_seq *s;
            if (kv_seq_create(&s, pool, &err)) {
                free(steps), free(win);
                goto fail;
            }
            /* Prompt: one token; then len - 1 decode steps. Token i is chosen right after
             * position i was evaluated, so t[i] - t[i-1] is the cost of the step at position i. */
            gl.n = 0;
            engine_gen g = {.n_predict = len - 1, .on_token = on_growth_token, .token_user = &gl};
            int n_out;
            attnd_status st = engine_generate(e, s, prompt, 1, &g, NULL, &n_out, NULL, &err);
            kv_seq_destroy(s);
            if (st) {
                free(steps), free(win);
                goto fail;
            }
            for (int i = 1; i < gl.n; i++) steps[(size_t)r * len + i] = gl.t[i] - gl.t[i - 1];
            n_steps = gl.n;
        }
        printf("\ndecode cost along one generation of %d tokens (ms/token: median of positions p-16..p+15 over "
               "%d runs):\n",
               n_steps, o.reps);
        printf("%8s %10s %26s\n", "position", "ms/token", "added ms per 1000 positions");
        double prev = 0;
        int prev_p = 0;
        for (int p = 64; p + 16 <= n_steps; p *= 2) {
            int nw = 0;
            for (int r = 0; r < o.reps; r++)
                for (int i = p - 16; i < p + 16; i++) win[nw++] = steps[(size_t)r * len + i];
            double ms = median(win, nw);
            if (prev_p) printf("%8d %10.4f %26.4f\n", p, ms, (ms - prev) / (p - prev_p) * 1000);
            else printf("%8d %10.4f %26s\n", p, ms, "");
            prev = ms, prev_p = p;
        }
        /* O(t) steps: ms/token = a + b*t, so the last column stays about constant (b). A step that
         * recomputed the prefix would cost O(t^2) and that column would double at each row. */
        free(steps), free(win);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "attnd bench: %s\n", err.msg);
out:
    free(a_pre), free(a_dec), free(p_pre), free(p_dec);
    free(gl.t);
    free(peer);
    free(ids);
    free(prompt);
    kv_pool_destroy(pool);
    engine_destroy(e);
    model_destroy(m);
    free(dflt);
    return rc;
}

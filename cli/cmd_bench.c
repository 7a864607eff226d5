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
 * tools/bench/tinyllama.sh drives it over model types, thread counts and prompt lengths.
 *
 * The machine's wall is measured in the same run (attnd/roofline.h): a read-bandwidth probe on 1
 * and on --threads threads before each attnd run, so probe and decode alternate and both are
 * medians; decode is then also GB/s of weights + KV read per token and a share of the probe at
 * the same thread count, and prefill a share of its kernel path's compute peak.
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

#include "attnd/cpuinfo.h"
#include "attnd/engine.h"
#include "attnd/roofline.h"
#include "commands.h"

static const char *USAGE =
    "usage: attnd bench [--model PATH] [--threads 1] [--prompt-len 128] [--n 128] [--reps 3]\n"
    "                   [--kv-type f16|f32|q8_0|q4_0] [--peer-dir DIR | --no-peer] [--growth-len N | --no-growth]\n"
    "                   [--probe-mib 1024 | --no-probe] [--json]\n"
    "\n"
    "Prints attnd's prefill and decode tokens/s, the same for llama.cpp (node-llama-cpp peer) on the\n"
    "same GGUF and prompt, and their ratios; then ms/token at positions 64, 128, 256, ... of one long\n"
    "greedy generation.\n"
    "  --model PATH      the GGUF file (default: the shipped default model)\n"
    "  --threads N       threads for both engines (default 1: stable on a shared machine)\n"
    "  --prompt-len P    prompt tokens for the prefill measurement (default 128)\n"
    "  --n N             tokens to generate for the decode measurement (default 128)\n"
    "  --reps R          runs per engine; medians are reported (default 3)\n"
    "  --kv-type T       KV cache type for both engines (default f16, llama.cpp's default)\n"
    "  --peer-dir DIR    an installed llama.cpp peer (tools/peers/llamacpp/install.sh DIR); without it\n"
    "                    the peer is installed from npm on first use (~730 MB), after saying so (and\n"
    "                    asking, on a terminal)\n"
    "  --no-peer         measure attnd only\n"
    "  --growth-len N    length of the long generation (default: the model's context, at most 2048)\n"
    "  --no-growth       skip the long generation\n"
    "  --probe-mib M     read-bandwidth probe buffer in MiB, far beyond the last-level cache (default 1024)\n"
    "  --no-probe        skip the bandwidth probe and the shares of the wall\n"
    "  --json            end with one JSON line of the medians (for tools/bench/tinyllama.sh)\n"
    "llama-bench's spellings work too: -m, -t, -p (--prompt-len), -n, -r (--reps).\n";

typedef struct bench_opts {
    const char *model, *peer_dir;
    int threads, prompt_len, n_gen, reps, growth_len, probe_mib;
    bool no_peer, no_growth, no_probe, json;
    kv_type kv;
} bench_opts;

/* What one run needs: the loaded model, an engine sized for the prompt, a cache pool, and the
 * prompt as ids and as the comma-separated list the peer takes. */
typedef struct bench_ctx {
    bench_opts o;
    model *m;
    engine *e;
    kv_pool *pool;
    int32_t *prompt; /* (prompt_len) */
    char *ids;       /* "id,id,..." of prompt */
    char *peer;      /* installed peer folder, or NULL when llama.cpp is not measured */
    roofline_probe *probe; /* the read-bandwidth probe's buffer, or NULL with --no-probe */
} bench_ctx;

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

/* The folder the peer's install.sh installs into when given none (its own rule). */
static void peer_target(char *out, size_t n) {
    const char *d = getenv("ATTND_PEER_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (d && *d) snprintf(out, n, "%s", d);
    else if (x && *x) snprintf(out, n, "%s/attnd/peers/llamacpp", x);
    else snprintf(out, n, "%s/.cache/attnd/peers/llamacpp", h ? h : ".");
}

/* Says what an install of the peer will do before it happens, and on a terminal asks; true to go
 * on (already installed, a yes, or no terminal to ask on). */
static bool peer_consent(void) {
    char dir[PATH_MAX], mod[PATH_MAX + 32];
    peer_target(dir, sizeof(dir));
    snprintf(mod, sizeof(mod), "%s/node_modules/node-llama-cpp", dir);
    if (is_dir(mod)) return true;
    fprintf(stderr, "attnd bench: llama.cpp is measured through node-llama-cpp (npm), which is not installed.\n"
                    "attnd bench: installing it from the npm registry into %s (~730 MB, 15-30 s);\n"
                    "attnd bench: --no-peer measures attnd alone, --peer-dir DIR uses another install.\n", dir);
    if (!isatty(STDIN_FILENO) || !isatty(STDERR_FILENO)) return true;
    fprintf(stderr, "Install it now? [Y/n] ");
    char line[16] = "";
    if (!fgets(line, sizeof(line), stdin) || line[0] == 'n' || line[0] == 'N') {
        fprintf(stderr, "attnd bench: not installing; run again with --no-peer to measure attnd alone\n");
        return false;
    }
    return true;
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
    if (!peer_consent()) return NULL;
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
static bool peer_run(const bench_ctx *c, int ctx, double *prefill_tps, double *decode_tps) {
    /* the peer runs in its own directory: give it an absolute model path */
    char *model = realpath(c->o.model, NULL);
    if (!model) return false;
    size_t cap = strlen(c->ids) + strlen(model) + strlen(c->peer) + 256;
    char *cmd = malloc(cap);
    if (!cmd) {
        free(model);
        return false;
    }
    snprintf(cmd, cap,
             "cd '%s' && node generate.mjs --model '%s' --tokens %s --n %d --threads %d --ctx %d --kv-type %s "
             "--json 2>/dev/null",
             c->peer, model, c->ids, c->o.n_gen, c->o.threads, ctx, kv_type_name(c->o.kv));
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

static bench_opts parse_args(int argc, char **argv) {
    bench_opts o = {.threads = 1, .prompt_len = 128, .n_gen = 128, .reps = 3, .kv = KV_F16, .probe_mib = 1024};
    const cli_opt opts[] = {
        CLI_OPT_STR("--model", &o.model),
        CLI_OPT_INT("--threads", &o.threads, 1, 1024), /* passed to llama.cpp too: no 0 here */
        CLI_OPT_INT("--prompt-len", &o.prompt_len, 1, 1 << 16),
        CLI_OPT_INT("--n", &o.n_gen, 2, 1 << 16),
        CLI_OPT_INT("--reps", &o.reps, 1, 100),
        CLI_OPT_INT("--growth-len", &o.growth_len, 128, 1 << 20),
        CLI_OPT_STR("--peer-dir", &o.peer_dir),
        CLI_OPT_KV("--kv-type", &o.kv),
        CLI_OPT_SET("--no-peer", &o.no_peer),
        CLI_OPT_SET("--no-growth", &o.no_growth),
        CLI_OPT_INT("--probe-mib", &o.probe_mib, 1, 1 << 20),
        CLI_OPT_SET("--no-probe", &o.no_probe),
        CLI_OPT_SET("--json", &o.json),
        /* llama-bench's spellings */
        CLI_OPT_ALIAS("-p", "--prompt-len"), CLI_OPT_ALIAS("--n-prompt", "--prompt-len"),
        CLI_OPT_ALIAS("--n-gen", "--n"), CLI_OPT_ALIAS("-r", "--reps"), CLI_OPT_ALIAS("--repetitions", "--reps"),
    };
    if (!cli_parse_opts("bench", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) exit(0);
    return o;
}

/* Loads the model, creates the engine and pool, and builds a fixed pseudo-random prompt (BOS
 * first), the same for both engines. */
static attnd_status bench_setup(bench_ctx *c, attnd_err *err) {
    attnd_status st;
    if ((st = model_load(&c->m, c->o.model, err))) return st;
    const model_info *mi = model_info_get(c->m);
    if (c->o.prompt_len + c->o.n_gen > mi->n_ctx)
        return attnd_fail(err, ATTND_ERR_INVALID, "--prompt-len %d + --n %d exceed the context of %d",
                          c->o.prompt_len, c->o.n_gen, mi->n_ctx);
    if ((st = engine_create(&c->e, c->m, c->o.prompt_len, c->o.threads, err))) return st;
    if ((st = kv_pool_create(&c->pool, c->m, SIZE_MAX, c->o.kv, err))) return st;
    if (!c->o.no_probe && (st = roofline_probe_create(&c->probe, (size_t)c->o.probe_mib << 20, err))) return st;
    int n = c->o.prompt_len;
    c->prompt = malloc(sizeof(int32_t) * (size_t)n);
    c->ids = malloc((size_t)n * 12 + 1);
    if (!c->prompt || !c->ids) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    uint64_t rng = 12345;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        c->prompt[i] = i == 0 ? 1 % mi->n_vocab : (int32_t)(3 + (rng >> 33) % (uint64_t)(mi->n_vocab - 3));
        k += (size_t)sprintf(c->ids + k, "%s%d", i ? "," : "", c->prompt[i]);
    }
    return ATTND_OK;
}

/* One attnd run of prompt + n_gen tokens in a fresh sequence. */
static attnd_status attnd_run(bench_ctx *c, double *prefill_tps, double *decode_tps, attnd_err *err) {
    kv_seq *s;
    attnd_status st = kv_seq_create(&s, c->pool, err);
    if (st) return st;
    engine_gen g = {.n_predict = c->o.n_gen};
    engine_timings tm;
    int n_out;
    st = engine_generate(c->e, s, c->prompt, c->o.prompt_len, &g, NULL, &n_out, &tm, err);
    kv_seq_destroy(s);
    if (!st) {
        *prefill_tps = c->o.prompt_len / (tm.prefill_ms / 1e3);
        *decode_tps = tm.n_decode / (tm.decode_ms / 1e3);
    }
    return st;
}

/* Decode time per token against the parameters a token reads ("active"): all of them but the
 * embedding table when the file has a separate output head (a token reads one row of it), and
 * for a Mixture of Experts not the (n_expert - used) unselected experts of each layer; so decode
 * cost can be seen to follow active, not total, parameters. */
static void print_params(const model *m, double attnd_tok_s, double peer_tok_s) {
    const model_info *mi = model_info_get(m);
    double total = (double)mi->n_params, active = roofline_active_params(m);
    printf("parameters: %.1f M total, %.1f M active per token", total / 1e6, active / 1e6);
    if (mi->n_expert) printf(" (%d of %d experts)", mi->n_expert_used, mi->n_expert);
    printf("\ndecode ms/token: attnd %.2f (%.3f ms per 100 M active, %.3f per 100 M total)", 1000 / attnd_tok_s,
           1000 / attnd_tok_s / (active / 1e8), 1000 / attnd_tok_s / (total / 1e8));
    if (peer_tok_s > 0) printf("; llama.cpp %.2f", 1000 / peer_tok_s);
    printf("\n");
}

/* The medians of measure_speed's runs. */
typedef struct bench_medians {
    double ap, ad, pp, pd; /* prefill and decode tok/s of attnd and of llama.cpp (0: not measured) */
    int n_peer;            /* llama.cpp runs that succeeded */
    double bw, bw1;        /* probe GB/s on --threads threads and on 1 (0 with --no-probe) */
} bench_medians;

/* What the wall makes of the medians: decode as bytes read per second and a share of the probe
 * at the same thread count, prefill as operations per second and a share of the path's peak. */
typedef struct bench_wall {
    double decode_bytes, prefill_ops; /* per token */
    double a_gbs, p_gbs, a_share, p_share;
    roofline_peak peak;
    double a_pre_share, p_pre_share; /* 0 when the path has no peak */
} bench_wall;

/* One probe between runs: best of 3 sweeps on --threads threads, and on 1 thread. */
static void probe_run(const bench_ctx *c, double *bw, double *bw1) {
    *bw = roofline_read_gbs(c->probe, c->o.threads, 3);
    *bw1 = c->o.threads == 1 ? *bw : roofline_read_gbs(c->probe, 1, 3);
}

static double share(double x, double of) { return of > 0 ? x / of : 0; }

/* Decode reads the weights and the KV cache of the positions before it: at the average
 * position of the measured decode, prompt_len + n_gen / 2. */
static bench_wall print_wall(const bench_ctx *c, const bench_medians *md) {
    bench_wall w = {.decode_bytes = roofline_decode_bytes(c->m, c->o.kv, c->o.prompt_len + c->o.n_gen / 2.0),
                    .prefill_ops = roofline_prefill_ops(c->m, c->o.prompt_len),
                    .peak = roofline_prefill_peak(c->m, c->o.prompt_len, c->o.threads)};
    w.a_gbs = md->ad * w.decode_bytes / 1e9, w.p_gbs = md->pd * w.decode_bytes / 1e9;
    w.a_share = share(w.a_gbs, md->bw), w.p_share = share(w.p_gbs, md->bw);
    w.a_pre_share = share(md->ap * w.prefill_ops / 1e9, w.peak.gops);
    w.p_pre_share = share(md->pp * w.prefill_ops / 1e9, w.peak.gops);
    double wb = roofline_weight_bytes(c->m);
    printf("decode reads %.2f MB/token (weights %.2f + KV %.3f at position %.0f)", w.decode_bytes / 1e6, wb / 1e6,
           (w.decode_bytes - wb) / 1e6, c->o.prompt_len + c->o.n_gen / 2.0);
    if (c->probe) {
        printf("\nread bandwidth (%s loads over %zu MiB, best of 3, median of %d probes between the runs): "
               "%.1f GB/s on 1 thread, %.1f on %d\n",
               roofline_read_isa(), roofline_probe_bytes(c->probe) >> 20, c->o.reps, md->bw1, md->bw, c->o.threads);
        printf("decode GB/s: attnd %.2f = %.1f %% of the %d-thread bandwidth", w.a_gbs, 100 * w.a_share, c->o.threads);
        if (md->n_peer) printf("; llama.cpp %.2f = %.1f %%", w.p_gbs, 100 * w.p_share);
    }
    printf("\nprefill %.3g ops/token; peak of %s", w.prefill_ops, w.peak.path);
    if (w.peak.gops > 0) {
        printf(": %.0f ops/cycle x %d core(s) x %.2f GHz = %.1f Gops/s; attnd %.1f %% of it", w.peak.ops_per_cycle,
               c->o.threads, w.peak.ghz, w.peak.gops, 100 * w.a_pre_share);
        if (md->n_peer) printf(", llama.cpp %.1f %%", 100 * w.p_pre_share);
    }
    printf("\n");
    return w;
}

static void print_json(const bench_ctx *c, const bench_medians *md, const bench_wall *w) {
    printf("{\"threads\": %d, \"prompt_len\": %d, \"n\": %d, \"reps\": %d, \"attnd_prefill\": %.2f, "
           "\"attnd_decode\": %.2f, \"llamacpp_prefill\": %.2f, \"llamacpp_decode\": %.2f, \"peer_runs\": %d, "
           "\"kernels\": \"%s\", \"decode_bytes\": %.0f, \"probe_gbs\": %.6g, \"probe_gbs_1\": %.6g, "
           "\"attnd_decode_gbs\": %.6g, \"attnd_decode_share\": %.6g, \"llamacpp_decode_gbs\": %.6g, "
           "\"llamacpp_decode_share\": %.6g, \"prefill_ops\": %.0f, \"peak_path\": \"%s\", \"peak_gops\": %.6g, "
           "\"attnd_prefill_share\": %.6g, \"llamacpp_prefill_share\": %.6g}\n",
           c->o.threads, c->o.prompt_len, c->o.n_gen, c->o.reps, md->ap, md->ad, md->pp, md->pd, md->n_peer,
           cpuinfo_isa(), w->decode_bytes, md->bw, md->bw1, w->a_gbs, w->a_share, w->p_gbs, w->p_share, w->prefill_ops,
           w->peak.path, w->peak.gops, w->a_pre_share, w->p_pre_share);
}

/* Alternating probe, attnd and llama.cpp runs (after one untimed attnd warm-up that pages in the
 * weights); prints medians and ratios, then what the wall makes of them. */
static attnd_status measure_speed(bench_ctx *c, attnd_err *err) {
    int reps = c->o.reps, n_peer = 0;
    double *v = calloc((size_t)reps * 6, sizeof(double));
    if (!v) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    double *a_pre = v, *a_dec = v + reps, *p_pre = v + 2 * reps, *p_dec = v + 3 * reps;
    double *bw = v + 4 * reps, *bw1 = v + 5 * reps; /* (reps) each */
    double scratch;
    attnd_status st = attnd_run(c, &scratch, &scratch, err);
    for (int r = 0; r < reps && !st; r++) {
        if (c->probe) probe_run(c, &bw[r], &bw1[r]);
        st = attnd_run(c, &a_pre[r], &a_dec[r], err);
        if (!st && c->peer &&
            peer_run(c, c->o.prompt_len + c->o.n_gen + 16, &p_pre[n_peer], &p_dec[n_peer]))
            n_peer++;
    }
    if (st) {
        free(v);
        return st;
    }
    bench_medians md = {.ap = median(a_pre, reps), .ad = median(a_dec, reps), .n_peer = n_peer,
                        .bw = median(bw, reps), .bw1 = median(bw1, reps)};
    md.pp = n_peer ? median(p_pre, n_peer) : 0, md.pd = n_peer ? median(p_dec, n_peer) : 0;
    printf("%-10s %14s %14s\n", "", "prefill tok/s", "decode tok/s");
    printf("%-10s %14.1f %14.1f\n", "attnd", md.ap, md.ad);
    if (n_peer) {
        printf("%-10s %14.1f %14.1f\n", "llama.cpp", md.pp, md.pd);
        printf("%-10s %14.2f %14.2f   (attnd / llama.cpp, median of %d)\n", "ratio", md.ap / md.pp, md.ad / md.pd,
               n_peer);
    } else if (!c->o.no_peer) {
        printf("llama.cpp: not measured (peer unavailable or failed)\n");
    }
    print_params(c->m, md.ad, n_peer ? md.pd : 0);
    bench_wall w = print_wall(c, &md);
    if (c->o.json) print_json(c, &md, &w);
    fflush(stdout);
    free(v);
    return ATTND_OK;
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

/* ms/token of the decode step at position p: the median of positions p-16..p+15 over all runs.
 * steps is (reps, len) ms per step; win has room for 32 * reps values. */
static double step_ms_at(const double *steps, double *win, int reps, int len, int p) {
    int nw = 0;
    for (int r = 0; r < reps; r++)
        for (int i = p - 16; i < p + 16; i++) win[nw++] = steps[(size_t)r * len + i];
    return median(win, nw);
}

/* Prints ms/token around positions 64, 128, 256, ..., and the cost at position 2000 relative to
 * position 100 (the long-context figure of tools/bench). */
static void print_growth(const double *steps, double *win, int reps, int len, int n_steps) {
    printf("\ndecode cost along one generation of %d tokens (ms/token: median of positions p-16..p+15 over "
           "%d runs):\n",
           n_steps, reps);
    printf("%8s %10s %26s\n", "position", "ms/token", "added ms per 1000 positions");
    double prev = 0;
    int prev_p = 0;
    for (int p = 64; p + 16 <= n_steps; p *= 2) {
        double ms = step_ms_at(steps, win, reps, len, p);
        if (prev_p) printf("%8d %10.4f %26.4f\n", p, ms, (ms - prev) / (p - prev_p) * 1000);
        else printf("%8d %10.4f %26s\n", p, ms, "");
        prev = ms, prev_p = p;
    }
    /* O(t) steps: ms/token = a + b*t, so the last column stays about constant (b). A step that
     * recomputed the prefix would cost O(t^2) and that column would double at each row. */
    if (n_steps >= 2016) {
        double a = step_ms_at(steps, win, reps, len, 100), b = step_ms_at(steps, win, reps, len, 2000);
        printf("decode at position 2000 / at position 100: %.4f / %.4f ms = %.2fx\n", b, a, b / a);
    }
}

/* One-token prompt, then len - 1 decode steps, reps times. Token i is chosen right after position
 * i was evaluated, so t[i] - t[i-1] is the cost of the step at position i. */
static attnd_status measure_growth(bench_ctx *c, attnd_err *err) {
    const model_info *mi = model_info_get(c->m);
    int reps = c->o.reps, len = c->o.growth_len ? c->o.growth_len : (mi->n_ctx < 2048 ? mi->n_ctx : 2048);
    if (len > mi->n_ctx) len = mi->n_ctx;
    growth_log gl = {.t = malloc(sizeof(double) * (size_t)len)};
    double *steps = calloc((size_t)len * reps, sizeof(double)); /* (reps, len) ms per step */
    double *win = malloc(sizeof(double) * 32 * (size_t)reps);
    attnd_status st = ATTND_OK;
    if (!gl.t || !steps || !win) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    int n_steps = len;
    for (int r = 0; r < reps && !st; r++) {
        kv_seq *s;
        if ((st = kv_seq_create(&s, c->pool, err))) break;
        gl.n = 0;
        engine_gen g = {.n_predict = len - 1, .on_token = on_growth_token, .token_user = &gl};
        int n_out;
        st = engine_generate(c->e, s, c->prompt, 1, &g, NULL, &n_out, NULL, err);
        kv_seq_destroy(s);
        for (int i = 1; !st && i < gl.n; i++) steps[(size_t)r * len + i] = gl.t[i] - gl.t[i - 1];
        n_steps = gl.n;
    }
    if (!st) print_growth(steps, win, reps, len, n_steps);
    free(gl.t), free(steps), free(win);
    return st;
}

int cmd_bench(int argc, char **argv) {
    bench_ctx c = {.o = parse_args(argc, argv)};
    char *dflt;
    c.o.model = cli_resolve_model("bench", c.o.model, &dflt);
    attnd_err err;
    int rc = 1;
    if (bench_setup(&c, &err)) goto fail;
    if (!c.o.no_peer) c.peer = find_peer(c.o.peer_dir);
    const model_info *mi = model_info_get(c.m);
    printf("model %s (%s, %d layers, embd %d, vocab %d), %d thread(s), KV %s, prompt %d, generate %d\nkernels %s\n",
           c.o.model, mi->arch, mi->n_layer, mi->n_embd, mi->n_vocab, c.o.threads, kv_type_name(c.o.kv),
           c.o.prompt_len, c.o.n_gen, cpuinfo_kernels());
    fflush(stdout);
    if (measure_speed(&c, &err)) goto fail;
    if (!c.o.no_growth && measure_growth(&c, &err)) goto fail;
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "attnd bench: %s\n", err.msg);
out:
    free(c.peer);
    free(c.ids);
    free(c.prompt);
    roofline_probe_destroy(c.probe);
    kv_pool_destroy(c.pool);
    engine_destroy(c.e);
    model_destroy(c.m);
    free(dflt);
    return rc;
}

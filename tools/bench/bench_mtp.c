/*
 * bench_mtp.c — speculative decoding with the model's own MTP block (engine_mtp_step, spec.h):
 * decode tokens/s drafting with it against decoding without it, at the acceptance reached, on a
 * Qwen3.5-shaped hybrid model of random F16 weights (hybrid_fixture.h's writer, mtp_good): the
 * next token follows from the current one through the embedding and the output head, and the MTP
 * block copies that prediction for a share of the tokens (its own embed_tokens rows are the
 * model's for that share, random for the rest). One line per share: plain, MTP with the
 * cost-aware controller (the default), and MTP drafting draft_max every step, medians of the
 * repetitions, alternating in one process (so they see the same neighbours); the ratio is the
 * figure to read on a busy machine, and the load average is printed beside it. C(k+1) is the
 * fixed run's measured verify step of 1 + draft_max rows, D its time per drafted token, both per
 * 1-row step: what the speed-up is made of.
 * A benchmark, not a test: it prints numbers, it asserts nothing.
 *
 *   tools/bench/build.sh && build/bench_mtp [threads 0] [reps 3] [n 64] [draft_max 3] [type F16] [share ...]
 *   (default shares: 0 0.5 0.8 0.9 1; another type than F16 is made by `build/attnd quantize`, so
 *   run it from the repository root; the files are written to $TMPDIR and removed)
 * With BENCH_MTP_PARTS set in the environment it also prints, per run, each part's wall time
 * (engine_set_profile) per evaluation: per token for the plain runs (the prompt's prefill
 * included), per verify for the fixed ones (the MTP block's runs, drafts included, fall in the
 * attention and FFN parts), and the decode's wall time per evaluation beside the costs the
 * controller learned (spec_cost: the least times recently seen, not means), which is where a
 * cycle's time outside the verify and the drafts shows. Wall time: on a busy machine a part
 * that waits for a descheduled worker looks slow; compare with `perf record` before trusting
 * one part's share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/engine.h"
#include "attnd/spec.h"
#include "hybrid_fixture.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double load_avg(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &l) != 1) l = -1;
    if (f) fclose(f);
    return l;
}

/* One generation of n tokens after prompt on a fresh sequence of pool (mode 0: plain, 1: MTP with
 * the controller, 2: MTP drafting draft_max every step); tokens/s of the decode phase, the drafts
 * proposed and kept, and (cost, may be NULL) the step costs the spec measured. */
static double run(engine *e, kv_pool *pool, const int32_t *prompt, int n_prompt, int n, int mode, int draft_max,
                  int32_t *out, int *drafted, int *kept, spec_cost *cost) {
    kv_seq *s;
    attnd_err err;
    spec *sp = NULL;
    if (kv_seq_create(&s, pool, &err)) abort();
    if (mode) {
        spec_params p;
        spec_params_default(&p);
        p.draft_max = draft_max, p.fixed = mode == 2, p.mtp = e, p.mtp_seq = s;
        if (spec_create(&sp, &p, &err)) {
            fprintf(stderr, "bench_mtp: %s\n", err.msg);
            exit(1);
        }
    }
    engine_gen g = {.n_predict = n, .spec = sp};
    engine_timings tm;
    int n_out;
    double parts[ENGINE_PART_COUNT] = {0};
    bool prof = getenv("BENCH_MTP_PARTS") != NULL;
    if (prof) engine_set_profile(e, parts);
    if (engine_generate(e, s, prompt, n_prompt, &g, out, &n_out, &tm, &err)) {
        fprintf(stderr, "bench_mtp: %s\n", err.msg);
        exit(1);
    }
    *drafted = tm.n_drafted, *kept = tm.n_accepted;
    if (prof) {
        /* per evaluation: n steps plainly, one per draft_max drafts in the fixed mode */
        int evals = mode == 2 ? (tm.n_drafted + draft_max - 1) / draft_max : mode == 0 ? n : 0;
        engine_set_profile(e, NULL);
        if (evals) {
            const spec_cost *c = sp ? spec_costs(sp) : NULL;
            printf("   mode %d: %d evaluations, %.2f ms each of the decode's wall time", mode, evals, tm.decode_ms / evals);
            if (c) printf(" (verify of %d rows %.2f ms, %d drafts %.2f ms, its own 1-row steps %.2f ms)", draft_max + 1, c->ms[draft_max + 1], draft_max, draft_max * c->draft_ms, c->ms[1]);
            printf("\n");
        }
        for (int p = 0; evals && p < ENGINE_PART_COUNT; p++)
            printf("   mode %d %-13s %7.3f ms per evaluation\n", mode, engine_part_name((engine_part)p), parts[p] * 1e3 / evals);
    }
    if (sp && cost) *cost = *spec_costs(sp);
    spec_destroy(sp);
    kv_seq_destroy(s);
    return tm.decode_ms > 0 ? tm.n_decode * 1e3 / tm.decode_ms : 0;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0, reps = argc > 2 ? atoi(argv[2]) : 3;
    int n = argc > 3 ? atoi(argv[3]) : 64, dmax = argc > 4 ? atoi(argv[4]) : 3;
    const char *type = argc > 5 ? argv[5] : "F16";
    double shares[16] = {0, 0.5, 0.8, 0.9, 1};
    int n_shares = 5;
    if (argc > 6) n_shares = 0;
    for (int i = 6; i < argc && n_shares < 16; i++) shares[n_shares++] = atof(argv[i]);
    if (reps < 1 || reps > 64 || n < 2 || dmax < 1 || dmax > SPEC_MAX_DRAFT) {
        fprintf(stderr, "usage: bench_mtp [threads] [reps 1..64] [n >= 2] [draft_max 1..32] [type] [share ...]\n");
        return 2;
    }
    /* Qwen3.5-shaped, small enough to write quickly, large enough that decode reads its weights
     * (about 390 MB of F16) rather than computes: a verify of a few rows costs about one step */
    hy_spec hs = {.base = tiny_default("qwen35"), .interval = 4, .conv_k = 4, .hk = 8, .hv = 16, .dk = 128,
                  .n_mtp = 1, .mtp_good = true};
    tiny_spec *sp = &hs.base;
    sp->n_vocab = 16384, sp->n_ctx = 1024, sp->seed = 5, sp->wtype = GGUF_TYPE_F16;
    sp->n_embd = 1024, sp->n_layer = 8, sp->n_head = 8, sp->n_head_kv = 2, sp->head_dim = 128, sp->rope_dims = 64;
    sp->n_ff = 3072, sp->rope_base = 1e7f, sp->rms_eps = 1e-6f;
    enum { NP = 32 };
    int32_t prompt[NP], *ref = malloc(sizeof(int32_t) * (size_t)n), *out = malloc(sizeof(int32_t) * (size_t)n);
    uint64_t rs = 99;
    for (int i = 0; i < NP; i++) prompt[i] = (int32_t)(tiny_rng(&rs) % (uint64_t)sp->n_vocab);
    printf("bench_mtp: qwen35 %d layers x %d, vocab %d, %s; %d tokens after %d, draft_max %d, %d reps\n",
           sp->n_layer, sp->n_embd, sp->n_vocab, type, n, NP, dmax, reps);
    printf("%6s %9s | %9s %6s %6s | %9s %6s %6s | %5s %5s | %5s\n", "share", "plain t/s", "mtp t/s", "ratio", "accept",
           "fixed t/s", "ratio", "accept", "C(k+1)", "D", "load");
    for (int si = 0; si < n_shares; si++) {
        hs.mtp_share = (float)shares[si];
        char path[256];
        tiny_tmpname(path, sizeof(path), "bench-mtp");
        if (hy_write(path, &hs)) {
            fprintf(stderr, "bench_mtp: cannot write %s\n", path);
            return 1;
        }
        if (strcmp(type, "F16")) {
            char cmd[700], qpath[300];
            snprintf(qpath, sizeof(qpath), "%s.q", path);
            snprintf(cmd, sizeof(cmd), "build/attnd quantize '%s' '%s' %s --quiet", path, qpath, type);
            if (system(cmd) != 0 || rename(qpath, path) != 0) {
                fprintf(stderr, "bench_mtp: %s failed\n", cmd);
                return 1;
            }
        }
        model *m;
        engine *e;
        kv_pool *plain, *withm;
        attnd_err err;
        if (model_load(&m, path, &err) || engine_create(&e, m, 64, threads, &err) ||
            kv_pool_create(&plain, m, (size_t)1 << 30, KV_F16, &err) || kv_pool_set_mtp(plain, false, &err) ||
            kv_pool_create(&withm, m, (size_t)1 << 30, KV_F16, &err)) {
            fprintf(stderr, "bench_mtp: %s\n", err.msg);
            return 1;
        }
        double tps[3][64], acc[3] = {0};
        int d, k, dsum[3] = {0}, ksum[3] = {0};
        spec_cost cost = {0};
        run(e, plain, prompt, NP, n, 0, dmax, ref, &d, &k, NULL); /* warm-up, and the tokens to match */
        run(e, withm, prompt, NP, n, 1, dmax, out, &d, &k, NULL);
        for (int r = 0; r < reps; r++)
            for (int mode = 0; mode < 3; mode++) {
                tps[mode][r] = run(e, mode ? withm : plain, prompt, NP, n, mode, dmax, out, &d, &k, mode == 2 ? &cost : NULL);
                dsum[mode] += d, ksum[mode] += k;
                if (memcmp(out, ref, sizeof(int32_t) * (size_t)n)) {
                    fprintf(stderr, "bench_mtp: mode %d gave other tokens than plain decoding\n", mode);
                    return 1;
                }
            }
        for (int mode = 1; mode < 3; mode++) acc[mode] = dsum[mode] ? (double)ksum[mode] / dsum[mode] : 0;
        double p = median(tps[0], reps), a = median(tps[1], reps), f = median(tps[2], reps);
        /* the fixed run's measured costs: a verify of 1 + draft_max rows, and a drafted token, per 1-row step */
        double c1 = cost.ms[1] > 0 ? cost.ms[1] : 1;
        printf("%6.2f %9.1f | %9.1f %6.2f %6.2f | %9.1f %6.2f %6.2f | %5.2f %5.2f | %5.1f\n", shares[si], p, a, a / p,
               acc[1], f, f / p, acc[2], cost.ms[dmax + 1] / c1, cost.draft_ms / c1, load_avg());
        fflush(stdout);
        kv_pool_destroy(plain);
        kv_pool_destroy(withm);
        engine_destroy(e);
        model_destroy(m);
        unlink(path);
    }
    free(ref), free(out);
    return 0;
}

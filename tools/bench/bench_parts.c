/*
 * bench_parts.c — where one decode token's time goes, part by part (engine_set_profile: the
 * embedding row, DeltaNet projections / recurrence / output, attention, router, selected experts,
 * shared expert, dense FFN, head), against the bytes each part reads (as engine/roofline.c counts
 * them: every matrix once, the used share k / n_expert of the experts, one row of an embedding
 * table, the recurrent state once; the KV cache is left out: at a short context it is small). Decodes --n tokens after a short prompt, one sequence, and
 * prints each part's ms per token, its share of the step, its MB per token, and the GB/s it
 * reaches: a part far below the others' GB/s is slow beyond its bytes.
 * A benchmark, not a test: it prints numbers, it asserts nothing. Other work on the machine slows
 * every part alike only on average: read the shares, and say the load average.
 *
 *   tools/bench/build.sh && build/bench_parts MODEL.gguf [threads 1] [n 32] [prompt 8]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/engine.h"
#include "attnd/gguf.h"
#include "attnd/kv.h"
#include "attnd/model.h"

#define PART_REST ENGINE_PART_COUNT /* norms, residual adds, bookkeeping: what no part names */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* The part that reads tensor t (blk.N. names; dn: layer N is a DeltaNet layer). */
static int part_of(const char *name, bool dn) {
    if (!strcmp(name, "output.weight") || !strcmp(name, "output_norm.weight")) return ENGINE_PART_HEAD;
    if (!strncmp(name, "token_embd", 10) || !strncmp(name, "per_layer_", 10)) return ENGINE_PART_EMBED;
    if (strncmp(name, "blk.", 4)) return PART_REST;
    if (has(name, "_exps")) return ENGINE_PART_EXPERTS;
    if (has(name, "_shexp")) return ENGINE_PART_SHEXP;
    if (has(name, "ffn_gate_inp")) return ENGINE_PART_ROUTER;
    if (has(name, ".ffn_gate.") || has(name, ".ffn_up.") || has(name, ".ffn_down.")) return ENGINE_PART_FFN;
    if (dn) {
        if (has(name, "ssm_out")) return ENGINE_PART_DN_OUT;
        if (has(name, "ssm_conv") || has(name, "ssm_dt") || has(name, "ssm_a") || has(name, "ssm_norm"))
            return ENGINE_PART_DN_MIX;
        if (has(name, "attn_qkv") || has(name, "attn_gate") || has(name, "ssm_")) return ENGINE_PART_DN_IN;
    }
    if (has(name, ".attn_") && !has(name, "attn_norm")) return ENGINE_PART_ATTN;
    return PART_REST;
}

/* Bytes per decode token of each part. */
static void part_bytes(const model *m, double *b) {
    const gguf_file *f = model_gguf(m);
    const model_info *mi = model_info_get(m);
    bool tied = !gguf_find_tensor(f, "output.weight");
    double used = mi->n_expert ? (double)mi->n_expert_used / mi->n_expert : 1;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        int layer = -1;
        if (!strncmp(t->name, "blk.", 4)) layer = atoi(t->name + 4);
        if (layer >= mi->n_layer) continue; /* MTP blocks: never run by decode */
        char probe[64];
        snprintf(probe, sizeof(probe), "blk.%d.ssm_out.weight", layer);
        bool dn = layer >= 0 && gguf_find_tensor(f, probe);
        int part = part_of(t->name, dn);
        double n = (double)t->n_bytes;
        if (part == ENGINE_PART_EXPERTS) n *= used;
        if (part == ENGINE_PART_EMBED) n /= (double)(t->n_elems / t->ne[0]); /* one row */
        if (tied && !strcmp(t->name, "token_embd.weight")) b[ENGINE_PART_HEAD] += (double)t->n_bytes;
        b[part] += n;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_parts MODEL.gguf [threads 1] [n 32] [prompt 8]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 1, n = argc > 3 ? atoi(argv[3]) : 32, prompt = argc > 4 ? atoi(argv[4]) : 8;
    attnd_err err;
    model *m;
    engine *e;
    kv_pool *pool;
    kv_seq *s;
    if (model_load(&m, argv[1], &err) || engine_create(&e, m, prompt, threads, &err) ||
        kv_pool_create(&pool, m, (size_t)512 << 20, KV_F16, &err) || kv_seq_create(&s, pool, &err)) {
        fprintf(stderr, "bench_parts: %s\n", err.msg);
        return 1;
    }
    const model_info *mi = model_info_get(m);
    float *logits = malloc(sizeof(float) * (size_t)mi->n_vocab * (size_t)prompt);
    batch_entry *b = calloc((size_t)prompt, sizeof(*b));
    for (int i = 0; i < prompt; i++) b[i] = (batch_entry){s, 1 + i * 7 % 1000, i, i == prompt - 1};
    if (engine_eval(e, b, prompt, logits, &err)) {
        fprintf(stderr, "bench_parts: %s\n", err.msg);
        return 1;
    }
    double sec[ENGINE_PART_COUNT + 1] = {0}, bytes[ENGINE_PART_COUNT + 1] = {0}, total = 0;
    engine_set_profile(e, sec);
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int v = 1; v < mi->n_vocab; v++) best = logits[v] > logits[best] ? v : best;
        batch_entry d = {s, best, prompt + i, true};
        double t0 = now_s();
        if (engine_eval(e, &d, 1, logits, &err)) {
            fprintf(stderr, "bench_parts: %s\n", err.msg);
            return 1;
        }
        total += now_s() - t0;
    }
    double named = 0;
    for (int p = 0; p < ENGINE_PART_COUNT; p++) named += sec[p];
    sec[PART_REST] = total - named;
    part_bytes(m, bytes);
    bytes[ENGINE_PART_DN_MIX] += (double)kv_state_bytes(m); /* the recurrent state (conv tails too), once */
    double load[3] = {0};
    FILE *la = fopen("/proc/loadavg", "r");
    if (la && fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    if (la) fclose(la);
    printf("%s: %d decode tokens after %d, %d thread(s), load average %.2f %.2f %.2f\n", argv[1], n, prompt, threads,
           load[0], load[1], load[2]);
    printf("%-14s %9s %7s %9s %8s\n", "part", "ms/token", "share", "MB/token", "GB/s");
    double all_b = 0;
    for (int p = 0; p <= ENGINE_PART_COUNT; p++) {
        double ms = sec[p] / n * 1e3, mb = bytes[p] / 1e6;
        all_b += bytes[p];
        if (ms < 0.0005 && mb < 0.0005) continue;
        printf("%-14s %9.3f %6.1f%% %9.2f %8.2f\n", p == PART_REST ? "rest" : engine_part_name((engine_part)p), ms,
               100 * sec[p] / total, mb, sec[p] > 0 ? bytes[p] / (sec[p] / n) / 1e9 : 0);
    }
    printf("%-14s %9.3f %6.1f%% %9.2f %8.2f\n", "step", total / n * 1e3, 100.0, all_b / 1e6, all_b / (total / n) / 1e9);
    kv_seq_destroy(s);
    kv_pool_destroy(pool);
    engine_destroy(e);
    model_destroy(m);
    free(logits);
    free(b);
    return 0;
}

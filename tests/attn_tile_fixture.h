/*
 * attn_tile_fixture.h — the running state the attention tile-step tests (test_attn_ops.c,
 * test_kv_quant.c) start a step from, and the tile over a copy of it. Both files check a step
 * over cache tiles (F16 or quantized) against the same step over those tiles converted to F32;
 * only the K and V operands differ, so the state, the tile's shape and the scratch a step
 * converts the tiles into are built here once.
 * Everything is static: each test file gets its own copy.
 */
#ifndef ATTND_TEST_ATTN_TILE_FIXTURE_H
#define ATTND_TEST_ATTN_TILE_FIXTURE_H

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "attn_ops.h"
#include "kv_layout.h" /* KV_BLOCK */

/* Running state over R rows of head_dim hd as earlier tiles leave it: odd rows start here (max
 * -INFINITY, sum 0, acc 0); even ones carry a max this tile may pass. acc is (R, hd). */
static inline void tile_fixture_running(float *run_max, float *run_sum, float *acc, int R, int hd) {
    for (int r = 0; r < R; r++) {
        run_max[r] = r % 2 ? -INFINITY : 0.5f * (float)(r % 3);
        run_sum[r] = r % 2 ? 0 : 2.5f;
        if (r % 2) memset(acc + (size_t)r * hd, 0, sizeof(float) * (size_t)hd);
    }
}

/* The shape of one tile: R query rows of q (R, hd) against cnt keys, cnt0 of them before the
 * first query's position, group query rows a KV head. */
typedef struct tile_fixture_shape {
    int R, hd, cnt, cnt0, group;
} tile_fixture_shape;

/* Copies the running state (acc (R, hd), run_max (R), run_sum (R)) into out, laid out as acc,
 * then max, then sum, and returns a tile that updates that copy, with p (R, KV_BLOCK) as its
 * scratch. The caller sets the K and V operands. Borrows every pointer for the tile's life. */
static inline attn_tile tile_fixture_begin(float *out, float *p, const float *q, const float *acc,
                                           const float *run_max, const float *run_sum, tile_fixture_shape s) {
    int R = s.R, hd = s.hd;
    float *a = out, *mx = out + R * hd, *sum = mx + R;
    memcpy(a, acc, sizeof(float) * (size_t)R * hd);
    memcpy(mx, run_max, sizeof(float) * (size_t)R);
    memcpy(sum, run_sum, sizeof(float) * (size_t)R);
    return (attn_tile){.acc = a, .run_max = mx, .run_sum = sum, .p = p, .q = q, .R = R, .hd = hd, .cnt = s.cnt,
                       .cnt0 = s.cnt0, .group = s.group, .v_stride = hd, .scale = 1.0f / sqrtf((float)hd)};
}

/* For a step over cache tiles: hands t the scratch it converts those tiles into (kt_buf (hd,
 * KV_BLOCK), v_buf (KV_BLOCK, hd)), or none when !scratch (the step must then not need any). The
 * scratch is NaN first: what a step converts, it writes. */
static inline void tile_fixture_scratch(attn_tile *t, bool scratch) {
    static float kt[128 * KV_BLOCK], v[KV_BLOCK * 128];
    memset(kt, 0xFF, sizeof(kt)), memset(v, 0xFF, sizeof(v));
    if (scratch) t->kt_buf = kt, t->v_buf = v;
}

#endif

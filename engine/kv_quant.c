/*
 * kv_quant.c — Q8_0 / Q4_0 KV tiles (layouts in kv_quant.h): the per-position quantizers the
 * engine calls as it caches each key and value, and the conversions to F32 that the portable
 * attention step (and the inspection paths) read. The fast attention steps read the tiles
 * directly (attn_ops.c); what they compute from a tile equals what they compute from its
 * conversion here, because d * q is exact in F32.
 */
#include "kv_quant.h"

#include <math.h>
#include <string.h>

#include "quant.h"

size_t kv_quant_row_bytes(kv_type type, int hd) {
    switch (type) {
    case KV_F32: return (size_t)hd * 4;
    case KV_F16: return (size_t)hd * 2;
    case KV_Q8_0: return (size_t)hd / KV_QUANT_BLOCK * 34;
    case KV_Q4_0: return (size_t)hd / KV_QUANT_BLOCK * 18;
    }
    return 0;
}

/* One block of 32: its F16 scale, and its quants into q (Q8_0: -127..127; Q4_0: 0..15). */
static uint16_t quantize_block(int8_t q[KV_QUANT_BLOCK], const float *x, kv_type type) {
    if (type == KV_Q8_0) {
        float amax = 0;
        for (int i = 0; i < KV_QUANT_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i]));
        float d = amax / 127.f, id = d != 0 ? 1.f / d : 0;
        for (int i = 0; i < KV_QUANT_BLOCK; i++) { /* clamped, and NaN (an inf in the block) to 0: casts stay defined */
            float v = roundf(x[i] * id);
            q[i] = (int8_t)(v >= 127 ? 127 : v <= -127 ? -127 : v == v ? (int)v : 0);
        }
        return quant_f32_to_f16(d);
    }
    float amax = 0, max = 0;
    for (int i = 0; i < KV_QUANT_BLOCK; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    float d = max / -8.f, id = d != 0 ? 1.f / d : 0;
    for (int i = 0; i < KV_QUANT_BLOCK; i++) { /* truncating v >= 0 rounds; NaN goes to 0 */
        float v = x[i] * id + 8.5f;
        q[i] = (int8_t)(v >= 15 ? 15 : v > 0 ? (int)v : 0);
    }
    return quant_f32_to_f16(d);
}

void kv_quant_store_k(uint8_t *kt, kv_type type, int hd, int slot, const float *x) {
    uint16_t *d = (uint16_t *)kv_quant_k_scales(kt, type, hd);
    for (int b = 0; b < hd / KV_QUANT_BLOCK; b++) {
        int8_t q[KV_QUANT_BLOCK];
        d[(size_t)b * KV_BLOCK + slot] = quantize_block(q, x + b * KV_QUANT_BLOCK, type);
        for (int i = 0; i < KV_QUANT_BLOCK; i++) {
            size_t row = (size_t)(b * KV_QUANT_BLOCK + i);
            if (type == KV_Q8_0) {
                kt[row * KV_BLOCK + slot] = (uint8_t)q[i];
            } else { /* position 32G + k (k < 16) in the low nibble of byte 16G + k, 32G + k + 16 in the high */
                uint8_t *byte = &kt[row * (KV_BLOCK / 2) + slot / 32 * 16 + slot % 16];
                *byte = slot % 32 < 16 ? (uint8_t)((*byte & 0xF0) | q[i]) : (uint8_t)((*byte & 0x0F) | q[i] << 4);
            }
        }
    }
}

void kv_quant_store_v(uint8_t *vt, kv_type type, int hd, int slot, const float *x) {
    uint8_t *row = vt + (size_t)slot * kv_quant_row_bytes(type, hd);
    size_t bb = type == KV_Q8_0 ? 34 : 18;
    for (int b = 0; b < hd / KV_QUANT_BLOCK; b++) {
        uint8_t *blk = row + (size_t)b * bb;
        int8_t q[KV_QUANT_BLOCK];
        uint16_t d = quantize_block(q, x + b * KV_QUANT_BLOCK, type);
        memcpy(blk, &d, 2);
        if (type == KV_Q8_0)
            memcpy(blk + 2, q, KV_QUANT_BLOCK);
        else
            for (int k = 0; k < KV_QUANT_BLOCK / 2; k++) blk[2 + k] = (uint8_t)(q[k] | q[k + 16] << 4);
    }
}

void kv_quant_k_to_f32(float *out, const uint8_t *kt, kv_type type, int hd) {
    const uint16_t *d = kv_quant_k_scales(kt, type, hd);
    for (int i = 0; i < hd; i++) {
        const uint16_t *di = d + (size_t)(i / KV_QUANT_BLOCK) * KV_BLOCK;
        float *o = out + (size_t)i * KV_BLOCK;
        if (type == KV_Q8_0) {
            const int8_t *q = (const int8_t *)kt + (size_t)i * KV_BLOCK;
            for (int j = 0; j < KV_BLOCK; j++) o[j] = (float)q[j] * quant_f16_to_f32(di[j]);
        } else {
            const uint8_t *q = kt + (size_t)i * (KV_BLOCK / 2);
            for (int j = 0; j < KV_BLOCK; j++) {
                uint8_t byte = q[j / 32 * 16 + j % 16];
                int n = j % 32 < 16 ? byte & 0xF : byte >> 4;
                o[j] = (float)(n - 8) * quant_f16_to_f32(di[j]);
            }
        }
    }
}

void kv_quant_v_to_f32(float *out, const uint8_t *vt, kv_type type, int hd, int cnt) {
    size_t rb = kv_quant_row_bytes(type, hd), bb = type == KV_Q8_0 ? 34 : 18;
    for (int j = 0; j < cnt; j++)
        for (int b = 0; b < hd / KV_QUANT_BLOCK; b++) {
            const uint8_t *blk = vt + (size_t)j * rb + (size_t)b * bb;
            uint16_t dh;
            memcpy(&dh, blk, 2);
            float d = quant_f16_to_f32(dh), *o = out + (size_t)j * hd + b * KV_QUANT_BLOCK;
            if (type == KV_Q8_0) /* one loop per type, so each vectorises (latent attention reads whole tiles) */
                for (int k = 0; k < KV_QUANT_BLOCK; k++) o[k] = (float)(int8_t)blk[2 + k] * d;
            else
                for (int k = 0; k < KV_QUANT_BLOCK / 2; k++) {
                    o[k] = (float)((blk[2 + k] & 0xF) - 8) * d;
                    o[k + 16] = (float)((blk[2 + k] >> 4) - 8) * d;
                }
        }
}

/*
 * kv_quant.h — (engine-private) quantized KV tiles: Q8_0 and Q4_0 keys and values of one kv head
 * in one cache block (kv_layout.h), written one position at a time and read back as F32.
 *
 * Both types quantize each position's head_dim values in blocks of 32 with one F16 scale d each,
 * the values GGUF's Q8_0 and Q4_0 define (Q8_0: q = round(x / d), d = amax / 127, x = d q;
 * Q4_0: d = -max / 8 of the element of largest magnitude, q = min(15, x / d + 8.5), x = d (q - 8)),
 * computed as llama.cpp's reference quantizers do. A value tile is those blocks in GGUF's own byte
 * layout, position after position; a key tile is stored transposed like an F16 one, so that scores
 * vectorise over positions:
 *
 *     value tile: KV_BLOCK rows of head_dim / 32 GGUF blocks (Q8_0: f16 d, int8 q[32];
 *                 Q4_0: f16 d, 16 bytes, low nibble element k, high nibble element k + 16)
 *     key tile, Q8_0: int8 q[head_dim][KV_BLOCK], then f16 d[head_dim / 32][KV_BLOCK]
 *     key tile, Q4_0: uint8 q[head_dim][KV_BLOCK / 2] (positions 32G + k and 32G + k + 16 in the
 *                     low and high nibble of byte 16G + k), then f16 d[head_dim / 32][KV_BLOCK]
 *
 * Either tile takes KV_BLOCK * head_dim / 32 * (34 or 18) bytes, exactly the GGUF blocks' bytes.
 * head_dim must be a multiple of 32 (kv_pool_create refuses other models). A latent attention
 * layer's cache rows (kv_layout.h) are value-tile rows of kv_latent values.
 * Thread-safety: pure functions over caller-owned memory.
 */
#ifndef ATTND_KV_QUANT_H
#define ATTND_KV_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "kv_layout.h"

#define KV_QUANT_BLOCK 32

/* Bytes of one position's head_dim values (hd elements) in type: of one row of a tile. */
size_t kv_quant_row_bytes(kv_type type, int hd);
static inline int kv_quant_is_quant(kv_type type) { return type == KV_Q8_0 || type == KV_Q4_0; }

/* Quantizes x (hd floats) as position `slot` of the key tile kt / the value tile vt. */
void kv_quant_store_k(uint8_t *kt, kv_type type, int hd, int slot, const float *x);
void kv_quant_store_v(uint8_t *vt, kv_type type, int hd, int slot, const float *x);

/* The key tile as F32, transposed as the cache holds F32 keys: out (hd, KV_BLOCK). */
void kv_quant_k_to_f32(float *out, const uint8_t *kt, kv_type type, int hd);
/* The first cnt rows of the value tile as F32: out (cnt, hd). */
void kv_quant_v_to_f32(float *out, const uint8_t *vt, kv_type type, int hd, int cnt);

/* The f16 scales of a key tile: (hd / 32, KV_BLOCK), after its quants. */
static inline const uint16_t *kv_quant_k_scales(const uint8_t *kt, kv_type type, int hd) {
    return (const uint16_t *)(kt + (size_t)hd * (type == KV_Q8_0 ? KV_BLOCK : KV_BLOCK / 2));
}

#endif /* ATTND_KV_QUANT_H */

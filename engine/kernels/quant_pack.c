/*
 * quant_pack.c — weights copied once at load into the lane-per-row layouts of the AVX-512
 * kernels (quant_pack of quant.h; the layouts are described in quant_impl.h). A type is packed
 * only where the active instruction set's table has a packed kernel for it; the copy replaces
 * the mapped original in use (the mapping's pages are not read again), so no weight is held twice
 * in resident memory.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#include "attnd/common.h"
#include "attnd/gguf.h"
#include "quant.h"
#include "quant_impl.h"
#include "quant_types.h"

/* Row i's dwords [0, n) of src into a lane-per-row layout (a block's or super-block's): dword k at q + 64 k + 4 i. */
static void pack_dwords(uint8_t *q, const uint8_t *src, int n, int i) {
    for (int k = 0; k < n; k++) memcpy(q + 64 * k + 4 * i, src + 4 * k, 4);
}

/* Q8_0 rows -> quant_pack's layout (PACK_Q80_PAIR, quant_impl.h): block b's weights at
 * PACK_Q80_PAIR (b / 2) + 512 (b % 2), dword k of row i at 64 k + 4 i, each byte q ^ 0x80; its rows'
 * 16 f16 scales at PACK_Q80_PAIR (b / 2) + 1024 + 32 (b % 2). */
static void pack_q8_0(uint8_t *dst, const uint8_t *w, size_t rb, int64_t n_rows, int64_t nb, size_t group_bytes) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += PACK_ROWS) { /* the copy written in order, 16 rows read side by side */
        int nr = n_rows - r0 < PACK_ROWS ? (int)(n_rows - r0) : PACK_ROWS;
        uint8_t *g = dst + (size_t)(r0 / PACK_ROWS) * group_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *pair = g + (size_t)(b / 2) * PACK_Q80_PAIR;
            for (int i = 0; i < nr; i++) {
                const uint8_t *src = w + (size_t)(r0 + i) * rb + (size_t)b * Q8_0_BYTES;
                uint8_t *q = pair + 512 * (b % 2) + 4 * i;
                memcpy(pair + 1024 + 32 * (b % 2) + 2 * i, src, 2);
                for (int k = 0; k < 8; k++) {
                    uint32_t v;
                    memcpy(&v, src + 2 + 4 * k, 4);
                    v ^= 0x80808080u;
                    memcpy(q + 64 * k, &v, 4);
                }
            }
        }
    }
}

/* Q4_0 rows -> quant_pack's layout (quant_impl.h): per 16-row group, pairs of blocks of
 * PACK_Q40_PAIR bytes; block b's nibbles at PACK_Q40_PAIR (b / 2) + 256 (b % 2), the 16 bytes of
 * each row split in four dwords, dword k of row i at 64 k + 4 i; its rows' 16 f16 scales at
 * PACK_Q40_PAIR (b / 2) + 512 + 32 (b % 2). Rows past n_rows (and an odd last block's partner)
 * stay zero (scale 0). */
static void pack_q4_0(uint8_t *dst, const uint8_t *w, size_t rb, int64_t n_rows, int64_t nb, size_t group_bytes) {
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *g = dst + (size_t)(r / PACK_ROWS) * group_bytes;
        int i = (int)(r % PACK_ROWS);
        const uint8_t *src = w + (size_t)r * rb;
        for (int64_t b = 0; b < nb; b++, src += Q4_0_BYTES) {
            uint8_t *pair = g + (size_t)(b / 2) * PACK_Q40_PAIR;
            memcpy(pair + 512 + 32 * (b % 2) + 2 * i, src, 2);
            pack_dwords(pair + 256 * (b % 2), src + 2, 4, i);
        }
    }
}

/* One super-block of row i (of its 16-row group): src in the file's layout -> q in quant_pack's. */
typedef void (*pack_sb_fn)(uint8_t *q, const uint8_t *src, int i);

/* Rows of super-blocks (src_bytes each in the file, dst_bytes each packed) -> per 16-row group,
 * group_bytes of packed super-blocks, each written by fn. */
static void pack_super_blocks(uint8_t *dst, const uint8_t *w, size_t rb, int64_t n_rows, int64_t nsb,
                              size_t group_bytes, size_t src_bytes, size_t dst_bytes, pack_sb_fn fn) {
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *src = w + (size_t)r * rb;
        uint8_t *g = dst + (size_t)(r / PACK_ROWS) * group_bytes;
        for (int64_t b = 0; b < nsb; b++)
            fn(g + (size_t)b * dst_bytes, src + (size_t)b * src_bytes, (int)(r % PACK_ROWS));
    }
}

/* Q4_K / Q5_K -> PACK_Q4K_BYTES / PACK_Q5K_BYTES (quant_impl.h); q5: Q5_K, whose nibbles follow
 * its 32 bytes of fifth bits. */
static void pack_sb_q45_k(uint8_t *q, const uint8_t *src, int i, int q5) {
    pack_dwords(q, src + (q5 ? 48 : 16), 32, i);
    uint8_t sc[8], mn[8];
    quant_q4k_scales(src + 4, sc, mn);
    uint8_t *s = q + 32 * 64;
    for (int h = 0; h < 2; h++) {
        memcpy(s + 64 * h + 4 * i, sc + 4 * h, 4);
        memcpy(s + 128 + 64 * h + 4 * i, mn + 4 * h, 4);
    }
    memcpy(s + 256 + 2 * i, src, 2);          /* d */
    memcpy(s + 256 + 32 + 2 * i, src + 2, 2); /* dmin */
    if (q5) pack_dwords(q + PACK_Q4K_BYTES, src + 16, 8, i);
}

static void pack_sb_q4_k(uint8_t *q, const uint8_t *src, int i) { pack_sb_q45_k(q, src, i, 0); }
static void pack_sb_q5_k(uint8_t *q, const uint8_t *src, int i) { pack_sb_q45_k(q, src, i, 1); }

/* IQ4_XS -> PACK_IQ4XS_BYTES (quant_impl.h). */
static void pack_sb_iq4_xs(uint8_t *q, const uint8_t *src, int i) {
    pack_dwords(q, src + 8, 32, i);
    int8_t sc[8];
    quant_iq4xs_scales(src, sc);
    for (int j = 0; j < 8; j++) q[32 * 64 + 16 * j + i] = (uint8_t)sc[j];
    memcpy(q + 32 * 64 + 128 + 2 * i, src, 2); /* d */
}

/* Q2_K -> PACK_Q2K_BYTES (quant_impl.h). */
static void pack_sb_q2_k(uint8_t *q, const uint8_t *src, int i) {
    pack_dwords(q, src + 16, 16, i);
    for (int j = 0; j < 16; j++) q[16 * 64 + 32 * (j / 2) + 2 * i + j % 2] = src[j];
    memcpy(q + 16 * 64 + 256 + 2 * i, src + 80, 2);      /* d */
    memcpy(q + 16 * 64 + 256 + 32 + 2 * i, src + 82, 2); /* dmin */
}

/* One row's dword of a Q3_K triple's A, B, C (PACK_Q3K_BYTES, quant_impl.h) from its eight weight
 * vectors' dwords w[k] (4 bytes of u, 0..7). Vectors 0-5 are plain fields (bits 0-2, 3-5 of each
 * byte); bits 6 and 7 are solved from the unpack of vectors 6 and 7, byte by byte (the 16-bit
 * shifts bring bit 0 of a word's high byte down to bit 2 of its low one), each step using bits
 * set before it. */
static void pack_q3_k_dword(uint32_t out[3], const uint32_t w[8]) {
    const uint32_t b2 = 0x03030303u, b1 = 0x01010101u, hi0 = 0x00010001u;
    uint32_t A = w[0] | w[1] << 3, B = w[2] | w[3] << 3, C = w[4] | w[5] << 3;
    A |= ((w[6] & b2) ^ ((B >> 4) & b2)) << 6;                      /* 7 & ((A >> 6) ^ (B >> 4)): bits 0, 1 */
    B |= (((w[6] >> 2) & b1) ^ ((A >> 8) & hi0)) << 6;              /* ... bit 2 */
    C |= ((w[7] & b2) ^ ((B >> 5) & b2)) << 6;                      /* 7 & ((C >> 6) ^ (B >> 5)): bits 0, 1 */
    B |= (((w[7] >> 2) & b1) ^ ((C >> 8) & hi0)) << 7;              /* ... bit 2 */
    out[0] = A, out[1] = B, out[2] = C;
}

/* Q3_K rows -> quant_pack's layout (the d, then PACK_Q3K_BYTES per group and super-block). */
static void pack_q3_k(uint8_t *dst, const uint8_t *w, size_t rb, int64_t n_rows, int64_t nsb, size_t group_bytes) {
    for (int64_t r = 0; r < n_rows; r++) {
        int i = (int)(r % PACK_ROWS);
        const uint8_t *src = w + (size_t)r * rb;
        uint8_t *g = dst + (size_t)(r / PACK_ROWS) * group_bytes, *body = g + PACK_Q3K_HEAD(nsb);
        for (int64_t b = 0; b < nsb; b++, src += Q3_K_BYTES) {
            uint8_t *sb = body + (size_t)b * PACK_Q3K_BYTES, u[QK_K];
            for (int h = 0; h < 2; h++) /* u = q + 4: Q2_K's two bits, plus 4 where the hmask bit is set */
                for (int k = 0; k < 4; k++)
                    for (int l = 0; l < 32; l++)
                        u[128 * h + 32 * k + l] =
                            (uint8_t)(((src[32 + 32 * h + l] >> (2 * k)) & 3) | ((src[l] >> (4 * h + k)) & 1) << 2);
            int8_t sc[16];
            quant_q3k_scales(src + 96, sc);
            for (int j = 0; j < 16; j++) sb[24 * 64 + 32 * (j / 2) + 2 * i + j % 2] = (uint8_t)sc[j];
            for (int p = 0; p < 8; p++) { /* sub-blocks 2p, 2p + 1: weights 32p.. */
                uint32_t v[8], x[3];
                for (int k = 0; k < 8; k++) memcpy(&v[k], u + 32 * p + 4 * k, 4);
                pack_q3_k_dword(x, v);
                for (int o = 0; o < 3; o++) memcpy(sb + 192 * p + 64 * o + 4 * i, &x[o], 4);
            }
            memcpy(g + 32 * (size_t)b + 2 * i, src + 108, 2); /* d */
        }
    }
}

/* Where a 32-element type's fields sit in its mapped block (quant_impl.h), -1: absent. */
typedef struct b32_fields {
    int bytes, qs, qh, m; /* the scale (f16 d, MXFP4's E8M0 byte) is at 0 */
    int h, has_m, e8m0;   /* the packed layout's PACK_B32_PAIR(h, has_m) */
} b32_fields;

static int b32_fields_of(uint32_t wtype, b32_fields *f) {
    switch (wtype) {
    case GGUF_TYPE_Q4_1: *f = (b32_fields){Q4_1_BYTES, 4, -1, 2, 0, 1, 0}; return 1;
    case GGUF_TYPE_Q5_0: *f = (b32_fields){Q5_0_BYTES, 6, 2, -1, 1, 0, 0}; return 1;
    case GGUF_TYPE_Q5_1: *f = (b32_fields){Q5_1_BYTES, 8, 4, 2, 1, 1, 0}; return 1;
    case GGUF_TYPE_IQ4_NL: *f = (b32_fields){IQ4_NL_BYTES, 2, -1, -1, 0, 0, 0}; return 1;
    case GGUF_TYPE_MXFP4: *f = (b32_fields){MXFP4_BYTES, 1, -1, -1, 0, 0, 1}; return 1;
    default: return 0;
    }
}

/* The fifth bits of a block (bit j of qh: weight j) as the packed H's 4 bytes of one row: byte
 * j's bit k < 4 is weight 4k + j's, bit 4 + k weight 16 + 4k + j's. */
static void b32_fifth_bits(uint8_t out[4], const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, sizeof h);
    for (int j = 0; j < 4; j++) {
        unsigned v = 0;
        for (int k = 0; k < 4; k++) v |= ((h >> (4 * k + j)) & 1u) << k | ((h >> (16 + 4 * k + j)) & 1u) << (4 + k);
        out[j] = (uint8_t)v;
    }
}

/* Q4_1 / Q5_0 / Q5_1 / IQ4_NL / MXFP4 rows -> PACK_B32_PAIR's layout (quant_impl.h). */
static void pack_b32(uint8_t *dst, const uint8_t *w, size_t rb, int64_t n_rows, int64_t nb, size_t group_bytes,
                     const b32_fields *f) {
    const size_t qbytes = PACK_B32_QBYTES(f->h), pair_bytes = PACK_B32_PAIR(f->h, f->has_m);
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *g = dst + (size_t)(r / PACK_ROWS) * group_bytes;
        int i = (int)(r % PACK_ROWS);
        const uint8_t *src = w + (size_t)r * rb;
        for (int64_t b = 0; b < nb; b++, src += f->bytes) {
            uint8_t *pair = g + (size_t)(b / 2) * pair_bytes, *q = pair + qbytes * (size_t)(b % 2),
                    *sc = pair + 2 * qbytes;
            pack_dwords(q, src + f->qs, 4, i);
            if (f->h) b32_fifth_bits(q + 256 + 4 * i, src + f->qh);
            if (f->e8m0) sc[16 * (b % 2) + i] = src[0];
            else memcpy(sc + 32 * (b % 2) + 2 * i, src, 2);
            if (f->has_m) memcpy(sc + 64 + 32 * (b % 2) + 2 * i, src + f->m, 2);
        }
    }
}

/* 2-bit field f (bits 2f, 2f + 1) of x */
#define F2(x, f) ((unsigned)((x) >> (2 * (f))) & 3u)

/* One 16-bit word of L0, L1 and H (PACK_Q6K_BYTES, quant_impl.h): the bytes whose unpacking gives
 * the 6-bit values p[0..1] (in W0), q (W1), r (W2), s (W3). Written as 2-bit fields a0..h1 (4 per
 * byte), each equation of the unpack solved in turn: every step uses fields set before it. */
static void pack_q6_k_word(uint8_t l0[2], uint8_t l1[2], uint8_t h[2], const uint8_t p[2], const uint8_t q[2],
                           const uint8_t r[2], const uint8_t s[2]) {
    unsigned a0[4], a1[4], b0[4], b1[4], h0[4], h1[4];
    h1[3] = F2(q[1], 2), h1[0] = F2(s[1], 2), b0[0] = F2(r[0], 0), b0[2] = F2(s[0], 0), b0[3] = F2(s[0], 1);
    h0[1] = F2(r[0], 2) ^ b0[2], a1[0] = F2(p[1], 0) ^ h1[0], h0[3] = F2(q[0], 2) ^ a1[0];
    b1[0] = F2(r[1], 0) ^ h0[3], h0[0] = F2(s[0], 2) ^ b1[0], b0[1] = F2(r[0], 1) ^ h0[0];
    b1[1] = F2(r[1], 1) ^ h1[0], b1[3] = F2(s[1], 1) ^ h0[3], a0[2] = F2(q[0], 0) ^ h0[1];
    h0[2] = F2(p[0], 2) ^ a0[2], a0[3] = F2(q[0], 1) ^ h0[2], b1[2] = F2(s[1], 0) ^ h0[2];
    h1[1] = F2(r[1], 2) ^ b1[2], a1[1] = F2(p[1], 1) ^ h1[1], a0[0] = F2(p[0], 0) ^ h0[0];
    a0[1] = F2(p[0], 1) ^ h0[1], a1[2] = F2(q[1], 0) ^ h1[1], h1[2] = F2(p[1], 2) ^ a1[2];
    a1[3] = F2(q[1], 1) ^ h1[2];
#define JOIN(v) (uint8_t)((v)[0] | (v)[1] << 2 | (v)[2] << 4 | (v)[3] << 6)
    l0[0] = JOIN(a0), l0[1] = JOIN(a1), l1[0] = JOIN(b0), l1[1] = JOIN(b1), h[0] = JOIN(h0), h[1] = JOIN(h1);
#undef JOIN
}
#undef F2

/* The unpack is linear over GF(2), so is its solution: a word's six stored bytes are the XOR of
 * one table entry per 6-bit value (t[k][v]: the solution for value v at input k, p[0] p[1] q[0]
 * ... s[1], zeros elsewhere; bytes l0[0..1], l1[0..1], h[0..1] from the low end). */
typedef struct q6_pack_tab {
    uint64_t t[8][64];
} q6_pack_tab;

static void q6_pack_tab_init(q6_pack_tab *tab) {
    for (int k = 0; k < 8; k++)
        for (int v = 0; v < 64; v++) {
            uint8_t in[8] = {0}, l0[2], l1[2], h[2];
            in[k] = (uint8_t)v;
            pack_q6_k_word(l0, l1, h, in, in + 2, in + 4, in + 6);
            uint8_t o[6] = {l0[0], l0[1], l1[0], l1[1], h[0], h[1]};
            uint64_t u = 0;
            for (int i = 0; i < 6; i++) u |= (uint64_t)o[i] << (8 * i);
            tab->t[k][v] = u;
        }
}

/* Q6_K rows -> quant_pack's layout (the d, then PACK_Q6K_BYTES per group and super-block). */
static void pack_q6_k(uint8_t *dst, const uint8_t *w, size_t rb, int64_t n_rows, int64_t nsb, size_t group_bytes) {
    q6_pack_tab tab;
    q6_pack_tab_init(&tab);
    for (int64_t r = 0; r < n_rows; r++) {
        int i = (int)(r % PACK_ROWS);
        const uint8_t *src = w + (size_t)r * rb;
        uint8_t *g = dst + (size_t)(r / PACK_ROWS) * group_bytes, *body = g + PACK_Q6K_HEAD(nsb);
        for (int64_t b = 0; b < nsb; b++, src += Q6_K_BYTES) {
            uint8_t *sb = body + (size_t)b * PACK_Q6K_BYTES, v[QK_K];
            quant_q6k_values(v, src);
            for (int j = 0; j < 16; j++) sb[16 * j + i] = src[192 + j]; /* scales */
            for (int j = 0; j < 16; j++)
                for (int h = 0; h < 2; h++) { /* W0..W3 are weights 16j + 4k.., this word their bytes 2h, 2h + 1 */
                    uint8_t *q = sb + 256 + 192 * j + 4 * i + 2 * h;
                    const uint8_t *x = v + 16 * j + 2 * h;
                    uint64_t u = 0;
                    for (int k = 0; k < 8; k++) u ^= tab.t[k][x[4 * (k / 2) + k % 2]];
                    for (int o = 0; o < 6; o++) q[64 * (o / 2) + o % 2] = (uint8_t)(u >> (8 * o));
                }
            memcpy(g + 32 * (size_t)b + 2 * i, src + 208, 2); /* d */
        }
    }
}

/* Packed copies are read start to end once per token: on 4 KB pages that is a TLB miss every 64
 * lines. The whole 2 MB pages of a copy are asked to be huge pages (where the kernel's policy is
 * "madvise"; a no-op where it is "never", and already so where it is "always"); its tail stays on
 * small pages, so no memory is spent on rounding up. */
#define HUGE_PAGE ((size_t)2 << 20)

static void *packed_alloc(size_t bytes) {
    if (bytes < HUGE_PAGE) return aligned_alloc(64, bytes);
    void *p = NULL;
    if (posix_memalign(&p, HUGE_PAGE, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice only: failure changes nothing */
#endif
    return p;
}

/* ATTND_NO_REPACK: unset, empty or 0: packing on; the name of a weight type (Q3_K): that type kept
 * as mapped (A/B runs of one type's packed kernel in one binary); anything else (1): all kept. */
static int repack_off(uint32_t wtype) {
    const char *no = getenv("ATTND_NO_REPACK");
    if (!no || !*no || strcmp(no, "0") == 0) return 0;
    for (uint32_t t = 0; t < 64; t++) {
        const char *name = gguf_type_name(t);
        if (name && strcasecmp(no, name) == 0) return t == wtype;
    }
    return 1;
}

_Static_assert(PACK_ROWS == QUANT_PACK_ROWS, "quant.h's slice unit is the packed layout's group");

quant_packed *quant_pack_begin(uint32_t wtype, int64_t n_rows, int64_t n_cols) {
    if (repack_off(wtype)) return NULL;
    int q8_0 = wtype == GGUF_TYPE_Q8_0, q4_0 = wtype == GGUF_TYPE_Q4_0, q4_k = wtype == GGUF_TYPE_Q4_K;
    int q5_k = wtype == GGUF_TYPE_Q5_K, iq4_xs = wtype == GGUF_TYPE_IQ4_XS, q2_k = wtype == GGUF_TYPE_Q2_K;
    int q3_k = wtype == GGUF_TYPE_Q3_K;
    b32_fields bf = {0};
    int b32 = b32_fields_of(wtype, &bf);
    uint32_t be = gguf_type_block_elems(wtype);
    if (!quant_packed_kernel(quant_kernels_active(), wtype) || n_rows <= 0 || n_cols <= 0 || n_cols % be != 0)
        return NULL;
    quant_packed *pk = calloc(1, sizeof *pk);
    if (!pk) return NULL;
    int64_t nb = n_cols / be, n_groups = (n_rows + PACK_ROWS - 1) / PACK_ROWS;
    *pk = (quant_packed){.wtype = wtype, .n_rows = n_rows, .n_cols = n_cols};
    /* round_up keeps every group 64-byte aligned */
    pk->group_bytes = q8_0     ? (size_t)(nb + 1) / 2 * PACK_Q80_PAIR
                      : q4_0   ? (size_t)(nb + 1) / 2 * PACK_Q40_PAIR
                      : b32    ? (size_t)(nb + 1) / 2 * PACK_B32_PAIR(bf.h, bf.has_m)
                      : q4_k   ? (size_t)nb * PACK_Q4K_BYTES
                      : q5_k   ? (size_t)nb * PACK_Q5K_BYTES
                      : iq4_xs ? (size_t)nb * PACK_IQ4XS_BYTES
                      : q2_k   ? (size_t)nb * PACK_Q2K_BYTES
                      : q3_k   ? PACK_Q3K_HEAD(nb) + (size_t)nb * PACK_Q3K_BYTES
                               : PACK_Q6K_HEAD(nb) + (size_t)nb * PACK_Q6K_BYTES;
    pk->bytes = (size_t)n_groups * pk->group_bytes;
    pk->data = packed_alloc(pk->bytes);
    if (!pk->data) {
        free(pk);
        return NULL;
    }
    if (b32) memset(pk->data, 0, pk->bytes); /* padding rows, an odd last block's partner */
    else memset(pk->data + (size_t)(n_groups - 1) * pk->group_bytes, 0, pk->group_bytes); /* padding rows */
    if ((q8_0 || q4_0) && nb % 2) { /* an odd last block's partner */
        size_t pair = q8_0 ? PACK_Q80_PAIR : PACK_Q40_PAIR, half = q8_0 ? 512 : 256;
        for (int64_t g = 0; g < n_groups; g++)
            memset(pk->data + (size_t)g * pk->group_bytes + (size_t)(nb / 2) * pair + half, 0, pair - half);
    }
    int q6_k = !(q8_0 || q4_0 || b32 || q4_k || q5_k || iq4_xs || q2_k || q3_k); /* the last of the packed types */
    size_t head = q3_k ? PACK_Q3K_HEAD(nb) : q6_k ? PACK_Q6K_HEAD(nb) : 0;
    if (head) /* the head's padding past the d's (an odd count of them): bytes no packer writes, made defined */
        for (int64_t g = 0; g < n_groups; g++)
            memset(pk->data + (size_t)g * pk->group_bytes + (size_t)nb * 32, 0, head - (size_t)nb * 32);
    return pk;
}

void quant_pack_rows(quant_packed *pk, const void *w, int64_t r0, int64_t r1) {
    ATTND_ASSERT(r0 % PACK_ROWS == 0 && 0 <= r0 && r0 <= r1 && r1 <= pk->n_rows);
    uint32_t wtype = pk->wtype;
    int q8_0 = wtype == GGUF_TYPE_Q8_0, q4_0 = wtype == GGUF_TYPE_Q4_0, q4_k = wtype == GGUF_TYPE_Q4_K;
    int q5_k = wtype == GGUF_TYPE_Q5_K, iq4_xs = wtype == GGUF_TYPE_IQ4_XS, q2_k = wtype == GGUF_TYPE_Q2_K;
    int q3_k = wtype == GGUF_TYPE_Q3_K;
    b32_fields bf = {0};
    int b32 = b32_fields_of(wtype, &bf);
    int64_t nb = pk->n_cols / gguf_type_block_elems(wtype), n = r1 - r0;
    size_t rb = quant_row_bytes(wtype, pk->n_cols);
    /* every packer indexes groups from its first row: rows [r0, r1) are a packing of their own */
    uint8_t *dst = pk->data + (size_t)(r0 / PACK_ROWS) * pk->group_bytes;
    const uint8_t *src = (const uint8_t *)w + (size_t)r0 * rb;
    if (n == 0) return;
    pack_sb_fn sb = q4_k ? pack_sb_q4_k : q5_k ? pack_sb_q5_k : iq4_xs ? pack_sb_iq4_xs : q2_k ? pack_sb_q2_k : NULL;
    if (q8_0) pack_q8_0(dst, src, rb, n, nb, pk->group_bytes);
    else if (q4_0) pack_q4_0(dst, src, rb, n, nb, pk->group_bytes);
    else if (b32) pack_b32(dst, src, rb, n, nb, pk->group_bytes, &bf);
    else if (sb)
        pack_super_blocks(dst, src, rb, n, nb, pk->group_bytes, quant_row_bytes(wtype, QK_K),
                          pk->group_bytes / (size_t)nb, sb);
    else if (q3_k) pack_q3_k(dst, src, rb, n, nb, pk->group_bytes);
    else pack_q6_k(dst, src, rb, n, nb, pk->group_bytes);
}

quant_packed *quant_pack(const void *w, uint32_t wtype, int64_t n_rows, int64_t n_cols) {
    quant_packed *pk = quant_pack_begin(wtype, n_rows, n_cols);
    if (pk) quant_pack_rows(pk, w, 0, n_rows);
    return pk;
}

void quant_packed_destroy(quant_packed *pk) {
    if (!pk) return;
    free(pk->data);
    free(pk);
}

size_t quant_packed_bytes(const quant_packed *pk) { return pk ? pk->bytes : 0; }


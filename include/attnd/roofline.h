/*
 * roofline.h — the machine's limits next to what the engine reaches, for `attnd bench`: the read
 * bandwidth a streaming loop gets from memory (decode reads every weight once per token, so this
 * is its wall), the compute peak of the prefill kernel path (int8 VNNI or AMX tiles), and what
 * one token costs in bytes read (decode) and in operations (prefill) for a given model.
 *
 *     roofline_probe *p;
 *     roofline_probe_create(&p, (size_t)1 << 30, NULL);     // 1 GiB, far beyond the last-level cache
 *     double gbs = roofline_read_gbs(p, 2, 3);               // best of 3 sweeps on 2 threads
 *     double share = decode_tps * roofline_decode_bytes(m, KV_F16, pos) / 1e9 / gbs;
 *     roofline_probe_destroy(p);
 *
 * The probe runs on the engine's worker pool, so "n threads" means what it means for decode.
 * Nothing here is thread-safe against another probe on the same pool: run one at a time.
 */
#ifndef ATTND_ROOFLINE_H
#define ATTND_ROOFLINE_H

#include <stddef.h>

#include "attnd/common.h"
#include "attnd/kv.h"
#include "attnd/model.h"

typedef struct roofline_probe roofline_probe;

/* Allocates and writes a buffer of `bytes` (rounded down to 4 KiB, at least 4 KiB) so that its pages
 * are present before the first sweep. Errors: ATTND_ERR_NOMEM. *out is owned by the caller. */
attnd_status roofline_probe_create(roofline_probe **out, size_t bytes, attnd_err *err);
void roofline_probe_destroy(roofline_probe *p); /* accepts NULL */
size_t roofline_probe_bytes(const roofline_probe *p);

/* Reads the whole buffer `reps` times with the widest loads the CPU has (roofline_read_isa), the
 * buffer split into n_threads slices on the engine's pool, and returns the best sweep in GB/s
 * (1e9 bytes per second). Always positive and finite. */
double roofline_read_gbs(roofline_probe *p, int n_threads, int reps);
const char *roofline_read_isa(void); /* "avx512", "avx2" or "portable" (static string) */

/* The core clock in GHz, timed over a chain of dependent integer adds (one per cycle on every x86
 * core since the Pentium Pro); the best of many short bursts. 0 where it cannot be measured (not x86). */
double roofline_clock_ghz(void);

/* The compute peak of the kernel path a prefill of n_tokens runs on for m's weights (quantized:
 * int8; F32/F16/BF16: float FMA): path names it ("avx512 vnni int8", "amx bf16", ...); ops_per_cycle is per core (a multiply-add counts 2), 0 when the path
 * has no peak to quote (portable C, emulated tiles); then gops is 0 too. */
typedef struct roofline_peak {
    const char *path;     /* static string */
    double ops_per_cycle; /* per core */
    double ghz;           /* roofline_clock_ghz() */
    double gops;          /* ops_per_cycle * n_threads * ghz: the path's peak, 1e9 ops per second */
} roofline_peak;
roofline_peak roofline_prefill_peak(const model *m, int n_tokens, int n_threads);

/* Bytes decode reads from the weights per token: every tensor of the file once, except the token
 * embedding table, of which it reads one row (unless the output head is that table: then all of
 * it), Gemma 4's per-layer embedding table (one row), the experts of a Mixture of Experts (only
 * the n_expert_used of n_expert) and the MTP blocks (none: decode does not run them); plus a
 * recurrent model's state (kv_state_bytes), read once per token. */
double roofline_weight_bytes(const model *m);
/* The parameters one decode token uses, counted as roofline_weight_bytes counts bytes (no state). */
double roofline_active_params(const model *m);
/* roofline_weight_bytes plus the KV cache a token at position pos reads (pos earlier positions
 * in every global layer, at most the window in the sliding-window layers), in cache type kv. */
double roofline_decode_bytes(const model *m, kv_type kv, double pos);
/* Operations (2 per multiply-add) of one prompt token in a prefill of n_tokens: the layers'
 * matrices (the experts used) and attention's Q·K and P·V over the (n_tokens + 1) / 2 keys a token
 * sees on average. The output head, run for the last token only, is left out. */
double roofline_prefill_ops(const model *m, int n_tokens);

#endif /* ATTND_ROOFLINE_H */

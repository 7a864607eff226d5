/*
 * quantize_iq.h — (private to engine/kernels/quantize*.c) the encoders of the lattice types of
 * issue 47: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (block layouts: quant_iq.h).
 */
#ifndef ATTND_QUANTIZE_IQ_H
#define ATTND_QUANTIZE_IQ_H

#include <stdbool.h>
#include <stdint.h>

#include "attnd/common.h"

/* True for the seven lattice types these encoders write. */
bool quantize_iq_is_lattice(uint32_t type);

/* Builds the search tables of `type` (its grid's map from rounded points to grid entries and the
 * neighbour lists of the points off the grid): once per process, thread-safe; ATTND_ERR_NOMEM
 * when they cannot be allocated (nothing is kept then, a later call tries again). The tables
 * live for the process. */
attnd_status quantize_iq_prepare(uint32_t type);

/* dst = one super-block (256 values of x) in lattice type `type`; w (256) weighs each value's
 * squared error (> 0 somewhere, or all zero: then the block is all zero). quantize_iq_prepare(type)
 * must have succeeded. Pure and thread-safe. */
void quantize_iq_block(uint8_t *dst, const float *x, const float *w, uint32_t type);

#endif /* ATTND_QUANTIZE_IQ_H */

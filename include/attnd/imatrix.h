/*
 * imatrix.h — importance matrices (llama.cpp's imatrix): for every weight matrix of a model, the
 * per-input-column sum of squared activations over the rows it was applied to, and how many rows
 * were summed (per expert for a MoE expert tensor). `attnd imatrix` collects one through the
 * engine's matmul hook; `attnd quantize --imatrix` weighs its quantizers' error terms with the
 * mean squared activation of each column (sum / count).
 *
 *     imatrix *im; imatrix_create(&im);
 *     imatrix_add(im, "blk.0.attn_q.weight", -1, 1, x, n_rows, cols);   // one call per matmul
 *     imatrix_write_gguf(im, "imatrix.gguf", &err);
 *     imatrix_destroy(im);
 *
 * Files: llama.cpp's GGUF format (general.type "imatrix", imatrix.datasets / chunk_count /
 * chunk_size, and per matrix NAME.in_sum2 F32 [cols, n_mat] and NAME.counts F32 [1, n_mat]) is
 * written and read; the legacy .dat (entries of name, ncall, values = sum / count * ncall, then an
 * optional chunk count and dataset name) is written and read too. A legacy entry is held as
 * sum2 = its values and count = ncall, so sum2 / count is the mean in both.
 * Not thread-safe: one owner at a time.
 */
#ifndef ATTND_IMATRIX_H
#define ATTND_IMATRIX_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

typedef struct imatrix_entry {
    char *name;    /* the weight tensor's GGUF name (owned) */
    int n_mat;     /* 1, or the experts of a MoE tensor */
    int cols;      /* the weight's input width */
    double *sum2;  /* (n_mat, cols) sums of squared inputs */
    double *count; /* (n_mat) rows summed into each matrix */
} imatrix_entry;

typedef struct imatrix {
    imatrix_entry *entries; /* (n), in the order first seen (written sorted by name) */
    int n, cap;
    uint32_t chunk_count, chunk_size; /* chunks evaluated, tokens per chunk (0 when unknown) */
    char *dataset;                    /* the text file the sums came from (owned; NULL when unknown) */
    char *file;                       /* the path imatrix_load read (owned; NULL otherwise) */
} imatrix;

attnd_status imatrix_create(imatrix **out); /* ATTND_ERR_NOMEM */
void imatrix_destroy(imatrix *im);          /* accepts NULL */

/* Adds the squares of n rows of x (n, cols) to weight `name`, matrix `expert` of n_mat (expert -1
 * for a dense weight, n_mat 1). Errors: ATTND_ERR_INVALID when name was seen with another shape,
 * or a sum is no longer finite; ATTND_ERR_NOMEM. */
attnd_status imatrix_add(imatrix *im, const char *name, int expert, int n_mat, const float *x, int n, int cols,
                         attnd_err *err);

/* The entry of weight `name` (borrowed, valid until the next add), or NULL. */
const imatrix_entry *imatrix_find(const imatrix *im, const char *name);

/* out (cols) = the mean squared input of each column of matrix `mat` of e (sum2 / count); every
 * column 1 when nothing was summed into it (as llama.cpp's quantizer reads partial data). */
void imatrix_importance(const imatrix_entry *e, int mat, float *out);

/* Writes llama.cpp's GGUF imatrix format (temporary file + rename). ATTND_ERR_IO, ATTND_ERR_NOMEM. */
attnd_status imatrix_write_gguf(const imatrix *im, const char *path, attnd_err *err);
/* Writes the legacy .dat format (entries with no rows summed hold 1s, as llama.cpp writes them). */
attnd_status imatrix_write_dat(const imatrix *im, const char *path, attnd_err *err);

/* Reads either format (a GGUF by its magic, otherwise .dat) from a file or from memory.
 * *out is a new imatrix (caller destroys) on success. Errors: ATTND_ERR_IO, ATTND_ERR_FORMAT
 * naming what is wrong (truncated, sizes that disagree, a sum without counts, no entries),
 * ATTND_ERR_NOMEM. */
attnd_status imatrix_load(imatrix **out, const char *path, attnd_err *err);
attnd_status imatrix_load_memory(imatrix **out, const void *data, size_t size, attnd_err *err);

#endif /* ATTND_IMATRIX_H */

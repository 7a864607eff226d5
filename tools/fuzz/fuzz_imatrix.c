/*
 * fuzz_imatrix.c — (fuzzing only) the importance-matrix reader (engine/imatrix.c) on arbitrary
 * bytes: both llama.cpp formats (a GGUF by its magic, else the legacy .dat), from memory and,
 * through a memfd, from a path as `attnd quantize --imatrix` reads it. Whatever loads is walked:
 * every entry's shape, its importances, and a lookup by its own name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/imatrix.h"
#include "fuzz_util.h"

static void walk(const imatrix *im) {
    volatile float sink = 0;
    FUZZ_CHECK(im->n > 0, "an imatrix loaded with no entries");
    for (int i = 0; i < im->n; i++) {
        const imatrix_entry *e = &im->entries[i];
        FUZZ_CHECK(e->n_mat >= 1 && e->cols >= 1, "entry %s has shape %d x %d", e->name, e->n_mat, e->cols);
        FUZZ_CHECK(imatrix_find(im, e->name) != NULL, "entry %s not found by name", e->name);
        float *imp = malloc(sizeof(float) * (size_t)e->cols);
        if (!imp) continue;
        for (int m = 0; m < e->n_mat; m++) {
            imatrix_importance(e, m, imp);
            sink += imp[0] + imp[e->cols - 1];
        }
        free(imp);
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    imatrix *im = NULL;
    attnd_err err;
    if (imatrix_load_memory(&im, data, size, &err) == ATTND_OK) {
        walk(im);
        imatrix_destroy(im);
    } else {
        FUZZ_CHECK(im == NULL && err.msg[0], "a refused imatrix left a result or no message");
    }
    char path[64];
    int fd = fuzz_memfd(data, size, path);
    if (fd < 0) return 0;
    if (imatrix_load(&im, path, &err) == ATTND_OK) {
        walk(im);
        imatrix_destroy(im);
    }
    close(fd);
    return 0;
}

/*
 * cmd_quantize.c — `attnd quantize IN.gguf OUT.gguf TYPE`: re-encode a model's weights
 * (engine/kernels/quantize.c does the work; this file parses arguments and reports).
 */
#include <stdio.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/imatrix.h"
#include "attnd/quantize.h"
#include "commands.h"

static const char *USAGE =
    "usage: attnd quantize IN.gguf OUT.gguf TYPE [--imatrix FILE] [--quiet]\n"
    "\n"
    "Writes OUT.gguf with the weights of IN.gguf (F32, F16 or BF16) re-encoded as TYPE:\n"
    "  F16, BF16, Q8_0, Q4_K, Q6_K, MXFP4          every 2-D weight in that type\n"
    "  Q2_K, Q3_K_S, Q3_K_M, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS\n"
    "                                              llama.cpp's mixes: its per-tensor types (e.g.\n"
    "                                              Q4_K_M: Q6_K for the output head and for\n"
    "                                              attn_v/ffn_down in some layers)\n"
    "  IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M\n"
    "                                              llama.cpp's lattice mixes; all but IQ3_S and\n"
    "                                              IQ3_M need --imatrix (llama.cpp refuses them\n"
    "                                              without one: the result would be garbage)\n"
    "Norms and other 1-D tensors stay as they are. Rows the block size does not divide fall back\n"
    "as in llama.cpp (Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, Q2_K/Q3_K to Q4_0, IQ1..IQ4_XS to\n"
    "IQ4_NL), then to F16. Metadata is copied. OUT is written to a temporary file and renamed, so\n"
    "it is never half-written. Prints one line per tensor whose type changes.\n"
    "  --imatrix FILE  weigh each weight's error by its column's importance (llama.cpp's imatrix,\n"
    "                  GGUF or legacy .dat; `attnd imatrix` writes one) in the types with a\n"
    "                  weighted search: Q2_K..Q6_K, Q4_0, Q5_0, IQ1..IQ4 (not Q8_0, Q4_1,\n"
    "                  Q5_1, MXFP4, which have none)\n"
    "  --quiet         print only the summary line\n";

typedef struct progress {
    bool quiet;
    int changed, kept;
} progress;

static void on_tensor(void *user, const char *name, uint32_t from, uint32_t to) {
    progress *p = user;
    if (from == to) {
        p->kept++;
        return;
    }
    p->changed++;
    if (!p->quiet) fprintf(stderr, "  %-32s %-5s -> %s\n", name, gguf_type_name(from), gguf_type_name(to));
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    progress p = {0};
    const char *imatrix_path = NULL;
    cli_args args = {pos, 0, 3};
    const cli_opt opts[] = {CLI_OPT_SET("--quiet", &p.quiet), CLI_OPT_STR("--imatrix", &imatrix_path),
                            CLI_OPT_ARGS(&args)};
    if (!cli_parse_opts("quantize", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    if (args.n < 3) cli_usage_error("quantize", "need IN.gguf OUT.gguf TYPE");
    quantize_target t;
    if (quantize_target_parse(pos[2], &t) != ATTND_OK)
        cli_usage_error("quantize", "unknown TYPE '%s' (one of %s)", pos[2], quantize_target_list());
    attnd_err err = {{0}};
    imatrix *im = NULL;
    attnd_status lst = imatrix_path ? imatrix_load(&im, imatrix_path, &err) : ATTND_OK;
    if (lst != ATTND_OK) return cli_exit("quantize", lst, &err);
    if (im)
        fprintf(stderr, "attnd quantize: imatrix %s: %d weights, %u chunks\n", imatrix_path, im->n, im->chunk_count);
    attnd_status st = quantize_file_imatrix(pos[0], pos[1], t, im, on_tensor, &p, &err);
    imatrix_destroy(im);
    if (st != ATTND_OK) {
        fprintf(stderr, "attnd quantize: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "attnd quantize: wrote %s (%s): %d tensors re-encoded, %d kept\n", pos[1],
            quantize_target_name(t), p.changed, p.kept);
    return 0;
}

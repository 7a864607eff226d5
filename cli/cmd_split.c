/*
 * cmd_split.c — `attnd split IN.gguf PREFIX --parts N`: a model as a split set of N files, the
 * layout llama.cpp's gguf-split writes and every loader of attnd's reads (engine/gguf_writer.c).
 */
#include <stdio.h>

#include "attnd/gguf.h"
#include "attnd/gguf_writer.h"
#include "commands.h"

static const char *USAGE =
    "usage: attnd split IN.gguf PREFIX --parts N\n"
    "\n"
    "Writes IN.gguf as PREFIX-00001-of-0000N.gguf ... PREFIX-0000N-of-0000N.gguf: runs of its\n"
    "tensors in file order, about equal in bytes; the first file carries the metadata. Load the set\n"
    "by naming its first file (attnd and llama.cpp both read it).\n"
    "  --parts N   how many files (2..9999, at most one per tensor)\n";

int cmd_split(int argc, char **argv) {
    const char *pos[2];
    int parts = 0;
    cli_args args = {pos, 0, 2};
    const cli_opt opts[] = {CLI_OPT_INT("--parts", &parts, 2, 9999), CLI_OPT_ARGS(&args)};
    if (!cli_parse_opts("split", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    if (args.n < 2 || !parts) cli_usage_error("split", "need IN.gguf PREFIX --parts N");
    gguf_file *f = NULL;
    attnd_err err = {{0}};
    attnd_status st = gguf_open(&f, pos[0], &err);
    if (!st) st = gguf_split_write(f, pos[1], parts, &err);
    gguf_close(f);
    if (st) {
        fprintf(stderr, "attnd split: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "attnd split: wrote %s-00001-of-%05d.gguf and %d more\n", pos[1], parts, parts - 1);
    return 0;
}

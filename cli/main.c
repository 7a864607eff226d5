/*
 * main.c — the `attnd` executable: dispatches to the subcommand named by argv[1].
 * To add a subcommand, write cli/cmd_<name>.c and add one row to COMMANDS.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
    const char *summary;
} command;

/* `attnd version` (and `attnd --version`): the release this binary is. */
static int cmd_version(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: attnd version\n");
        return 2;
    }
    printf("attnd %s\n", ATTND_VERSION);
    return 0;
}

static const command COMMANDS[] = {
    {"info", cmd_info, "describe a GGUF model file (architecture, sizes, tensors)"},
    {"serve", cmd_serve, "serve the OpenAI-compatible HTTP API (completions, chat, sessions)"},
    {"convert-llama2c", cmd_convert_llama2c, "convert a llama2.c checkpoint + tokenizer.bin to GGUF"},
    {"generate", cmd_generate, "generate a continuation of a prompt"},
    {"chat", cmd_chat, "chat with a model on its own template (or with a running server: --url)"},
    {"attention", cmd_attention, "which earlier tokens each token attends to: JSON, SVG heatmap or text"},
    {"heads", cmd_heads, "each attention head's role: previous-token, induction, sink, local scores"},
    {"score", cmd_score, "teacher-forced argmax and log-probabilities of a token sequence"},
    {"embed", cmd_embed, "embeddings of texts as JSON lines (pooled and normalised as /v1/embeddings)"},
    {"rerank", cmd_rerank, "a query's documents sorted by a reranking model's relevance scores"},
    {"bench", cmd_bench, "prefill/decode speed vs llama.cpp, and decode cost along a long generation"},
    {"tokenize", cmd_tokenize, "text to token ids, as POST /tokenize answers"},
    {"detokenize", cmd_detokenize, "token ids to text, as POST /detokenize answers"},
    {"quantize", cmd_quantize, "re-encode a model's weights (F16 ... Q8_0, the K-quant mixes, IQ4_XS, MXFP4)"},
    {"imatrix", cmd_imatrix, "an importance matrix from a text (llama.cpp's imatrix), for quantize --imatrix"},
    {"template", cmd_template, "render a chat template (the model's or a file's) with JSON variables"},
    {"pull", cmd_pull, "download a GGUF model from the Hugging Face Hub (org/repo[:QUANT]) into the cache"},
    {"models", cmd_models, "list the models in the cache that `attnd pull` fills"},
    {"split", cmd_split, "write a model as a split set of N files (llama.cpp's gguf-split layout)"},
    {"version", cmd_version, "print the version"},
    {"tokenize-bench", cmd_tokenize_bench, "measure tokenizer speed (MB/s) on a few MB of prose"},
};

static void print_help(FILE *out) {
    fprintf(out, "usage: attnd <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(COMMANDS) / sizeof(COMMANDS[0]); i++)
        fprintf(out, "  %-18s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(out, "\n'attnd <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_help(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        print_help(stdout);
        return 0;
    }
    if (!strcmp(name, "--version")) return cmd_version(1, argv + 1);
    for (size_t i = 0; i < sizeof(COMMANDS) / sizeof(COMMANDS[0]); i++)
        if (!strcmp(name, COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "attnd: unknown command '%s'\n", name);
    fprintf(stderr, "usage: attnd <command> [options]   (attnd --help lists the commands)\n");
    return 2;
}

/*
 * commands.h — the subcommands of the `attnd` executable and the small argument helpers
 * they share. Each subcommand lives in cli/cmd_<name>.c and is listed in main.c's table.
 * CLI code may exit(): usage errors exit 2, runtime failures exit 1.
 */
#ifndef ATTND_CLI_COMMANDS_H
#define ATTND_CLI_COMMANDS_H

#include <stdbool.h>
#include <stdint.h>

#include "attnd/engine.h"
#include "attnd/tokenizer.h"

int cmd_info(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_convert_llama2c(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_rerank(int argc, char **argv);
int cmd_imatrix(int argc, char **argv);
int cmd_attention(int argc, char **argv);
int cmd_heads(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_tokenize_bench(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_split(int argc, char **argv);

/* ---- argument helpers (cli/args.c) ---- */

/* Prints "attnd <cmd>: <message>" and a hint to use --help, then exits 2. */
_Noreturn void cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Strict number parsing: the whole string must be a number within [min, max], else usage error
 * naming the flag. */
long long cli_parse_int(const char *cmd, const char *flag, const char *s, long long min, long long max);
/* A finite float within lo..hi, either end open (lo_open: v > lo; hi_open: v < hi), else a usage
 * error naming the flag and the range. */
float cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, bool lo_open, double hi,
                      bool hi_open);

/* ---- option tables: one table per command instead of one parse loop per command ----
 *
 * A flag takes "--flag VALUE" or "--flag=VALUE" (a short one "-f VALUE"). The commands share
 * llama.cpp's spellings as aliases (args.c's ALIASES: -m --model, -c --ctx-size, -t --threads, -n
 * --n, -p --prompt, -s --seed, --temp --temperature, ...) wherever a command has the flag meant;
 * -ngl and --n-gpu-layers are read and ignored with a note (attnd computes on the CPU). A
 * command may add its own aliases (CLI_OPT_ALIAS). An unknown flag is a usage error that names
 * the nearest known one ("did you mean '--model'?"). */

typedef enum cli_opt_kind {
    CLI_STR,      /* --flag VALUE into (const char **)dst, borrowing argv */
    CLI_INT,      /* --flag N into (int *)dst, N within [min, max] */
    CLI_SET,      /* --flag alone sets (bool *)dst to true */
    CLI_CLEAR,    /* --flag alone sets (bool *)dst to false */
    CLI_KV,       /* --flag f16|f32|q8_0|q4_0 into (kv_type *)dst */
    CLI_FLOAT,    /* --flag X into (float *)dst, X within lo..hi (ends open as lo_open, hi_open) */
    CLI_FN,       /* --flag VALUE given to fn(cmd, flag as typed, VALUE, dst) */
    CLI_ALIAS,    /* flag is this command's other spelling of the option named `to` */
    CLI_RUN,      /* flag NULL: --model, --threads, --kv-type into (cli_run_opts *)dst */
    CLI_PROMPT,   /* flag NULL: --prompt, --tokens into (cli_prompt *)dst */
    CLI_GROUP,    /* flag NULL: the entries expand(dst) writes; --help shows group_usage */
    CLI_ARGS,     /* flag NULL: the positional arguments into (cli_args *)dst */
} cli_opt_kind;

typedef struct cli_opt {
    const char *flag;
    cli_opt_kind kind;
    void *dst; /* borrowed; written as the flag is met, left as it was when the flag is absent */
    long long min, max;        /* CLI_INT */
    double lo, hi;             /* CLI_FLOAT */
    bool lo_open, hi_open;
    void (*fn)(const char *cmd, const char *flag, const char *value, void *dst); /* CLI_FN */
    const char *to;            /* CLI_ALIAS */
    /* CLI_GROUP: writes up to cap entries for dst into out and returns their count */
    int (*expand)(void *dst, struct cli_opt *out, int cap);
    const char *group_usage;
} cli_opt;

/* Table entries; each checks the type of dst. */
#define CLI_OPT_STR(f_, d_) {.flag = (f_), .kind = CLI_STR, .dst = (1 ? (d_) : (const char **)0)}
#define CLI_OPT_INT(f_, d_, lo, hi) \
    {.flag = (f_), .kind = CLI_INT, .dst = (1 ? (d_) : (int *)0), .min = (lo), .max = (hi)}
#define CLI_OPT_SET(f_, d_) {.flag = (f_), .kind = CLI_SET, .dst = (1 ? (d_) : (bool *)0)}
#define CLI_OPT_CLEAR(f_, d_) {.flag = (f_), .kind = CLI_CLEAR, .dst = (1 ? (d_) : (bool *)0)}
#define CLI_OPT_KV(f_, d_) {.flag = (f_), .kind = CLI_KV, .dst = (1 ? (d_) : (kv_type *)0)}
#define CLI_OPT_FLOAT(f_, d_, lo_, lo_open_, hi_, hi_open_)                                              \
    {.flag = (f_), .kind = CLI_FLOAT, .dst = (1 ? (d_) : (float *)0), .lo = (lo_), .lo_open = (lo_open_), \
     .hi = (hi_), .hi_open = (hi_open_)}
#define CLI_OPT_FN(f_, fn_, d_) {.flag = (f_), .kind = CLI_FN, .fn = (fn_), .dst = (d_)}
#define CLI_OPT_ALIAS(f_, to_) {.flag = (f_), .kind = CLI_ALIAS, .to = (to_)}
#define CLI_OPT_RUN(d_) {.kind = CLI_RUN, .dst = (1 ? (d_) : (struct cli_run_opts *)0)}
#define CLI_OPT_PROMPT(d_) {.kind = CLI_PROMPT, .dst = (1 ? (d_) : (struct cli_prompt *)0)}
/* every sampling flag (sampling_args.c) into d_, a cli_sampling * */
#define CLI_OPT_SAMPLING(d_)                                                                                   \
    {.kind = CLI_GROUP, .dst = (1 ? (d_) : (struct cli_sampling *)0), .expand = cli_sampling_opts,          \
     .group_usage = CLI_SAMPLING_USAGE}
#define CLI_OPT_ARGS(d_) {.kind = CLI_ARGS, .dst = (1 ? (d_) : (struct cli_args *)0)}

/* The flags of the commands that run one sequence of a model (generate, score, attention). */
typedef struct cli_run_opts {
    const char *model; /* --model PATH (borrows argv); NULL: the default model */
    int n_threads;     /* --threads N; 0 = the CPUs this process may use */
    kv_type kv;        /* --kv-type f16|f32|q8_0|q4_0 (KV_F16 when zeroed) */
} cli_run_opts;

/* The prompt of generate and attention: --prompt TEXT or --tokens IDS, exactly one. */
typedef struct cli_prompt {
    const char *text;   /* --prompt (borrows argv): encoded with the model's vocabulary, BOS as it asks */
    const char *tokens; /* --tokens (borrows argv): ids used exactly as given */
    int32_t *ids;       /* (n) owned: --tokens' ids (cli_prompt_check), or the text once encoded */
    int n;
} cli_prompt;

/* Positional arguments (borrowing argv): v holds up to max of them; n counts them. */
typedef struct cli_args {
    const char **v;
    int n, max;
} cli_args;

/*
 * Parses argv[1..] against the table of cmd. --help or -h prints usage (then the sampling flags'
 * text when the table takes them) and returns false. An unknown option (named with the nearest
 * known one), a bad or missing value, a value given to a flag that takes none and an argument the
 * table has no room for are usage errors (exit 2); "-" alone is positional. Messages name a flag
 * as it was typed.
 */
bool cli_parse_opts(const char *cmd, const char *usage, int argc, char **argv, const cli_opt *opts, int n_opts);

/* name is one of the GPU flags llama.cpp users type (-ngl, --n-gpu-layers, --gpu-layers): read
 * with its value and ignored with a note, as attnd computes on the CPU. */
bool cli_gpu_flag(const char *name);

/* After parsing: exactly one of --prompt and --tokens, and --tokens' ids parsed (usage errors). */
void cli_prompt_check(const char *cmd, cli_prompt *p);
/* For --prompt: its text encoded with tok into p->ids (nothing to do for --tokens). */
attnd_status cli_prompt_encode(cli_prompt *p, const tokenizer *tok, attnd_err *err);
void cli_prompt_free(cli_prompt *p);

/* Parses "1,2,3" into a freshly malloc'd array (caller frees); usage error on bad ids. */
int32_t *cli_parse_ids(const char *cmd, const char *flag, const char *s, int *n_out);

/* The model used when no --model is given: $ATTND_MODEL, then the default model shipped next to
 * the executable (../share/attnd/models: an install tree, also relocated or DESTDIR-staged; or
 * ../models: a build folder inside the source tree), then the models/ folder of the source tree
 * the binary was built from (a build folder anywhere), then the configured install data dir.
 * Returns a malloc'd path, or NULL when none exists. */
char *cli_default_model_path(void);

/* `model` when given, else the default model (usage error naming cmd when there is none).
 * *owned receives the malloc'd default path for the caller to free, or NULL. */
const char *cli_resolve_model(const char *cmd, const char *model, char **owned);
/* log softmax(logits)[id], summed in double so a long vocabulary stays exact enough (score,
 * imatrix's perplexity). */
double cli_logprob_of(const float *logits, int n_vocab, int32_t id);
/* The local file of an hf://org/repo[:QUANT] reference (malloc'd): from the model cache, or
 * pulled into it first (progress and errors on stderr; exits 1 when it cannot be had). */
char *cli_hub_model(const char *cmd, const char *ref);

/* The exit status of a command whose work ended with st: 0, or 1 after printing
 * "attnd <cmd>: <err->msg>" on stderr. */
int cli_exit(const char *cmd, attnd_status st, const attnd_err *err);

/* Loads the model at path, or the default model when path is NULL (usage error naming cmd when
 * there is none). */
attnd_status cli_model_load(model **out, const char *cmd, const char *path, attnd_err *err);

/* The context a command runs m at: ctx_size (its --ctx-size; 0 = the model's), cut to the model's
 * context with a warning on stderr ("attnd <cmd>: --ctx-size 100000 is more than the model's
 * context of 512; using 512") when it asks for more, then set with model_set_context (LongRoPE's
 * factors follow it). *n_ctx receives it. Call right after loading m. */
attnd_status cli_model_context(model *m, const char *cmd, int ctx_size, int *n_ctx, attnd_err *err);

/* One engine and one KV sequence over a loaded model, for the commands that run a single
 * sequence (generate, score, attention), with r's threads and KV type. The KV budget is only a
 * limit (blocks come as used). Borrows m, which must outlive the cli_seq. */
typedef struct cli_seq {
    engine *e;
    kv_pool *pool;
    kv_seq *s;
} cli_seq;
attnd_status cli_seq_open(cli_seq *c, const model *m, int max_batch, const cli_run_opts *r, attnd_err *err);
void cli_seq_close(cli_seq *c); /* accepts a zeroed or half-opened cli_seq */

/* ---- sampling flags and generation callbacks (cli/sampling_args.c) ---- */

#include "attnd/sampler.h"

/* The sampling flags of a command line. params.bias points into bias; stops borrow argv. */
typedef struct cli_sampling {
    sampler_params params;
    logit_bias *bias;
    int n_bias;
    size_t cap_bias;
    const char **stops;
    int n_stops;
    int top_logprobs; /* 0 = no logprobs */
    bool ignore_eos;  /* keep generating past end-of-generation tokens (EOS, EOT, ...) */
} cli_sampling;

/* The --help text of the sampling flags. */
extern const char *const CLI_SAMPLING_USAGE;
/* sampler_params_default, except temperature 0: the CLI is greedy unless --temp is given. */
void cli_sampling_init(cli_sampling *o);
void cli_sampling_free(cli_sampling *o);
/* The option entries of every sampling flag for sampling (a cli_sampling *): CLI_OPT_SAMPLING's
 * expansion. Writes at most cap entries to out; returns how many. */
int cli_sampling_opts(void *sampling, cli_opt *out, int cap);
/* Once the vocabulary size is known: --logit-bias ids in range, and the whole set valid;
 * usage error otherwise. */
void cli_sampling_check(const char *cmd, const cli_sampling *o, int n_vocab);

/*
 * Generation state for engine_gen over the pipeline of attnd/gen.h: cli_gen_pick samples,
 * detokenizes and matches stop strings (and records logprobs when asked); cli_gen_on_token ends
 * generation at an end-of-generation token or a stop string.
 *   engine_gen g = {.n_predict = n, .pick = cli_gen_pick, .pick_user = cg,
 *                   .on_token = cli_gen_on_token, .token_user = cg};
 * tok (borrowed; may be NULL when there are no --stop strings: then there is no text) must
 * outlive the cli_gen.
 */
typedef struct cli_gen cli_gen;
attnd_status cli_gen_create(cli_gen **out, const cli_sampling *o, int n_vocab, const tokenizer *tok,
                            const int32_t *prompt, int n_prompt, int n_predict, attnd_err *err);
void cli_gen_destroy(cli_gen *g); /* accepts NULL */
int32_t cli_gen_pick(void *user, const float *logits);
bool cli_gen_on_token(void *user, int32_t id);
/* The generated text, cut before the stop string that ended it, once generation is over
 * (borrowed, valid while g lives; "" without a tokenizer). */
const char *cli_gen_text(cli_gen *g, size_t *len);
/* [{"id","logprob","top_logprobs":[{"id","logprob"}...]}...] per generated token (new reference;
 * -inf logprobs are null). */
struct json_t *cli_gen_logprobs_json(const cli_gen *g);

#endif

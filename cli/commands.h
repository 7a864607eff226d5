/*
 * commands.h — the subcommands of the `attnd` executable and the small argument helpers
 * they share. Each subcommand lives in cli/cmd_<name>.c and is listed in main.c's table.
 * CLI code may exit(): usage errors exit 2, runtime failures exit 1.
 */
#ifndef ATTND_CLI_COMMANDS_H
#define ATTND_CLI_COMMANDS_H

#include <stdbool.h>
#include <stdint.h>

int cmd_info(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_convert_llama2c(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_score(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_tokenize_bench(int argc, char **argv);

/* ---- argument helpers (cli/args.c) ---- */

/* Prints "attnd <cmd>: <message>" and a hint to use --help, then exits 2. */
_Noreturn void cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Matches argv[*i] against `flag` in either "--flag VALUE" or "--flag=VALUE" form. On a match
 * stores the value in *value, advances *i past what was consumed and returns true. A flag given
 * without its value is a usage error.
 */
bool cli_flag_value(const char *cmd, int argc, char **argv, int *i, const char *flag, const char **value);

/* Strict number parsing: the whole string must be a number within [min, max], else usage error
 * naming the flag. */
long long cli_parse_int(const char *cmd, const char *flag, const char *s, long long min, long long max);
double cli_parse_double(const char *cmd, const char *flag, const char *s, double min, double max);

/* Parses "1,2,3" into a freshly malloc'd array (caller frees); usage error on bad ids. */
int32_t *cli_parse_ids(const char *cmd, const char *flag, const char *s, int *n_out);

/* The model used when no --model is given: $ATTND_MODEL, then the default model shipped next to
 * the executable (../share/attnd/models, or the source tree's models/), then the installed
 * data dir. Returns a malloc'd path, or NULL when none exists. */
char *cli_default_model_path(void);

#endif

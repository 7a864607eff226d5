/*
 * config.h — where `attnd serve` gets its settings: command-line flags, environment variables,
 * a config file and built-in defaults, in that order of precedence (a flag beats $ATTND_*,
 * which beats the file, which beats the default).
 *
 * Every setting has one name used everywhere: `port` in the file, ATTND_PORT in the
 * environment, --port on the command line (underscores become dashes: max_sessions ->
 * ATTND_MAX_SESSIONS, --max-sessions). configs/attnd.conf lists them all with their defaults.
 *
 * The config file is `key = value` lines; '#' starts a comment (a whole line, or after
 * whitespace following a value); a value may be double-quoted to keep '#' or surrounding
 * spaces; `key =` with nothing after it unsets a string setting. It is found at --config FILE,
 * else $ATTND_CONFIG, else $CONFIGURATION_DIRECTORY/attnd.conf when that exists (systemd's
 * ConfigurationDirectory=, i.e. /etc/attnd/attnd.conf under the shipped unit), else there is
 * none. An explicitly named file that cannot be read is an error.
 *
 * Unknown keys, unknown flags, duplicate keys in the file and bad values are errors whose
 * message names where they came from: "/etc/attnd/attnd.conf:12: key 'prot': unknown setting
 * (did you mean 'port'?)", "environment ATTND_PORT: '80x' is not an integer".
 * Unknown ATTND_* environment variables are ignored (other tools use that prefix too).
 *
 * The config object remembers where each effective value came from, for --print-config.
 *
 * Ownership: the string fields config_load() writes into server_settings point into the
 * config object and stay valid until config_destroy(); keep it alive while the server runs.
 * Not thread-safe; used once at start-up.
 */
#ifndef ATTND_SERVER_CONFIG_H
#define ATTND_SERVER_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

#include "attnd/common.h"
#include "settings.h"

typedef struct config config;

/* Where an effective value came from, lowest precedence first. */
typedef enum config_source {
    CONFIG_SRC_DEFAULT = 0,
    CONFIG_SRC_FILE = 1,
    CONFIG_SRC_ENV = 2,
    CONFIG_SRC_FLAG = 3,
} config_source;

/*
 * Fills *s: server_settings_default(), then the config file, the environment and the flags.
 * argv[0] is the subcommand name ("serve"); argv[1..argc) are its options: every setting's
 * --flag (as "--flag VALUE" or "--flag=VALUE"; booleans also as bare "--flag" and
 * "--no-flag"), plus --config FILE, --print-config and --help/-h (see config_wants_*).
 * envp is a NULL-terminated "NAME=value" array; NULL means the process environment.
 * Built-in defaults taken from systemd's environment: state_dir = $STATE_DIRECTORY.
 *
 * Errors (*out is NULL, *s holds no pointers into freed memory but is otherwise unspecified):
 * ATTND_ERR_INVALID for unknown keys/flags and bad values, ATTND_ERR_IO for an unreadable
 * config file or api_key_file, ATTND_ERR_NOMEM. err->msg names file:line and key, the
 * environment variable or the flag.
 */
attnd_status config_load(config **out, server_settings *s, int argc, char **argv, char *const *envp,
                         attnd_err *err);

/*
 * Overwrites the value of every --api-key in argv (the process's own arguments, after
 * config_load copied it) with 'x's, so `ps` and /proc/PID/cmdline no longer show the key.
 * Returns how many were scrubbed; the caller warns that api_key_file or $ATTND_API_KEY keep
 * the key out of the process list from the start. argv's strings must be writable.
 */
int config_scrub_argv(int argc, char **argv);

/* Frees everything, including the strings server_settings points to. Accepts NULL. */
void config_destroy(config *c);

/* --help / -h was given: print config_usage() and exit 0 instead of serving. */
bool config_wants_help(const config *c);
/* --print-config was given: print config_print() and exit 0 instead of serving. */
bool config_wants_print(const config *c);

/* The config file that was read, or NULL when none. Valid until config_destroy(). */
const char *config_file_path(const config *c);

/*
 * Gives `key` the value `value` as a built-in default, described by `note` (e.g. "installed
 * default model"), but only when no layer set it and it is still at its built-in default;
 * used by the caller for defaults it discovers itself (the model path). ATTND_OK when applied
 * or not needed; ATTND_ERR_NOT_FOUND for an unknown key; ATTND_ERR_INVALID for a bad value.
 */
attnd_status config_set_default(config *c, server_settings *s, const char *key, const char *value,
                                const char *note, attnd_err *err);

/* Where `key`'s effective value came from; *origin (if non-NULL) gets a description such as
 * "flag --port", "environment ATTND_PORT", "/etc/attnd/attnd.conf:12" or "default".
 * Returns -1 for an unknown key. */
int config_source_of(const config *c, const char *key, const char **origin);

/*
 * Writes the effective configuration as a valid config file, one `key = value` per setting
 * with a comment saying where it came from. The API key is never printed, only whether it is
 * set and by what.
 */
void config_print(const config *c, const server_settings *s, FILE *out);

/* Writes the option list of `attnd serve` (every setting's flag, its env variable and help). */
void config_usage(FILE *out);

#endif /* ATTND_SERVER_CONFIG_H */

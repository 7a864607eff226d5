/*
 * test_config.c — settings of `attnd serve` from flags, environment, config file and defaults:
 * the precedence order, where each value is recorded to come from, errors naming file/line/key,
 * the file syntax (comments, quotes, unset), secrets that never print, and that the shipped
 * configs/attnd.conf documents every setting with its true default.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "config_internal.h" /* the settings table */

// ---- helpers -----------------------------------------------------------------------------------

/* Writes `text` to a fresh temp file; returns its path (malloc'd, caller frees and unlinks). */
static char *temp_file(const char *text) {
    char *path = strdup("/tmp/attnd-config-test-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    size_t n = strlen(text);
    cr_assert_eq(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

static void drop(char *path) {
    unlink(path);
    free(path);
}

/* Loads with argv = {"serve", args...} (NULL-terminated) and the given environment. */
static attnd_status load(config **c, server_settings *s, char **env, attnd_err *err, const char *arg0, ...) {
    char *argv[32] = {"serve"};
    int argc = 1;
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a && argc < 31; a = va_arg(ap, const char *)) argv[argc++] = (char *)a;
    va_end(ap);
    static char *empty_env[] = {NULL};
    return config_load(c, s, argc, argv, env ? env : empty_env, err);
}

/* Loads `text` as the only config file (no arguments, empty environment), which must succeed;
 * the file is gone again when this returns. */
static config *load_text(const char *text, server_settings *s) {
    char *path = temp_file(text);
    config *c;
    attnd_err err;
    cr_assert_eq(load(&c, s, NULL, &err, "--config", path, NULL), ATTND_OK, "%s\n%s", err.msg, text);
    drop(path);
    return c;
}

/* config_print into a malloc'd string. */
static char *print_to_string(const config *c, const server_settings *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    config_print(c, s, f);
    fclose(f);
    return buf;
}

/* The print with origin comments and header removed: only "key = value" lines. */
static char *values_only(const char *printed) {
    char *out = calloc(1, strlen(printed) + 1), *o = out;
    for (const char *p = printed; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (*p != '#') {
            const char *hash = memchr(p, '#', n);
            size_t m = hash ? (size_t)(hash - p) : n;
            while (m > 0 && p[m - 1] == ' ') m--;
            memcpy(o, p, m);
            o += m;
            *o++ = '\n';
        }
        p += n + (nl != NULL);
    }
    return out;
}

// ---- precedence --------------------------------------------------------------------------------

Test(config, built_in_defaults_apply_when_nothing_is_set) {
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, NULL, &err, NULL), ATTND_OK, "%s", err.msg);
    server_settings d;
    server_settings_default(&d);
    cr_assert_eq(s.port, d.port);
    cr_assert_str_eq(s.host, "127.0.0.1", "default must be loopback only");
    cr_assert_null(s.model_path);
    cr_assert_null(config_file_path(c));
    const char *o;
    cr_assert_eq(config_source_of(c, "port", &o), CONFIG_SRC_DEFAULT);
    cr_assert_str_eq(o, "default");
    cr_assert_eq(config_source_of(c, "no_such_key", NULL), -1);
    config_destroy(c);
}

Test(config, flag_beats_environment_beats_file_beats_default) {
    char *path = temp_file("# test\nport = 1111\nthreads = 3\nhost = 0.0.0.0\n");
    char cfg[300];
    snprintf(cfg, sizeof(cfg), "ATTND_CONFIG=%s", path);
    char *env[] = {cfg, "ATTND_PORT=2222", "ATTND_THREADS=5", NULL};
    config *c;
    server_settings s;
    attnd_err err;
    const char *o;

    cr_assert_eq(load(&c, &s, env, &err, "--port", "3333", NULL), ATTND_OK, "%s", err.msg);
    cr_assert_eq(s.port, 3333);
    cr_assert_eq(config_source_of(c, "port", &o), CONFIG_SRC_FLAG);
    cr_assert_str_eq(o, "flag --port");
    cr_assert_eq(s.threads, 5);
    cr_assert_eq(config_source_of(c, "threads", &o), CONFIG_SRC_ENV);
    cr_assert_str_eq(o, "environment ATTND_THREADS");
    cr_assert_str_eq(s.host, "0.0.0.0");
    cr_assert_eq(config_source_of(c, "host", &o), CONFIG_SRC_FILE);
    char want[300];
    snprintf(want, sizeof(want), "%s:4", path);
    cr_assert_str_eq(o, want, "file origin must name file:line");
    cr_assert_eq(config_source_of(c, "queue_limit", NULL), CONFIG_SRC_DEFAULT);
    cr_assert_str_eq(config_file_path(c), path);
    config_destroy(c);

    /* Without the flag the environment wins; without both, the file. */
    cr_assert_eq(load(&c, &s, env, &err, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_eq(s.port, 2222);
    config_destroy(c);
    char *env2[] = {cfg, NULL};
    cr_assert_eq(load(&c, &s, env2, &err, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_eq(s.port, 1111);
    cr_assert_eq(s.threads, 3);
    config_destroy(c);
    drop(path);
}

Test(config, config_flag_beats_attnd_config_variable) {
    char *a = temp_file("port = 1\n"), *b = temp_file("port = 2\n");
    char cfg[300];
    snprintf(cfg, sizeof(cfg), "ATTND_CONFIG=%s", a);
    char *env[] = {cfg, NULL};
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, env, &err, "--config", b, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_eq(s.port, 2);
    config_destroy(c);
    drop(a);
    drop(b);
}

Test(config, systemd_directories_give_the_file_and_state_dir) {
    char dir[] = "/tmp/attnd-config-dir-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char conf[300];
    snprintf(conf, sizeof(conf), "%s/attnd.conf", dir);
    FILE *f = fopen(conf, "w");
    fputs("max_sessions = 7\n", f);
    fclose(f);
    char confdir[300], statedir[] = "STATE_DIRECTORY=/var/lib/attnd:/var/lib/other";
    snprintf(confdir, sizeof(confdir), "CONFIGURATION_DIRECTORY=%s", dir);
    char *env[] = {confdir, statedir, NULL};
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, env, &err, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_eq(s.max_sessions, 7);
    cr_assert_str_eq(s.state_dir, "/var/lib/attnd", "first directory of $STATE_DIRECTORY");
    const char *o;
    cr_assert_eq(config_source_of(c, "state_dir", &o), CONFIG_SRC_DEFAULT);
    cr_assert(strstr(o, "STATE_DIRECTORY"), "%s", o);
    config_destroy(c);
    /* The file may still override the systemd-provided default, and unset it. */
    f = fopen(conf, "w");
    fputs("state_dir =\n", f);
    fclose(f);
    cr_assert_eq(load(&c, &s, env, &err, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_null(s.state_dir);
    config_destroy(c);
    /* No attnd.conf in the configuration directory is fine: defaults. */
    unlink(conf);
    cr_assert_eq(load(&c, &s, env, &err, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_null(config_file_path(c));
    config_destroy(c);
    rmdir(dir);
}

// ---- file syntax -------------------------------------------------------------------------------

Test(config, file_comments_quotes_and_whitespace) {
    server_settings s;
    /* "0.0.0.0# no" has no space before '#', so it is one value — which is fine for a string. */
    config *c = load_text("\r\n   # indented comment\n"
                          "cors_origins = \"http://a.example#x\"   # quoted keeps '#'\n"
                          "host=0.0.0.0# no space: part of the value? no -> error expected elsewhere\n",
                          &s);
    cr_assert_str_eq(s.cors_origins, "http://a.example#x");
    cr_assert(strncmp(s.host, "0.0.0.0#", 8) == 0);
    config_destroy(c);

    c = load_text("  port   =   9000   # comment\r\nmodel_alias = \" spaced \"\nlog_level = WARNING\n"
                  "access_log = off\nkv_f32 = yes\nbody_limit = 2M\ntop_p = 0.5\nchat_template = Llama3\n",
                  &s);
    cr_assert_eq(s.port, 9000);
    cr_assert_str_eq(s.model_alias, " spaced ");
    cr_assert_eq(s.log_level, SERVER_LOG_WARN);
    cr_assert(!s.access_log);
    cr_assert(s.kv_f32);
    cr_assert_eq(s.body_limit, 2u << 20);
    cr_assert_float_eq(s.sampling.top_p, 0.5f, 1e-6);
    cr_assert_str_eq(s.chat_template, "Llama3");
    config_destroy(c);
}

Test(config, empty_file_and_file_without_final_newline) {
    server_settings s;
    config_destroy(load_text("", &s));
    config *c = load_text("port = 1234", &s);
    cr_assert_eq(s.port, 1234);
    config_destroy(c);
}

/* Loads `text` as the config file and expects an error mentioning each of `needles`. */
static void expect_file_error(const char *text, attnd_status want, const char *n1, const char *n2) {
    char *path = temp_file(text);
    config *c = (config *)1;
    server_settings s;
    attnd_err err = {{0}};
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", path, NULL), want, "for %s got: %s", text, err.msg);
    cr_assert_null(c);
    cr_assert(strstr(err.msg, path), "message must name the file: %s", err.msg);
    if (n1) cr_assert(strstr(err.msg, n1), "message '%s' lacks '%s'", err.msg, n1);
    if (n2) cr_assert(strstr(err.msg, n2), "message '%s' lacks '%s'", err.msg, n2);
    drop(path);
}

Test(config, file_errors_name_file_line_and_key) {
    expect_file_error("port = 1\nprot = 2\n", ATTND_ERR_INVALID, ":2: key 'prot'", "did you mean 'port'");
    expect_file_error("\n\nport = 80x\n", ATTND_ERR_INVALID, ":3: key 'port'", "80x");
    expect_file_error("port = 70000\n", ATTND_ERR_INVALID, "key 'port'", "0..65535");
    expect_file_error("port = -1\n", ATTND_ERR_INVALID, "key 'port'", NULL);
    expect_file_error("port = 99999999999999999999\n", ATTND_ERR_INVALID, "key 'port'", NULL);
    expect_file_error("port = \n", ATTND_ERR_INVALID, "key 'port'", NULL);
    expect_file_error("port = 1\nport = 2\n", ATTND_ERR_INVALID, ":2: key 'port'", "repeats line 1");
    expect_file_error("just words\n", ATTND_ERR_INVALID, ":1:", "key = value");
    expect_file_error("host = \"unterminated\n", ATTND_ERR_INVALID, "key 'host'", "quote");
    expect_file_error("host = \"a\" b\n", ATTND_ERR_INVALID, "key 'host'", NULL);
    expect_file_error("host =\n", ATTND_ERR_INVALID, "key 'host'", "empty");
    expect_file_error("temperature = nan\n", ATTND_ERR_INVALID, "key 'temperature'", NULL);
    expect_file_error("top_p = 1.5\n", ATTND_ERR_INVALID, "key 'top_p'", NULL);
    expect_file_error("kv_f32 = maybe\n", ATTND_ERR_INVALID, "key 'kv_f32'", "boolean");
    expect_file_error("log_level = loud\n", ATTND_ERR_INVALID, "key 'log_level'", "debug");
    expect_file_error("chat_template = jinja2\n", ATTND_ERR_INVALID, "key 'chat_template'", "chatml");
    expect_file_error("body_limit = 1T\n", ATTND_ERR_INVALID, "key 'body_limit'", NULL);
    expect_file_error("body_limit = 12\n", ATTND_ERR_INVALID, "key 'body_limit'", NULL);
    expect_file_error("max_tokens = 5000\n", ATTND_ERR_INVALID, "max_tokens_cap", NULL);
    expect_file_error("api_key_file = /nonexistent/attnd/key\n", ATTND_ERR_IO, "key 'api_key_file'",
                      "/nonexistent/attnd/key");
}

Test(config, binary_or_missing_config_files_are_refused) {
    char *path = temp_file("port = 1\n");
    FILE *f = fopen(path, "ab");
    fputc(0, f);
    fclose(f);
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", path, NULL), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "NUL"), "%s", err.msg);
    drop(path);
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", "/nonexistent/attnd.conf", NULL), ATTND_ERR_IO);
    cr_assert(strstr(err.msg, "/nonexistent/attnd.conf"), "%s", err.msg);
}

// ---- environment and flags ---------------------------------------------------------------------

Test(config, bad_environment_values_name_the_variable) {
    char *env[] = {"ATTND_PORT=eighty", NULL};
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, env, &err, NULL), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "environment ATTND_PORT"), "%s", err.msg);
    cr_assert(strstr(err.msg, "eighty"), "%s", err.msg);
}

Test(config, unrelated_and_empty_attnd_variables_are_ignored) {
    char *env[] = {"ATTND_BINARY=/x/attnd", "ATTND_SANITIZED=1", "ATTND_PORT=", "PORT=1", NULL};
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, env, &err, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_eq(s.port, 8080);
    config_destroy(c);
}

Test(config, flag_forms_and_booleans) {
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, NULL, &err, "--port=9", "--model", "/m.gguf", "--kv-f32", "--no-access-log",
                      "--max-sessions", "3", "--body-limit=64k", "--port", "10", NULL),
                 ATTND_OK, "%s", err.msg);
    cr_assert_eq(s.port, 10, "the last repeated flag wins");
    cr_assert_str_eq(s.model_path, "/m.gguf");
    cr_assert(s.kv_f32);
    cr_assert(!s.access_log);
    cr_assert_eq(s.max_sessions, 3);
    cr_assert_eq(s.body_limit, 64u * 1024);
    cr_assert(!config_wants_help(c) && !config_wants_print(c));
    config_destroy(c);
    cr_assert_eq(load(&c, &s, NULL, &err, "--print-config", "-h", NULL), ATTND_OK, "%s", err.msg);
    cr_assert(config_wants_help(c) && config_wants_print(c));
    config_destroy(c);
}

Test(config, bad_flags_are_named) {
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, NULL, &err, "--prot", "1", NULL), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "--prot") && strstr(err.msg, "did you mean '--port'"), "%s", err.msg);
    cr_assert_eq(load(&c, &s, NULL, &err, "--port", NULL), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "--port needs a value"), "%s", err.msg);
    cr_assert_eq(load(&c, &s, NULL, &err, "--threads", "many", NULL), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "flag --threads"), "%s", err.msg);
    cr_assert_eq(load(&c, &s, NULL, &err, "stray", NULL), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "stray"), "%s", err.msg);
    cr_assert_eq(load(&c, &s, NULL, &err, "--no-port", NULL), ATTND_ERR_INVALID, "--no- only for booleans");
    cr_assert_eq(load(&c, &s, NULL, &err, "--", NULL), ATTND_ERR_INVALID);
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", NULL), ATTND_ERR_INVALID);
}

// ---- secrets -----------------------------------------------------------------------------------

Test(config, api_key_file_is_read_and_never_printed) {
    char *key = temp_file("s3cret-token-value\n\n");
    char line[300];
    snprintf(line, sizeof(line), "api_key_file = %s\n", key);
    char *path = temp_file(line);
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", path, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(s.api_key, "s3cret-token-value", "trailing newlines are dropped");
    char *out = print_to_string(c, &s);
    cr_assert_null(strstr(out, "s3cret"), "the key must never be printed:\n%s", out);
    cr_assert(strstr(out, key), "the key file path is shown:\n%s", out);
    free(out);
    config_destroy(c);

    /* An environment api_key overrides the file's api_key_file (stronger layer). */
    char *env[] = {"ATTND_API_KEY=from-env", NULL};
    cr_assert_eq(load(&c, &s, env, &err, "--config", path, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(s.api_key, "from-env");
    out = print_to_string(c, &s);
    cr_assert_null(strstr(out, "from-env"), "%s", out);
    cr_assert(strstr(out, "environment ATTND_API_KEY"), "%s", out);
    free(out);
    config_destroy(c);
    drop(path);

    /* Both in one layer is ambiguous. */
    snprintf(line, sizeof(line), "api_key = x\napi_key_file = %s\n", key);
    path = temp_file(line);
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", path, NULL), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "set only one"), "%s", err.msg);
    drop(path);
    drop(key);

    /* several keys, one per line (one tenant each); blank lines and blanks around keys dropped */
    key = temp_file("key-one\n\n  key-two \r\nkey-three");
    snprintf(line, sizeof(line), "api_key_file = %s\n", key);
    path = temp_file(line);
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", path, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(s.api_key, "key-one\nkey-two\nkey-three");
    config_destroy(c);
    drop(path);
    drop(key);

    key = temp_file("\n  \n");
    snprintf(line, sizeof(line), "api_key_file = %s\n", key);
    path = temp_file(line);
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", path, NULL), ATTND_ERR_INVALID);
    cr_assert(strstr(err.msg, "empty"), "%s", err.msg);
    drop(path);
    drop(key);
}

// ---- printing ----------------------------------------------------------------------------------

Test(config, print_shows_every_value_and_its_origin) {
    char *path = temp_file("threads = 2\n");
    char *env[] = {"ATTND_MAX_SESSIONS=5", NULL};
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, env, &err, "--config", path, "--port", "9999", NULL), ATTND_OK, "%s", err.msg);
    char *out = print_to_string(c, &s);
    char want[300];
    snprintf(want, sizeof(want), "# %s:1\n", path);
    cr_assert(strstr(out, "port                 = 9999") && strstr(out, "# flag --port\n"), "%s", out);
    cr_assert(strstr(out, "max_sessions         = 5"), "%s", out);
    cr_assert(strstr(out, "# environment ATTND_MAX_SESSIONS\n"), "%s", out);
    cr_assert(strstr(out, "threads              = 2") && strstr(out, want), "%s", out);
    cr_assert(strstr(out, "host                 = 127.0.0.1") && strstr(out, "# default\n"), "%s", out);
    free(out);
    config_destroy(c);
    drop(path);
}

Test(config, printed_configuration_reads_back_as_the_same_settings) {
    char *env[] = {"ATTND_CORS_ORIGINS=http://x.example#frag", "ATTND_MODEL_ALIAS= padded", NULL};
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, env, &err, "--port", "4321", "--temperature", "0.25", "--log-level", "debug", NULL),
                 ATTND_OK, "%s", err.msg);
    char *first = print_to_string(c, &s);
    config_destroy(c);
    char *path = temp_file(first);
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", path, NULL), ATTND_OK, "%s\n%s", err.msg, first);
    cr_assert_str_eq(s.cors_origins, "http://x.example#frag");
    cr_assert_str_eq(s.model_alias, " padded");
    char *second = print_to_string(c, &s);
    char *a = values_only(first), *b = values_only(second);
    cr_assert_str_eq(a, b);
    free(a);
    free(b);
    free(first);
    free(second);
    config_destroy(c);
    drop(path);
}

Test(config, set_default_fills_only_unset_values) {
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, NULL, &err, NULL), ATTND_OK, "%s", err.msg);
    cr_assert_eq(config_set_default(c, &s, "model", "/share/m.gguf", "installed default model", &err), ATTND_OK);
    cr_assert_str_eq(s.model_path, "/share/m.gguf");
    const char *o;
    config_source_of(c, "model", &o);
    cr_assert_str_eq(o, "installed default model");
    cr_assert_eq(config_set_default(c, &s, "nope", "x", NULL, &err), ATTND_ERR_NOT_FOUND);
    config_destroy(c);
    cr_assert_eq(load(&c, &s, NULL, &err, "--model", "/mine.gguf", NULL), ATTND_OK, "%s", err.msg);
    cr_assert_eq(config_set_default(c, &s, "model", "/share/m.gguf", "installed default model", &err), ATTND_OK);
    cr_assert_str_eq(s.model_path, "/mine.gguf", "a flag is never replaced by a discovered default");
    config_destroy(c);
}

// ---- the shipped example config ----------------------------------------------------------------

Test(config, shipped_attnd_conf_lists_every_setting_with_its_true_default) {
    const char *shipped = ATTND_SOURCE_DIR "/configs/attnd.conf";
    FILE *f = fopen(shipped, "r");
    cr_assert_not_null(f, "%s missing", shipped);
    /* Uncomment the "#key = value" lines (settings, not prose: no space after '#'). */
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    char line[1024];
    while (fgets(line, sizeof(line), f))
        if (line[0] == '#' && line[1] >= 'a' && line[1] <= 'z') fputs(line + 1, m);
    fclose(m);
    fclose(f);
    char *path = temp_file(text);

    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", path, NULL), ATTND_OK, "%s", err.msg);
    char *from_file = print_to_string(c, &s);
    /* Every setting must come from the file, i.e. the file lists it. */
    char undocumented[1024] = "";
    for (const char *p = from_file; (p = strstr(p, "# default\n")); p++) {
        const char *bol = p;
        while (bol > from_file && bol[-1] != '\n') bol--;
        size_t n = strcspn(bol, " ");
        strncat(undocumented, bol, n < 64 ? n : 64);
        strcat(undocumented, " ");
        if (strlen(undocumented) > 900) break;
    }
    cr_assert_str_eq(undocumented, "", "settings not documented in configs/attnd.conf: %s", undocumented);
    cr_assert_eq(config_source_of(c, "api_key", NULL), CONFIG_SRC_FILE, "api_key not documented");
    cr_assert_eq(config_source_of(c, "api_key_file", NULL), CONFIG_SRC_FILE, "api_key_file not documented");
    config_destroy(c);
    cr_assert_eq(load(&c, &s, NULL, &err, NULL), ATTND_OK, "%s", err.msg);
    char *defaults = print_to_string(c, &s);
    char *a = values_only(from_file), *b = values_only(defaults);
    cr_assert_str_eq(a, b, "configs/attnd.conf must show the built-in defaults");
    free(a);
    free(b);
    free(from_file);
    free(defaults);
    free(text);
    config_destroy(c);
    drop(path);
}

Test(config, garbage_files_are_errors_never_crashes) {
    /* Deterministic pseudo-random files over the characters the parser cares about. */
    static const char ALPHABET[] = "port=host \"#\n\r\t0123456789.-_kMabcdefghijklmnopqrstuvwxyz\x01\xff";
    uint32_t x = 12345;
    char text[512];
    for (int round = 0; round < 300; round++) {
        size_t n = (size_t)(round % 500);
        for (size_t i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            text[i] = ALPHABET[(x >> 16) % (sizeof(ALPHABET) - 1)];
        }
        text[n] = '\0';
        char *path = temp_file(text);
        config *c;
        server_settings s;
        attnd_err err = {{0}};
        attnd_status st = load(&c, &s, NULL, &err, "--config", path, NULL);
        cr_assert(st == ATTND_OK || st == ATTND_ERR_INVALID, "status %d for:\n%s", st, text);
        if (st == ATTND_OK) config_destroy(c);
        else cr_assert(strstr(err.msg, path), "error must name the file: %s", err.msg);
        drop(path);
    }
}

Test(config, api_key_on_the_command_line_is_scrubbed_from_argv) {
    char a0[] = "serve", a1[] = "--api-key", a2[] = "s3cret", a3[] = "--api-key=other", a4[] = "--port", a5[] = "9";
    char *argv[] = {a0, a1, a2, a3, a4, a5, NULL};
    server_settings s;
    config *c = NULL;
    attnd_err err;
    char *envp[] = {NULL};
    /* the later flag wins, and the value survives the scrub (config_load copied it) */
    cr_assert_eq(config_load(&c, &s, 6, argv, envp, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(config_scrub_argv(6, argv), 2);
    cr_expect_str_eq(s.api_key, "other");
    cr_expect_str_eq(a2, "xxxxxx");
    cr_expect_str_eq(a3, "--api-key=xxxxx");
    cr_expect_str_eq(a5, "9", "other arguments are left alone");
    config_destroy(c);
}

/* Found by fuzzing (tools/fuzz/fuzz_config): a value holding both '"' and '#' was printed in
 * quotes, which the file format cannot read back. */
/* Prints what c holds and loads the print back as a config file. */
static config *reload_print(const config *c, const server_settings *s, server_settings *s2) {
    char *out = print_to_string(c, s);
    config *c2 = load_text(out, s2);
    free(out);
    return c2;
}

Test(config, printed_values_with_quotes_and_hashes_read_back_the_same) {
    server_settings s, s2;
    config *c = load_text("cors_origins = *https://a budget = \"::1\"   s#x\n", &s);
    cr_assert_str_eq(s.cors_origins, "*https://a budget = \"::1\"   s#x");
    config *c2 = reload_print(c, &s, &s2);
    cr_expect_str_eq(s2.cors_origins, s.cors_origins);
    config_destroy(c2);
    config_destroy(c);

    /* a carriage return inside a value is an ordinary byte to the parser, so it prints */
    c = load_text("host = a\rb\n", &s);
    c2 = reload_print(c, &s, &s2);
    cr_expect_str_eq(s2.host, "a\rb");
    config_destroy(c2);
    config_destroy(c);

    /* a value no config line can hold (from the environment) is printed as a comment */
    char *env[] = {"ATTND_CORS_ORIGINS= \"x\" ", NULL};
    attnd_err err;
    cr_assert_eq(load(&c, &s, env, &err, NULL), ATTND_OK, "%s", err.msg);
    char *out = print_to_string(c, &s);
    cr_expect(strstr(out, "# cors_origins"), "%s", out);
    free(out);
    config_destroy(reload_print(c, &s, &s2));
    config_destroy(c);
}

// ---- the table is the single source of the defaults ---------------------------------------------

/* True when field of a and b holds the same value for the entry's kind. */
static bool same_field(const entry *e, const server_settings *a, const server_settings *b) {
    const char *fa = (const char *)a + e->off, *fb = (const char *)b + e->off;
    switch (e->kind) {
    case K_STR: case K_CHAT: case K_KEYFILE: {
        const char *sa = *(const char *const *)fa, *sb = *(const char *const *)fb;
        return sa == sb || (sa && sb && !strcmp(sa, sb));
    }
    case K_INT: return *(const int *)fa == *(const int *)fb;
    case K_SIZE: case K_BYTES: return *(const size_t *)fa == *(const size_t *)fb;
    case K_FLOAT: return *(const float *)fa == *(const float *)fb;
    case K_BOOL: return *(const bool *)fa == *(const bool *)fb;
    case K_LOGLEVEL: return *(const server_log_level *)fa == *(const server_log_level *)fb;
    case K_KVTYPE: return *(const int *)fa == *(const int *)fb;
    }
    return false;
}

Test(config, every_default_of_the_table_reads_back_as_itself) {
    server_settings d;
    server_settings_default(&d);
    int checked = 0;
    for (size_t i = 0; i < config_n_settings; i++) {
        const entry *e = &config_settings[i];
        if (!e->def) continue;
        char text[256];
        snprintf(text, sizeof(text), "%s = %s\n", e->key, e->def);
        server_settings s;
        config *c = load_text(text, &s); /* fails the test when the default is out of range */
        cr_assert(same_field(e, &s, &d), "%s: the default '%s' written to a file reads back differently", e->key,
                  e->def);
        config_destroy(c);
        checked++;
    }
    cr_assert_gt(checked, 20);
    cr_assert_eq(d.port, 8080);
    cr_assert(d.session_evict_lru && d.access_log && !d.kv_f32);
    cr_assert_eq(d.log_level, SERVER_LOG_INFO);
    cr_assert_eq(d.body_limit, (size_t)1 << 20);
    sampler_params sp;
    sampler_params_default(&sp);
    cr_assert_eq(d.sampling.temperature, sp.temperature, "sampling defaults are the engine's");
}

// ---- presets: [model.NAME] sections ----

Test(config, model_sections_give_each_model_its_settings_over_the_servers) {
    server_settings s;
    config *c = load_text("models_dir = /srv/models\nctx_size = 2048\ntemperature = 0.5\n"
                          "[model.coder]\nmodel = /srv/x/coder.gguf\nctx_size = 8192\nrole = generation\n"
                          "[ model.embed-1:v2 ]\nrole = embedding\nkv_budget_mb = 64\n",
                          &s);
    cr_assert(server_settings_multi(&s));
    cr_assert_eq(s.n_presets, 2);
    const server_preset *a = &s.presets[0], *b = &s.presets[1];
    cr_assert_str_eq(a->name, "coder");
    cr_assert_str_eq(a->cfg.model_path, "/srv/x/coder.gguf");
    cr_assert_eq(a->cfg.ctx_size, 8192);
    cr_assert_float_eq(a->cfg.sampling.temperature, 0.5f, 1e-6, "the server's setting where the section says nothing");
    cr_assert_str_eq(b->name, "embed-1:v2");
    cr_assert_str_eq(b->role, "embedding");
    cr_assert_null(b->cfg.model_path, "no model line: models_dir's file of that name");
    cr_assert_eq(b->cfg.ctx_size, 2048);
    cr_assert_eq(b->cfg.kv_budget_mb, 64);
    cr_assert_eq(s.ctx_size, 2048, "a section never changes the server's own settings");
    config_destroy(c);
}

Test(config, a_flag_reaches_the_presets_that_do_not_set_it) {
    char *path = temp_file("[model.a]\nmodel = /a.gguf\n[model.b]\nmodel = /b.gguf\nthreads = 3\n");
    config *c;
    server_settings s;
    attnd_err err;
    cr_assert_eq(load(&c, &s, NULL, &err, "--config", path, "--threads", "2", NULL), ATTND_OK, "%s", err.msg);
    cr_assert_eq(s.presets[0].cfg.threads, 2);
    cr_assert_eq(s.presets[1].cfg.threads, 3, "the section is more specific than the flag");
    config_destroy(c);
    drop(path);
}

Test(config, bad_model_sections_name_file_line_and_what) {
    expect_file_error("[server]\nport = 1\n", ATTND_ERR_INVALID, ":1:", "only [model.NAME]");
    expect_file_error("[model.a b]\n", ATTND_ERR_INVALID, ":1:", "letters, digits");
    expect_file_error("[model.]\n", ATTND_ERR_INVALID, ":1:", "unknown section");
    expect_file_error("[model.a]\nmodel = /a\n[model.a]\n", ATTND_ERR_INVALID, ":3:", "twice");
    expect_file_error("[model.a]\nport = 80\n", ATTND_ERR_INVALID, ":2:", "not a per-model setting");
    expect_file_error("[model.a]\nctx_size = lots\n", ATTND_ERR_INVALID, ":2:", "ctx_size");
    expect_file_error("[model.a]\nrole = painter\n", ATTND_ERR_INVALID, ":2:", "generation, embedding, rerank");
    expect_file_error("[model.a]\nthreads = 1\nthreads = 2\n", ATTND_ERR_INVALID, ":3:", "repeats line 2");
}

Test(config, printed_model_sections_read_back_as_the_same_presets) {
    server_settings s, s2;
    config *c = load_text("[model.coder]\nmodel = \"/m/my coder.gguf\"\nctx_size = 4096\n[model.e]\nrole = rerank\n", &s);
    char *printed = print_to_string(c, &s);
    cr_assert(strstr(printed, "\n[model.coder]\n"), "%s", printed);
    config *c2 = load_text(printed, &s2);
    cr_assert_eq(s2.n_presets, 2);
    cr_assert_str_eq(s2.presets[0].cfg.model_path, "/m/my coder.gguf");
    cr_assert_eq(s2.presets[0].cfg.ctx_size, 4096);
    cr_assert_str_eq(s2.presets[1].role, "rerank");
    free(printed);
    config_destroy(c2);
    config_destroy(c);
}

Test(config, admin_api_key_on_the_command_line_is_scrubbed_too) {
    char a0[] = "serve", a1[] = "--admin-api-key", a2[] = "b0ss", a3[] = "--admin-api-key=b1ss";
    char *argv[] = {a0, a1, a2, a3, NULL};
    server_settings s;
    config *c = NULL;
    attnd_err err;
    char *envp[] = {NULL};
    cr_assert_eq(config_load(&c, &s, 4, argv, envp, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(config_scrub_argv(4, argv), 2);
    cr_expect_str_eq(s.admin_api_key, "b1ss");
    cr_expect_str_eq(a2, "xxxx");
    cr_expect_str_eq(a3, "--admin-api-key=xxxx");
    char *printed = print_to_string(c, &s);
    cr_expect_null(strstr(printed, "b1ss"), "never printed: %s", printed);
    free(printed);
    config_destroy(c);
}

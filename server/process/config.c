/*
 * config.c — settings of `attnd serve` from flags, environment, config file and defaults
 * (see config.h for the rules).
 *
 * One table (SETTINGS) describes every setting once: its key, its type and range, where it
 * lives in server_settings, its default and a help line. The defaults (server_settings_default),
 * the file parser, the environment reader, the flag parser, --print-config and --help are all
 * driven by that table, so a setting added to the table is automatically configurable
 * everywhere and documented in --help.
 *
 * The table's types are in config_internal.h; --print-config and --help are in config_print.c.
 *
 * Layers are applied lowest precedence first (defaults, file, environment, flags), each one
 * overwriting what the previous set; a slot per setting remembers the last writer.
 */
#include "config.h"
#include "config_internal.h"

#include "attnd/kv.h"
#include "chat.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

extern char **environ;

// ---- the table ---------------------------------------------------------------------------------

#define OFF(field) offsetof(server_settings, field)
const entry config_settings[] = {
    {"host", K_STR, OFF(host), 0, 0, F_NONEMPTY, "127.0.0.1", "address to listen on (0.0.0.0 / :: = all interfaces)"},
    {"port", K_INT, OFF(port), 0, 65535, 0, "8080", "TCP port (0 = any free port)"},
    {"max_connections", K_INT, OFF(max_connections), 1, 65535, 0, "256", "concurrent HTTP connections (503 above)"},
    {"max_connections_per_address", K_INT, OFF(max_connections_per_address), 0, 65535, 0, "0",
     "connections one client address may hold (429 above; 0 = half of max_connections)"},
    {"model", K_STR, OFF(model_path), 0, 0, 0, NULL, "GGUF model file (empty = the installed default model)"},
    {"model_alias", K_STR, OFF(model_alias), 0, 0, 0, NULL, "model id in /v1/models (empty = file name)"},
    {"models_dir", K_STR, OFF(models_dir), 0, 0, 0, NULL,
     "serve every GGUF in this folder, by file name, loaded on first use (docs/models.md)"},
    {"models_cache", K_BOOL, OFF(models_cache), 0, 0, 0, "true",
     "with models_dir or [model.NAME] sections, the models `attnd pull` cached are served too"},
    {"models_max_loaded", K_INT, OFF(models_max_loaded), 0, 4096, 0, "0",
     "models loaded at once; the least recently used idle one is unloaded (0 = no limit)"},
    {"models_memory_mb", K_SIZE, OFF(models_memory_mb), 0, 1 << 30, 0, "0",
     "loaded models' weights plus KV budgets, MiB; the least recently used idle one is unloaded (0 = no limit)"},
    {"models_wait_s", K_INT, OFF(models_wait_s), 0, 86400, 0, "120",
     "how long a request waits for room while every loaded model is busy (then 503; 0 = 503 at once)"},
    {"threads", K_INT, OFF(threads), 0, 4096, 0, "0", "engine threads (0 = the CPUs this process may use)"},
    {"ctx_size", K_INT, OFF(ctx_size), 0, 1 << 24, 0, "0", "per-sequence context cap in tokens (0 = model's)"},
    {"max_batch", K_INT, OFF(max_batch), 1, 1 << 16, 0, "512", "most tokens per engine step"},
    {"draft_max", K_INT, OFF(draft_max), 0, 32, 0, "0",
     "speculative decoding: tokens drafted per step when a request does not say (0 = off)"},
    {"draft_model", K_STR, OFF(draft_model), 0, 0, 0, NULL,
     "a GGUF with the model's vocabulary that drafts for speculative decoding (empty = prompt lookup)"},
    {"draft_min_p", K_FLOAT, OFF(draft_min_p), 0, 1, 0, "0.5", "the draft model's draft ends below this top probability"},
    {"draft_adapt", K_BOOL, OFF(draft_adapt), 0, 0, 0, "true",
     "draft only where measured step costs and acceptance say it pays (false = draft_max every step)"},
    {"mtp", K_BOOL, OFF(mtp), 0, 0, 0, "true",
     "draft with the model's own MTP block (nextn layers) when the file has one and no draft_model is set"},
    {"mtp_draft_max", K_INT, OFF(mtp_draft_max), 1, 32, 0, "3",
     "with the MTP block: tokens drafted per step when draft_max is 0 and the request does not say"},
    {"prefill_budget_ms", K_INT, OFF(prefill_budget_ms), 0, 600000, 0, "0", "step time while a prompt prefills beside streams, ms (0 = auto)"},
    {"kv_budget_mb", K_SIZE, OFF(kv_budget_mb), 1, 1 << 24, 0, "1024", "KV cache memory for all sessions, MiB"},
    {"kv_type", K_KVTYPE, OFF(kv_type), 0, 0, 0, "f16",
     "KV cache element type for K and V: f16 | f32 | q8_0 | q4_0 (q8_0: about half f16's bytes)"},
    {"kv_f32", K_BOOL, OFF(kv_f32), 0, 0, 0, "false", "keep the KV cache in f32 (overrides kv_type)"},
    {"kv_checkpoints", K_INT, OFF(kv_checkpoints), 0, 64, 0, "8",
     "hybrid (DeltaNet) models: recurrent state copies kept per sequence, from kv_budget_mb (0 = off)"},
    {"kv_checkpoint_interval", K_INT, OFF(kv_checkpoint_interval), 0, 1 << 24, 0, "512",
     "hybrid models: a state checkpoint every this many tokens (0 = only at prompt and turn ends)"},
    {"chat_template", K_CHAT, OFF(chat_template), 0, 0, 0, NULL, "built-in chat template family for a model without its own (empty = detect)"},
    {"chat_template_file", K_STR, OFF(chat_template_file), 0, 0, 0, NULL, "Jinja chat template file; replaces the model's own"},
    {"max_sessions", K_INT, OFF(max_sessions), 1, 1000000, 0, "1024", "named sessions kept"},
    {"state_dir", K_STR, OFF(state_dir), 0, 0, 0, NULL, "session state directory (empty = no persistence)"},
    {"max_parallel", K_INT, OFF(max_parallel), 1, 4096, 0, "16", "sequences decoded together per step"},
    {"session_ttl_s", K_INT, OFF(session_ttl_s), 0, 1 << 30, 0, "259200", "idle sessions are removed after this, s (0 = never)"},
    {"session_evict_lru", K_BOOL, OFF(session_evict_lru), 0, 0, 0, "true",
     "at a key's quota (or max_sessions) evict that key's least recently used idle session"},
    {"max_sessions_per_key", K_INT, OFF(max_sessions_per_key), 0, 1000000, 0, "0",
     "named sessions one API key keeps (0 = max_sessions / the number of keys)"},
    {"max_responses_per_key", K_INT, OFF(max_responses_per_key), 0, 1000000, 0, "0",
     "stored /v1/responses one API key keeps (0 = max_sessions / the number of keys)"},
    {"response_bytes_per_key", K_BYTES, OFF(response_bytes_per_key), 0, 1 << 30, 0, "67108864",
     "bytes of stored responses one API key keeps (k/M/G suffix ok; 0 = no cap)"},
    {"response_ttl_s", K_INT, OFF(response_ttl_s), 0, 1 << 30, 0, "2592000",
     "stored responses are removed this long after they were stored, s (0 = never)"},
    {"session_store", K_STR, OFF(session_store), 0, 0, 0, NULL,
     "shared session store for several instances, redis://HOST[:PORT][/DB] (empty = local)"},
    {"session_store_prefix", K_STR, OFF(session_store_prefix), 0, 0, 0, "attnd:session:",
     "key prefix of the sessions in the shared store"},
    {"session_store_ttl_s", K_INT, OFF(session_store_ttl_s), 0, 1 << 30, 0, "259200",
     "a session unused this long leaves the shared store, s (0 = never)"},
    {"session_store_timeout_ms", K_INT, OFF(session_store_timeout_ms), 1, 600000, 0, "2000",
     "a shared-store call's deadline, ms (then 503 + Retry-After)"},
    {"body_limit", K_BYTES, OFF(body_limit), 1024, 1 << 30, 0, "1048576", "request body cap (k/M/G suffix ok; 413 above)"},
    {"queue_limit", K_INT, OFF(queue_limit), 1, 1000000, 0, "64", "requests waiting for the scheduler (429 above)"},
    {"tokenize_parallel", K_INT, OFF(tokenize_parallel), 1, 4096, 0, "4", "/tokenize + /detokenize at once (429 above)"},
    {"max_tokens_cap", K_INT, OFF(max_tokens_cap), 1, 1 << 24, 0, "4096", "upper bound on a request's max_tokens"},
    {"max_request_tokens", K_INT, OFF(max_request_tokens), 1, 1 << 30, 0, "32768",
     "upper bound on max_tokens x n x prompts of one request (400 above)"},
    {"attention_max_weights", K_INT, OFF(attention_max_weights), 1, 1 << 30, 0, "1000000",
     "most attention weights one /v1/attention answer carries (400 above)"},
    {"attention_max_bytes", K_BYTES, OFF(attention_max_bytes), 1024, 1 << 30, 0, "16777216",
     "most bytes of JSON one /v1/attention answer takes (k/M/G suffix ok; 400 above)"},
    {"attention_parallel", K_INT, OFF(attention_parallel), 1, 4096, 0, "2", "/v1/attention requests at once (429 above)"},
    {"embeddings", K_BOOL, OFF(embeddings), 0, 0, 0, "false",
     "a generation model also serves embeddings (/v1/embeddings, /api/embed), pooled as the file says or last-token"},
    {"embed_max_inputs", K_INT, OFF(embed_max_inputs), 1, 1 << 20, 0, "2048",
     "inputs of one embedding request, documents of one rerank (400 above)"},
    {"embed_max_tokens", K_INT, OFF(embed_max_tokens), 1, 1 << 24, 0, "8192",
     "tokens of one embedding input or rerank pair, also at most max_batch and the context (400 above unless truncate)"},
    {"request_timeout_s", K_INT, OFF(request_timeout_s), 1, 86400, 0, "30", "idle HTTP connection timeout, s"},
    {"header_timeout_s", K_INT, OFF(header_timeout_s), 1, 3600, 0, "10", "time a connection has to send its request headers, s"},
    {"body_timeout_s", K_INT, OFF(body_timeout_s), 1, 86400, 0, "20", "time a request has to send its body after its headers, s"},
    {"shutdown_timeout_s", K_INT, OFF(shutdown_timeout_s), 0, 3600, 0, "10", "SIGTERM: time in-flight work gets, s"},
    {"sse_keepalive_s", K_INT, OFF(sse_keepalive_s), 0, 3600, 0, "5", "a waiting stream sends a keep-alive comment this often, s (0 = never)"},
    {"watchdog_interval_ms", K_INT, OFF(watchdog_interval_ms), 10, 3600000, 0, "1000", "scheduler keep-alive period, ms"},
    {"api_key", K_STR, OFF(api_key), 0, 0, F_SECRET, NULL, "required Bearer token (empty = no auth)"},
    {"admin_api_key", K_STR, OFF(admin_api_key), 0, 0, F_SECRET, NULL,
     "with api_key, the Bearer token POST /models/load and /models/unload need (empty = they are refused)"},
    {"api_key_file", K_KEYFILE, OFF(api_key), 0, 0, F_SECRET, NULL, "file holding the Bearer token(s), one per line"},
    {"cors_origins", K_STR, OFF(cors_origins), 0, 0, 0, NULL, "allowed CORS origins, comma-separated, * = any"},
    {"allowed_hosts", K_STR, OFF(allowed_hosts), 0, 0, 0, NULL, "extra Host names a loopback-bound server answers"},
    {"log_level", K_LOGLEVEL, OFF(log_level), 0, 0, 0, "info", "error | warn | info | debug"},
    {"access_log", K_BOOL, OFF(access_log), 0, 0, 0, "true", "one log line per request"},
    {"temperature", K_FLOAT, OFF(sampling.temperature), 0, 100, F_ENGINE, NULL, "default sampling temperature"},
    {"top_k", K_INT, OFF(sampling.top_k), 0, 1000000, F_ENGINE, NULL, "default top-k (0 = off)"},
    {"top_p", K_FLOAT, OFF(sampling.top_p), 0, 1, F_ENGINE, NULL, "default top-p (1 = off)"},
    {"min_p", K_FLOAT, OFF(sampling.min_p), 0, 1, F_ENGINE, NULL, "default min-p (0 = off)"},
    {"repeat_penalty", K_FLOAT, OFF(sampling.repeat_penalty), 0.01, 100, F_ENGINE, NULL, "default repeat penalty (1 = off)"},
    {"repeat_last_n", K_INT, OFF(sampling.repeat_last_n), 0, 1 << 24, F_ENGINE, NULL, "tokens the repeat penalty looks back"},
    {"max_tokens", K_INT, OFF(default_max_tokens), 1, 1 << 24, 0, "256", "max_tokens when a request gives none"},
};
#undef OFF
const size_t config_n_settings = ATTND_ARRAY_LEN(config_settings);
#define SETTINGS config_settings
#define N_SETTINGS config_n_settings

// ---- the defaults ------------------------------------------------------------------------------

static int parse_bool(const char *s);
static int parse_log_level(const char *s);

/* Writes entry e's default into s (the table's defaults are well-formed: test_config checks). */
static void store_default(const entry *e, server_settings *s) {
    char *field = (char *)s + e->off;
    const char *d = e->def;
    switch (e->kind) {
    case K_STR: case K_CHAT: case K_KEYFILE: *(const char **)field = d; break;
    case K_INT: *(int *)field = d ? (int)strtol(d, NULL, 10) : 0; break;
    case K_SIZE: case K_BYTES: *(size_t *)field = d ? (size_t)strtoull(d, NULL, 10) : 0; break;
    case K_FLOAT: *(float *)field = d ? strtof(d, NULL) : 0.0f; break;
    case K_BOOL: *(bool *)field = d && parse_bool(d) == 1; break;
    case K_LOGLEVEL: *(server_log_level *)field = (server_log_level)(d ? parse_log_level(d) : 0); break;
    case K_KVTYPE: {
        kv_type t = KV_F16;
        if (d) kv_type_parse(d, &t);
        *(int *)field = (int)t;
        break;
    }
    }
}

void server_settings_default(server_settings *s) {
    memset(s, 0, sizeof(*s));
    sampler_params_default(&s->sampling);
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (!(SETTINGS[i].flags & F_ENGINE)) store_default(&SETTINGS[i], s);
}

// ---- the config object -------------------------------------------------------------------------

static char *keep(config *c, const char *s, size_t n) {
    if (!attnd_grow(&c->strings, &c->cap_strings, c->n_strings + 1, sizeof(*c->strings), 16)) return NULL;
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    c->strings[c->n_strings++] = d;
    return d;
}

static int find_key(const char *key, size_t n) {
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (strlen(SETTINGS[i].key) == n && !memcmp(SETTINGS[i].key, key, n)) return (int)i;
    return -1;
}

/* Edit distance, capped: enough to suggest 'port' for 'prot'. */
static size_t distance(const char *a, size_t na, const char *b) {
    size_t nb = strlen(b);
    if (na > 63 || nb > 63) return 99;
    size_t row[64];
    for (size_t j = 0; j <= nb; j++) row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

/* " (did you mean 'port'?)" or "" — written into buf. */
static const char *suggest(char *buf, size_t cap, const char *key, size_t n, bool as_flag) {
    size_t best = 3, best_i = N_SETTINGS;
    for (size_t i = 0; i < N_SETTINGS; i++) {
        size_t d = distance(key, n, SETTINGS[i].key);
        if (d < best) best = d, best_i = i;
    }
    buf[0] = '\0';
    if (best_i == N_SETTINGS) return buf;
    char name[64];
    snprintf(name, sizeof(name), "%s", SETTINGS[best_i].key);
    if (as_flag)
        for (char *p = name; *p; p++)
            if (*p == '_') *p = '-';
    snprintf(buf, cap, " (did you mean '%s%s'?)", as_flag ? "--" : "", name);
    return buf;
}

// ---- values ------------------------------------------------------------------------------------

static bool parse_ll(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || isspace((unsigned char)*s)) return false;
    *out = v;
    return true;
}

static bool parse_bytes(const char *s, double *out) {
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*s)) return false;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v)) return false;
    double mult = 1;
    if (*end) {
        char u = (char)tolower((unsigned char)*end);
        if (u == 'k') mult = 1024.0;
        else if (u == 'm') mult = 1024.0 * 1024;
        else if (u == 'g') mult = 1024.0 * 1024 * 1024;
        else return false;
        end++;
        if (!strcasecmp(end, "ib") || !strcasecmp(end, "b")) end += strlen(end);
        if (*end) return false;
    }
    v *= mult;
    if (v != floor(v)) return false;
    *out = v;
    return true;
}

static int parse_bool(const char *s) {
    static const char *T[] = {"true", "yes", "on", "1"}, *F[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(s, T[i])) return 1;
        if (!strcasecmp(s, F[i])) return 0;
    }
    return -1;
}

const char *const config_log_levels[4] = {"error", "warn", "info", "debug"};

static int parse_log_level(const char *s) {
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(s, config_log_levels[i])) return i;
    if (!strcasecmp(s, "warning")) return SERVER_LOG_WARN;
    return -1;
}

/* Reads a secret file: at most 4 KiB, one key per line (blank lines and surrounding whitespace
 * dropped; the keys are joined with '\n'), at least one key. */
static attnd_status read_key_file(config *c, const char *path, const char *where, char **out, attnd_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return attnd_fail(err, ATTND_ERR_IO, "%s: cannot read '%s': %s", where, path, strerror(errno));
    char buf[4097];
    size_t n = fread(buf, 1, sizeof(buf), f);
    bool bad = ferror(f);
    fclose(f);
    if (bad) return attnd_fail(err, ATTND_ERR_IO, "%s: reading '%s' failed", where, path);
    if (n == sizeof(buf)) return attnd_fail(err, ATTND_ERR_INVALID, "%s: '%s' is over 4 KiB; not a key", where, path);
    if (memchr(buf, '\0', n)) return attnd_fail(err, ATTND_ERR_INVALID, "%s: '%s' is not a text file", where, path);
    /* one key per line, surrounding blanks dropped; several keys = several tenants */
    char keys[4097];
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && buf[e] != '\n') e++;
        size_t a = i, b = e;
        while (a < b && isspace((unsigned char)buf[a])) a++;
        while (b > a && isspace((unsigned char)buf[b - 1])) b--;
        if (b > a) {
            if (k) keys[k++] = '\n';
            memcpy(keys + k, buf + a, b - a);
            k += b - a;
        }
        i = e + 1;
    }
    if (k == 0) return attnd_fail(err, ATTND_ERR_INVALID, "%s: '%s' is empty", where, path);
    *out = keep(c, keys, k);
    return *out ? ATTND_OK : attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
}

static attnd_status set_origin(config *c, size_t i, config_source src, const char *origin, int line, attnd_err *err) {
    slot *sl = &c->slots[i];
    free(sl->origin);
    sl->origin = NULL;
    if (origin && !(sl->origin = strdup(origin))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    sl->src = src;
    sl->line = line;
    return ATTND_OK;
}

/*
 * Parses `value` for SETTINGS[i] and stores it in *s, recording src/origin. `where` prefixes
 * error messages ("attnd.conf:12: key 'port'", "environment ATTND_PORT", "flag --port").
 */
/* api_key_file: the file's key(s) into field, the path kept for --print-config. */
static attnd_status parse_key_file(config *c, size_t i, char *field, const char *value, const char *where,
                                   attnd_err *err) {
    if (!*value) { /* `api_key_file =` unsets, like an empty string setting */
        *(const char **)field = NULL;
        c->slots[i].raw = NULL;
        return ATTND_OK;
    }
    char *key;
    attnd_status st = read_key_file(c, value, where, &key, err);
    if (st != ATTND_OK) return st;
    *(const char **)field = key;
    if (!(c->slots[i].raw = keep(c, value, strlen(value)))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    return ATTND_OK;
}

/* Parses value by the entry's kind into field (a member of the settings struct). */
static attnd_status parse_value(config *c, size_t i, char *field, const char *value, const char *where,
                                attnd_err *err) {
    const entry *e = &SETTINGS[i];
    long long ll;
    double d;
    int b;
    switch (e->kind) {
    case K_STR:
        if (!*value) {
            if (e->flags & F_NONEMPTY) return attnd_fail(err, ATTND_ERR_INVALID, "%s: must not be empty", where);
            *(const char **)field = NULL;
        } else {
            const char *k = keep(c, value, strlen(value));
            if (!k) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
            *(const char **)field = k;
        }
        break;
    case K_CHAT: {
        chat_family fam;
        attnd_err why;
        if (*value && chat_family_from_name(value, &fam, &why) != ATTND_OK)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: %s", where, why.msg);
        const char *k = *value ? keep(c, value, strlen(value)) : NULL;
        if (*value && !k) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
        *(const char **)field = k;
        break;
    }
    case K_INT:
        if (!parse_ll(value, &ll) || ll < (long long)e->min || ll > (long long)e->max)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: '%s' is not an integer in %.0f..%.0f", where, value,
                              e->min, e->max);
        *(int *)field = (int)ll;
        break;
    case K_SIZE:
        if (!parse_ll(value, &ll) || ll < (long long)e->min || ll > (long long)e->max)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: '%s' is not an integer in %.0f..%.0f", where, value,
                              e->min, e->max);
        *(size_t *)field = (size_t)ll;
        break;
    case K_BYTES:
        if (!parse_bytes(value, &d) || d < e->min || d > e->max)
            return attnd_fail(err, ATTND_ERR_INVALID,
                              "%s: '%s' is not a size in bytes in 1k..1G (a number, optionally with k, M or G)",
                              where, value);
        *(size_t *)field = (size_t)d;
        break;
    case K_FLOAT: {
        char *end;
        errno = 0;
        d = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(d) || d < e->min || d > e->max)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: '%s' is not a number in %g..%g", where, value, e->min,
                              e->max);
        *(float *)field = (float)d;
        break;
    }
    case K_BOOL:
        if ((b = parse_bool(value)) < 0)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: '%s' is not a boolean (true/false, yes/no, on/off, 1/0)",
                              where, value);
        *(bool *)field = b;
        break;
    case K_LOGLEVEL:
        if ((b = parse_log_level(value)) < 0)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: '%s' is not one of error, warn, info, debug", where, value);
        *(server_log_level *)field = (server_log_level)b;
        break;
    case K_KVTYPE: {
        kv_type t;
        if (kv_type_parse(value, &t) != ATTND_OK)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: '%s' is not one of f16, f32, q8_0, q4_0", where, value);
        *(int *)field = (int)t;
        break;
    }
    case K_KEYFILE: return parse_key_file(c, i, field, value, where, err);
    }
    return ATTND_OK;
}

static attnd_status apply(config *c, server_settings *s, size_t i, const char *value, config_source src,
                          const char *origin, int line, const char *where, attnd_err *err) {
    const entry *e = &SETTINGS[i];
    char *field = (char *)s + e->off;
    /* api_key and api_key_file write the same field. Both non-empty in one layer is
     * ambiguous; an empty one next to a set one in the same layer changes nothing; across
     * layers the stronger one wins and the other no longer describes the field. */
    int pair = -1;
    for (size_t j = 0; j < N_SETTINGS; j++)
        if (j != i && SETTINGS[j].off == e->off) pair = (int)j;
    if (pair >= 0 && c->slots[pair].src == src && src != CONFIG_SRC_DEFAULT && *(const char **)field) {
        if (*value)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: '%s' is set too (%s); set only one of them", where,
                              SETTINGS[pair].key, c->slots[pair].origin ? c->slots[pair].origin : "here");
        return set_origin(c, i, src, origin, line, err);
    }
    attnd_status st = parse_value(c, i, field, value, where, err);
    if (st != ATTND_OK) return st;
    if (pair >= 0 && c->slots[pair].src != src) {
        st = set_origin(c, (size_t)pair, CONFIG_SRC_DEFAULT, NULL, 0, err);
        if (st != ATTND_OK) return st;
        c->slots[pair].raw = NULL;
    }
    if (e->kind != K_KEYFILE) c->slots[i].raw = NULL;
    return set_origin(c, i, src, origin, line, err);
}

// ---- layers ------------------------------------------------------------------------------------

static const char *env_get(char *const *envp, const char *name) {
    size_t n = strlen(name);
    for (; envp && *envp; envp++)
        if (!strncmp(*envp, name, n) && (*envp)[n] == '=') return *envp + n + 1;
    return NULL;
}

/* First entry of a ':'-separated systemd directory list, copied into buf. */
static const char *first_dir(const char *list, char *buf, size_t cap) {
    if (!list || !*list) return NULL;
    size_t n = strcspn(list, ":");
    if (n == 0 || n >= cap) return NULL;
    memcpy(buf, list, n);
    buf[n] = '\0';
    return buf;
}

static void trim(const char **b, const char **e) {
    while (*b < *e && isspace((unsigned char)**b)) (*b)++;
    while (*e > *b && isspace((unsigned char)(*e)[-1])) (*e)--;
}

/* Reads the config file at path into *text (NUL-terminated; the caller frees it): at most 1 MiB
 * and no NUL bytes, so that a wrong path (a model!) is refused cheaply. */
static attnd_status read_text(const char *path, char **text, attnd_err *err) {
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return attnd_fail(err, ATTND_ERR_IO, "config file '%s': %s", path, strerror(errno));
    const size_t cap = 1u << 20;
    attnd_status st = ATTND_OK;
    char *t = malloc(cap + 1);
    size_t n = t ? fread(t, 1, cap + 1, f) : 0;
    if (!t) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    else if (ferror(f)) st = attnd_fail(err, ATTND_ERR_IO, "config file '%s': read failed", path);
    else if (n > cap)
        st = attnd_fail(err, ATTND_ERR_INVALID, "config file '%s': larger than 1 MiB; is it a config file?", path);
    else if (memchr(t, '\0', n))
        st = attnd_fail(err, ATTND_ERR_INVALID, "config file '%s': contains NUL bytes; is it a text file?", path);
    fclose(f);
    if (st != ATTND_OK) {
        free(t);
        return st;
    }
    t[n] = '\0';
    *text = t;
    return ATTND_OK;
}

/* Narrows [*vb, *ve), the trimmed text after '=', to the value: "quoted" (kept verbatim) or bare
 * up to a ' #' comment. loc names the line in the error. */
static attnd_status value_range(const char **vb, const char **ve, const char *loc, attnd_err *err) {
    if (*vb < *ve && **vb == '"') {
        const char *q = memchr(*vb + 1, '"', (size_t)(*ve - *vb - 1));
        const char *rest = q ? q + 1 : NULL;
        if (rest) while (rest < *ve && isspace((unsigned char)*rest)) rest++;
        if (!q || (rest < *ve && *rest != '#'))
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: unterminated quote or text after the closing quote", loc);
        (*vb)++;
        *ve = q;
        return ATTND_OK;
    }
    for (const char *h = *vb; h < *ve; h++)
        if (*h == '#' && (h == *vb || isspace((unsigned char)h[-1]))) {
            *ve = h;
            break;
        }
    trim(vb, ve);
    return ATTND_OK;
}

// ---- presets: [model.NAME] sections -----------------------------------------------------------

/* The settings a [model.NAME] section may set: what differs from model to model. */
static const char *const PRESET_KEYS[] = {
    "model", "ctx_size", "kv_budget_mb", "kv_type", "kv_f32", "threads", "chat_template", "chat_template_file",
    "draft_model", "draft_max", "draft_min_p", "draft_adapt", "mtp", "mtp_draft_max", "max_parallel", "max_batch",
    "prefill_budget_ms",
    "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "max_tokens",
};
static const char *const PRESET_ROLES[] = {"generation", "embedding", "rerank"};

/* A section header [b, e) ("[model.NAME]"): starts preset NAME. */
static attnd_status load_section(config *c, const char *path, int line, const char *b, const char *e, attnd_err *err) {
    const char *nb = b + 1, *ne = e - 1;
    trim(&nb, &ne);
    if (e - b < 2 || e[-1] != ']' || ne - nb < 7 || strncmp(nb, "model.", 6))
        return attnd_fail(err, ATTND_ERR_INVALID, "%s:%d: unknown section '%.*s' (only [model.NAME])", path, line,
                          (int)(e - b > 60 ? 60 : e - b), b);
    nb += 6;
    size_t n = (size_t)(ne - nb);
    for (const char *p = nb; p < ne; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._:-", *p))
            return attnd_fail(err, ATTND_ERR_INVALID, "%s:%d: model name '%.*s': letters, digits and . _ : - only",
                              path, line, (int)(n > 60 ? 60 : n), nb);
    if (n > 127) return attnd_fail(err, ATTND_ERR_INVALID, "%s:%d: model name longer than 127 bytes", path, line);
    for (int i = 0; i < c->n_presets; i++)
        if (strlen(c->presets[i].name) == n && !strncmp(c->presets[i].name, nb, n))
            return attnd_fail(err, ATTND_ERR_INVALID, "%s:%d: [model.%.*s] is there twice", path, line, (int)n, nb);
    server_preset *ps = realloc(c->presets, (size_t)(c->n_presets + 1) * sizeof(*ps));
    if (!ps) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    c->presets = ps;
    memset(&ps[c->n_presets], 0, sizeof(*ps));
    if (!(ps[c->n_presets].name = keep(c, nb, n))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    ps[c->n_presets].role = PRESET_ROLES[0];
    c->section = c->n_presets++;
    return ATTND_OK;
}

/* Which key of a section kb[0..kn) is: a PRESET_KEYS index into SETTINGS, -1 = role, -2 = none. */
static int preset_key(const char *kb, size_t kn) {
    if (kn == 4 && !strncmp(kb, "role", 4)) return -1;
    for (size_t i = 0; i < ATTND_ARRAY_LEN(PRESET_KEYS); i++)
        if (strlen(PRESET_KEYS[i]) == kn && !strncmp(PRESET_KEYS[i], kb, kn)) return find_key(kb, kn);
    return -2;
}

/* A line of the current section: checked now (into a scratch copy), applied at the end. */
static attnd_status preset_line_add(config *c, const char *loc, int key, int line, const char *value, attnd_err *err) {
    for (int i = 0; i < c->n_plines; i++)
        if (c->plines[i].preset == c->section && c->plines[i].key == key)
            return attnd_fail(err, ATTND_ERR_INVALID, "%s: repeats line %d", loc, c->plines[i].line);
    attnd_status st = ATTND_OK;
    if (key >= 0) {
        server_settings scratch;
        server_settings_default(&scratch);
        st = parse_value(c, (size_t)key, (char *)&scratch + SETTINGS[key].off, value, loc, err);
    } else {
        st = ATTND_ERR_INVALID;
        for (size_t i = 0; i < ATTND_ARRAY_LEN(PRESET_ROLES); i++)
            if (!strcmp(value, PRESET_ROLES[i])) {
                c->presets[c->section].role = PRESET_ROLES[i];
                st = ATTND_OK;
            }
        if (st != ATTND_OK) attnd_fail(err, st, "%s: '%s' is not one of generation, embedding, rerank", loc, value);
    }
    if (st != ATTND_OK) return st;
    preset_line *pl = realloc(c->plines, (size_t)(c->n_plines + 1) * sizeof(*pl));
    if (!pl) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    c->plines = pl;
    if (!(pl[c->n_plines].value = strdup(value))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    pl[c->n_plines].preset = c->section;
    pl[c->n_plines].key = key;
    pl[c->n_plines].line = line;
    c->n_plines++;
    return ATTND_OK;
}

/* Every preset: the final settings with its section's lines over them; then s lists them. */
static attnd_status presets_finish(config *c, server_settings *s, attnd_err *err) {
    for (int p = 0; p < c->n_presets; p++) {
        server_settings *pc = &c->presets[p].cfg;
        *pc = *s;
        pc->presets = NULL;
        pc->n_presets = 0;
        pc->model_path = NULL;
        pc->model_alias = NULL;
        for (int i = 0; i < c->n_plines; i++) {
            const preset_line *pl = &c->plines[i];
            if (pl->preset != p || pl->key < 0) continue;
            char where[PATH_MAX + 96];
            snprintf(where, sizeof(where), "%s:%d", c->file_path ? c->file_path : "config", pl->line);
            attnd_status st = parse_value(c, (size_t)pl->key, (char *)pc + SETTINGS[pl->key].off, pl->value, where, err);
            if (st != ATTND_OK) return st;
        }
    }
    s->presets = c->presets;
    s->n_presets = c->n_presets;
    return ATTND_OK;
}

/* A `key = value` line inside a section: [kb, kb + kn) the key, [vb, e) the text after '='. */
static attnd_status load_preset_line(config *c, const char *path, int line, const char *kb, size_t kn, const char *vb,
                                     const char *e, attnd_err *err) {
    int key = preset_key(kb, kn);
    char loc[PATH_MAX + 200];
    snprintf(loc, sizeof(loc), "%s:%d: [model.%s] key '%.*s'", path, line, c->presets[c->section].name,
             (int)(kn > 60 ? 60 : kn), kb);
    if (key == -2)
        return attnd_fail(err, ATTND_ERR_INVALID, "%s: not a per-model setting (role, %s, ...; docs/models.md)", loc,
                          PRESET_KEYS[0]);
    const char *ve = e;
    trim(&vb, &ve);
    attnd_status st = value_range(&vb, &ve, loc, err);
    if (st != ATTND_OK) return st;
    char *value = strndup(vb, (size_t)(ve - vb));
    if (!value) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    st = preset_line_add(c, loc, key, line, value, err);
    free(value);
    return st;
}

/* Applies line number `line` of the file, [b, e): trimmed, neither blank nor a comment. */
static attnd_status load_line(config *c, server_settings *s, const char *path, int line, const char *b,
                              const char *e, attnd_err *err) {
    const char *eq = memchr(b, '=', (size_t)(e - b));
    if (!eq)
        return attnd_fail(err, ATTND_ERR_INVALID, "%s:%d: expected 'key = value', got '%.*s'", path, line,
                          (int)(e - b > 60 ? 60 : e - b), b);
    const char *kb = b, *ke = eq;
    trim(&kb, &ke);
    size_t kn = (size_t)(ke - kb);
    if (c->section >= 0) return load_preset_line(c, path, line, kb, kn, eq + 1, e, err);
    int idx = find_key(kb, kn);
    if (idx < 0) {
        char hint[96];
        return attnd_fail(err, ATTND_ERR_INVALID, "%s:%d: key '%.*s': unknown setting%s", path, line,
                          (int)(kn > 60 ? 60 : kn), kb, suggest(hint, sizeof(hint), kb, kn, false));
    }
    char loc[PATH_MAX + 96];
    snprintf(loc, sizeof(loc), "%s:%d: key '%s'", path, line, SETTINGS[idx].key);
    if (c->slots[idx].src == CONFIG_SRC_FILE)
        return attnd_fail(err, ATTND_ERR_INVALID, "%s: repeats line %d", loc, c->slots[idx].line);
    const char *vb = eq + 1, *ve = e;
    trim(&vb, &ve);
    attnd_status st = value_range(&vb, &ve, loc, err);
    if (st != ATTND_OK) return st;
    char *value = strndup(vb, (size_t)(ve - vb));
    if (!value) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    char origin[PATH_MAX + 16];
    snprintf(origin, sizeof(origin), "%s:%d", path, line);
    st = apply(c, s, (size_t)idx, value, CONFIG_SRC_FILE, origin, line, loc, err);
    free(value);
    return st;
}

/* Applies the config file at path, line by line; stops at the first bad line. */
static attnd_status load_file(config *c, server_settings *s, const char *path, attnd_err *err) {
    char *text;
    attnd_status st = read_text(path, &text, err);
    if (st != ATTND_OK) return st;
    int line = 0;
    for (char *p = text; *p || p == text;) {
        line++;
        char *nl = strchr(p, '\n');
        char *end = nl ? nl : p + strlen(p);
        const char *b = p, *e = end;
        p = nl ? nl + 1 : end;
        trim(&b, &e);
        if (b != e && *b == '[') st = load_section(c, path, line, b, e, err);
        else if (b != e && *b != '#') st = load_line(c, s, path, line, b, e, err);
        if (st != ATTND_OK) break;
        if (!nl) break;
    }
    free(text);
    return st;
}

void config_env_name(char *buf, size_t cap, const char *key) {
    snprintf(buf, cap, "ATTND_%s", key);
    for (char *p = buf; *p; p++) *p = (char)toupper((unsigned char)*p);
}

void config_flag_name(char *buf, size_t cap, const char *key) {
    snprintf(buf, cap, "--%s", key);
    for (char *p = buf; *p; p++)
        if (*p == '_') *p = '-';
}

typedef struct flag_value {
    size_t idx;
    const char *value; /* borrowed from argv or a literal */
} flag_value;

/* First pass over argv: recognise every flag (errors for unknown ones), collect values. */
static attnd_status scan_flags(config *c, int argc, char **argv, flag_value *fv, size_t *n_fv,
                               const char **config_path, attnd_err *err) {
    *n_fv = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            c->help = true;
            continue;
        }
        if (!strcmp(a, "--print-config")) {
            c->print = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || !a[2])
            return attnd_fail(err, ATTND_ERR_INVALID, "unexpected argument '%s' (options start with --)", a);
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t n = eq ? (size_t)(eq - name) : strlen(name);
        char key[64];
        if (n >= sizeof(key)) return attnd_fail(err, ATTND_ERR_INVALID, "unknown option '%.60s'", a);
        for (size_t k = 0; k < n; k++) key[k] = name[k] == '-' ? '_' : name[k];
        key[n] = '\0';
        const char *value = eq ? eq + 1 : NULL;
        if (!strcmp(key, "config")) {
            if (!value) {
                if (i + 1 >= argc) return attnd_fail(err, ATTND_ERR_INVALID, "--config needs a value");
                value = argv[++i];
            }
            *config_path = value;
            continue;
        }
        int idx = find_key(key, n);
        if (idx < 0 && n > 3 && !strncmp(key, "no_", 3) && !eq) {
            int b = find_key(key + 3, n - 3);
            if (b >= 0 && SETTINGS[b].kind == K_BOOL) {
                idx = b;
                value = "false";
            }
        }
        if (idx < 0) {
            char hint[96];
            return attnd_fail(err, ATTND_ERR_INVALID, "unknown option '%.*s'%s", (int)(n + 2), a,
                              suggest(hint, sizeof(hint), key, n, true));
        }
        if (!value) {
            if (SETTINGS[idx].kind == K_BOOL) value = "true";
            else if (i + 1 >= argc) return attnd_fail(err, ATTND_ERR_INVALID, "--%.*s needs a value", (int)n, name);
            else value = argv[++i];
        }
        fv[*n_fv].idx = (size_t)idx;
        fv[*n_fv].value = value;
        (*n_fv)++;
    }
    return ATTND_OK;
}

/* $STATE_DIRECTORY (systemd's StateDirectory=) as the default state_dir. */
static attnd_status apply_systemd_state(config *c, server_settings *s, char *const *envp, attnd_err *err) {
    char dir[PATH_MAX];
    const char *state = first_dir(env_get(envp, "STATE_DIRECTORY"), dir, sizeof(dir));
    if (!state) return ATTND_OK;
    int idx = find_key("state_dir", strlen("state_dir"));
    return apply(c, s, (size_t)idx, state, CONFIG_SRC_DEFAULT, "default ($STATE_DIRECTORY)", 0, "$STATE_DIRECTORY",
                 err);
}

/* The config file: --config, else $ATTND_CONFIG, else $CONFIGURATION_DIRECTORY/attnd.conf when it exists. */
static attnd_status apply_file(config *c, server_settings *s, const char *path, char *const *envp, attnd_err *err) {
    if (!path) path = env_get(envp, "ATTND_CONFIG");
    if (path && !*path) path = NULL;
    char dir[PATH_MAX], sysd[PATH_MAX];
    const char *confdir = first_dir(env_get(envp, "CONFIGURATION_DIRECTORY"), dir, sizeof(dir));
    if (!path && confdir && snprintf(sysd, sizeof(sysd), "%s/attnd.conf", confdir) < (int)sizeof(sysd) &&
        access(sysd, F_OK) == 0)
        path = sysd;
    if (!path) return ATTND_OK;
    if (!(c->file_path = strdup(path))) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    return load_file(c, s, c->file_path, err);
}

/* ATTND_<KEY> for every setting. */
static attnd_status apply_environment(config *c, server_settings *s, char *const *envp, attnd_err *err) {
    for (size_t i = 0; i < N_SETTINGS; i++) {
        char name[64];
        config_env_name(name, sizeof(name), SETTINGS[i].key);
        const char *v = env_get(envp, name);
        if (!v || !*v) continue; /* empty = unset, as shells make it easy to export NAME= */
        char where[96];
        snprintf(where, sizeof(where), "environment %s", name);
        attnd_status st = apply(c, s, i, v, CONFIG_SRC_ENV, where, 0, where, err);
        if (st != ATTND_OK) return st;
    }
    return ATTND_OK;
}

/* The flags scan_flags collected, in order. */
static attnd_status apply_flags(config *c, server_settings *s, const flag_value *fv, size_t n_fv, attnd_err *err) {
    for (size_t k = 0; k < n_fv; k++) {
        char name[64], where[80];
        config_flag_name(name, sizeof(name), SETTINGS[fv[k].idx].key);
        snprintf(where, sizeof(where), "flag %s", name);
        /* A flag repeated on the command line: the last one wins, as usual for CLIs; the
         * same-layer check in apply() is only for api_key vs api_key_file. */
        c->slots[fv[k].idx].src = CONFIG_SRC_DEFAULT;
        attnd_status st = apply(c, s, fv[k].idx, fv[k].value, CONFIG_SRC_FLAG, where, 0, where, err);
        if (st != ATTND_OK) return st;
    }
    return ATTND_OK;
}

/* What no single setting can check on its own. */
static attnd_status check_together(const config *c, const server_settings *s, attnd_err *err) {
    if (s->default_max_tokens <= s->max_tokens_cap) return ATTND_OK;
    const char *a = NULL, *b = NULL;
    config_source_of(c, "max_tokens", &a);
    config_source_of(c, "max_tokens_cap", &b);
    return attnd_fail(err, ATTND_ERR_INVALID, "max_tokens = %d (%s) exceeds max_tokens_cap = %d (%s)",
                      s->default_max_tokens, a, s->max_tokens_cap, b);
}

attnd_status config_load(config **out, server_settings *s, int argc, char **argv, char *const *envp,
                         attnd_err *err) {
    *out = NULL;
    server_settings_default(s);
    if (!envp) envp = environ;
    config *c = calloc(1, sizeof(*c));
    if (c && !(c->slots = calloc(N_SETTINGS, sizeof(*c->slots)))) {
        free(c);
        c = NULL;
    }
    if (!c) return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    c->section = -1;
    flag_value *fv = calloc((size_t)(argc > 0 ? argc : 1), sizeof(*fv));
    size_t n_fv = 0;
    const char *path = NULL;
    /* Flags are read first (but applied last) because they name the config file. Layers go
     * lowest precedence first: systemd's defaults, the file, the environment, the flags. */
    attnd_status st = !fv ? attnd_fail(err, ATTND_ERR_NOMEM, "out of memory")
                          : scan_flags(c, argc, argv, fv, &n_fv, &path, err);
    if (st == ATTND_OK) st = apply_systemd_state(c, s, envp, err);
    if (st == ATTND_OK) st = apply_file(c, s, path, envp, err);
    if (st == ATTND_OK) st = apply_environment(c, s, envp, err);
    if (st == ATTND_OK) st = apply_flags(c, s, fv, n_fv, err);
    if (st == ATTND_OK) st = check_together(c, s, err);
    if (st == ATTND_OK) st = presets_finish(c, s, err);
    free(fv);
    if (st != ATTND_OK) {
        config_destroy(c);
        server_settings_default(s); /* no pointers into the freed config remain */
        return st;
    }
    *out = c;
    return ATTND_OK;
}

int config_scrub_argv(int argc, char **argv) {
    int n = 0;
    for (int i = 1; i < argc; i++) {
        char *v = NULL;
        if ((!strcmp(argv[i], "--api-key") || !strcmp(argv[i], "--admin-api-key")) && i + 1 < argc) v = argv[++i];
        else if (!strncmp(argv[i], "--api-key=", 10)) v = argv[i] + 10;
        else if (!strncmp(argv[i], "--admin-api-key=", 16)) v = argv[i] + 16;
        if (!v) continue;
        for (; *v; v++) *v = 'x'; /* same length: the process's argument area cannot grow or shrink */
        n++;
    }
    return n;
}

void config_destroy(config *c) {
    if (!c) return;
    for (size_t i = 0; i < N_SETTINGS; i++) free(c->slots[i].origin);
    free(c->slots);
    for (size_t i = 0; i < c->n_strings; i++) free(c->strings[i]);
    free(c->strings);
    free(c->file_path);
    for (int i = 0; i < c->n_plines; i++) free(c->plines[i].value);
    free(c->plines);
    free(c->presets);
    free(c);
}

bool config_wants_help(const config *c) { return c && c->help; }
bool config_wants_print(const config *c) { return c && c->print; }
const char *config_file_path(const config *c) { return c ? c->file_path : NULL; }

attnd_status config_set_default(config *c, server_settings *s, const char *key, const char *value,
                                const char *note, attnd_err *err) {
    int idx = find_key(key, strlen(key));
    if (idx < 0) return attnd_fail(err, ATTND_ERR_NOT_FOUND, "no setting named '%s'", key);
    if (c->slots[idx].src != CONFIG_SRC_DEFAULT || c->slots[idx].origin) return ATTND_OK;
    if (SETTINGS[idx].kind == K_STR && *(const char **)((char *)s + SETTINGS[idx].off)) return ATTND_OK;
    char where[96];
    snprintf(where, sizeof(where), "default for %s", key);
    return apply(c, s, (size_t)idx, value, CONFIG_SRC_DEFAULT, note ? note : "default", 0, where, err);
}

int config_source_of(const config *c, const char *key, const char **origin) {
    int idx = find_key(key, strlen(key));
    if (idx < 0) return -1;
    if (origin) *origin = c->slots[idx].origin ? c->slots[idx].origin : "default";
    return (int)c->slots[idx].src;
}

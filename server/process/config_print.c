/*
 * config_print.c — the configuration as text: --print-config (a valid config file that says
 * where every value came from, never the API key) and --help (one line per table entry).
 */
#include "config_internal.h"

#include "attnd/kv.h"

#include <ctype.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* A string as the file syntax reads it back: quoted when bare text would be misread. */
/* v as a config-file value: bare when the parser would read it back unchanged, else in double
 * quotes. NULL when neither works (a value from the environment or a flag holding a newline, or
 * a '"' in a value that needs quoting: the format has no escapes). */
static const char *quoted(const char *v, char *buf, size_t cap) {
    size_t n = strlen(v);
    if (strchr(v, '\n') || n + 3 > cap) return NULL; /* a line ends at '\n' only */
    bool quote = n == 0 || isspace((unsigned char)v[0]) || isspace((unsigned char)v[n - 1]) || v[0] == '"' ||
                 v[0] == '#';
    for (size_t i = 1; i < n && !quote; i++) quote = v[i] == '#' && isspace((unsigned char)v[i - 1]);
    if (quote && strchr(v, '"')) return NULL;
    snprintf(buf, cap, quote ? "\"%s\"" : "%s", v);
    return buf;
}

/* The [model.NAME] sections, as the file gave them (last: a section takes every line after it). */
static void print_presets(const config *c, FILE *out) {
    for (int p = 0; p < c->n_presets; p++) {
        fprintf(out, "\n[model.%s]\n", c->presets[p].name);
        for (int i = 0; i < c->n_plines; i++) {
            const preset_line *pl = &c->plines[i];
            if (pl->preset != p) continue;
            char val[PATH_MAX + 8];
            const char *key = pl->key < 0 ? "role" : config_settings[pl->key].key;
            if (quoted(pl->value, val, sizeof(val))) fprintf(out, "%-20s = %-30s # %s:%d\n", key, val, c->file_path, pl->line);
            else fprintf(out, "# %-18s   (a value a config file cannot hold)\n", key);
        }
    }
}

void config_print(const config *c, const server_settings *s, FILE *out) {
    fprintf(out, "# attnd serve: effective configuration (flag > environment > config file > default)\n");
    fprintf(out, "# config file: %s\n", c->file_path ? c->file_path : "(none)");
    for (size_t i = 0; i < config_n_settings; i++) {
        const entry *e = &config_settings[i];
        const slot *sl = &c->slots[i];
        const char *origin = sl->origin ? sl->origin : "default";
        const char *field = (const char *)s + e->off;
        char val[PATH_MAX + 8];
        if (e->kind == K_KEYFILE) {
            if (sl->raw && quoted(sl->raw, val, sizeof(val)))
                fprintf(out, "%-20s = %-30s # %s\n", e->key, val, origin);
            else if (sl->raw) fprintf(out, "# %-18s   (a path a config file cannot hold)  # %s\n", e->key, origin);
            else fprintf(out, "# %-18s   (not set)\n", e->key);
            continue;
        }
        if (e->flags & F_SECRET) {
            /* Never print the key itself, only whether it is set and by what. */
            const char *key = *(const char *const *)field;
            bool by_file = false;
            for (size_t j = 0; j < config_n_settings; j++)
                if (config_settings[j].kind == K_KEYFILE && config_settings[j].off == e->off && c->slots[j].raw) by_file = true;
            if (by_file) fprintf(out, "# %-18s   (set by api_key_file)\n", e->key);
            else if (key) fprintf(out, "# %-18s = (hidden, %zu bytes)  # %s\n", e->key, strlen(key), origin);
            else fprintf(out, "# %-18s   (not set: no authentication)\n", e->key);
            continue;
        }
        switch (e->kind) {
        case K_STR:
        case K_CHAT: {
            const char *v = *(const char *const *)field;
            if (!v) {
                val[0] = '\0';
            } else if (!quoted(v, val, sizeof(val))) {
                fprintf(out, "# %-18s   (a value a config file cannot hold)  # %s\n", e->key, origin);
                continue;
            }
            break;
        }
        case K_INT: snprintf(val, sizeof(val), "%d", *(const int *)field); break;
        case K_SIZE:
        case K_BYTES: snprintf(val, sizeof(val), "%zu", *(const size_t *)field); break;
        case K_FLOAT: snprintf(val, sizeof(val), "%g", (double)*(const float *)field); break;
        case K_BOOL: snprintf(val, sizeof(val), "%s", *(const bool *)field ? "true" : "false"); break;
        case K_LOGLEVEL: {
            int l = (int)*(const server_log_level *)field;
            snprintf(val, sizeof(val), "%s", l >= 0 && l < 4 ? config_log_levels[l] : "info");
            break;
        }
        case K_KVTYPE: snprintf(val, sizeof(val), "%s", kv_type_name((kv_type)*(const int *)field)); break;
        case K_KEYFILE: val[0] = '\0'; break;
        }
        fprintf(out, "%-20s = %-30s # %s\n", e->key, val, origin);
    }
    print_presets(c, out);
}

void config_usage(FILE *out) {
    fprintf(out, "Every setting can be given as a flag, an environment variable or a config file key\n"
                 "(precedence in that order). Flags take '--flag VALUE' or '--flag=VALUE'; booleans\n"
                 "also '--flag' / '--no-flag'.\n\n"
                 "  --config FILE            config file (default: $ATTND_CONFIG, else\n"
                 "                           $CONFIGURATION_DIRECTORY/attnd.conf under systemd)\n"
                 "  --print-config           print the effective configuration and where each value\n"
                 "                           came from, then exit\n"
                 "  --help                   this text\n\n");
    for (size_t i = 0; i < config_n_settings; i++) {
        char flag[64], env[64], lhs[96];
        config_flag_name(flag, sizeof(flag), config_settings[i].key);
        config_env_name(env, sizeof(env), config_settings[i].key);
        kind k = config_settings[i].kind;
        const char *arg = k == K_BOOL       ? ""
                          : k == K_LOGLEVEL ? " LEVEL"
                          : k == K_KVTYPE   ? " TYPE"
                          : k == K_CHAT     ? " NAME"
                          : k == K_STR || k == K_KEYFILE ? " STR"
                                                         : " N";
        snprintf(lhs, sizeof(lhs), "%s%s", flag, arg);
        fprintf(out, "  %-24s %s [%s]\n", lhs, config_settings[i].help, env);
    }
}

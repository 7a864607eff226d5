/*
 * config_internal.h — (server-private) the settings table and the config object, shared by
 * config.c (reading flags, environment and files) and config_print.c (--print-config, --help).
 */
#ifndef ATTND_CONFIG_INTERNAL_H
#define ATTND_CONFIG_INTERNAL_H

#include <stddef.h>

#include "config.h"

typedef enum kind {
    K_STR,      /* const char *; "" = unset (NULL) unless NONEMPTY */
    K_INT,      /* int within [min, max] */
    K_SIZE,     /* size_t within [min, max] */
    K_BYTES,    /* size_t with an optional k/M/G (binary) suffix */
    K_FLOAT,    /* float within [min, max] */
    K_BOOL,     /* bool: true/false/yes/no/on/off/1/0 */
    K_LOGLEVEL, /* server_log_level: error/warn/info/debug */
    K_KEYFILE,  /* a path whose contents become the const char * field (api_key_file) */
    K_CHAT,     /* const char *: a chat template family name known to chat.c; "" = detect */
    K_KVTYPE,   /* int holding a kv_type (attnd/kv.h): f16/f32/q8_0/q4_0 */
} kind;

enum {
    F_NONEMPTY = 1,
    F_SECRET = 2,
    F_ENGINE = 4, /* the default is the engine's (sampler_params_default), not the table's */
};

typedef struct entry {
    const char *key;  /* file key; env is ATTND_<KEY>, flag is --<key with dashes> */
    kind kind;
    size_t off;       /* offsetof(server_settings, field) */
    double min, max;  /* numeric range, inclusive */
    int flags;        /* F_* */
    const char *def;  /* the default, as a value of the setting would be written; NULL = unset/0 */
    const char *help; /* one line for --help */
} entry;

extern const entry config_settings[];   /* every setting, once */
extern const size_t config_n_settings;
extern const char *const config_log_levels[4]; /* indexed by server_log_level */

typedef struct slot {
    config_source src; /* last layer that wrote this setting */
    char *origin;      /* "flag --port", "environment ATTND_PORT", "file:12", NULL = "default" */
    int line;          /* config file line, when src == CONFIG_SRC_FILE */
    char *raw;         /* K_KEYFILE: the path given (the contents are secret) */
} slot;

/* One line of a [model.NAME] section, applied over the final settings at the end (config.c). */
typedef struct preset_line {
    int preset;       /* index into config.presets */
    int key;          /* index into config_settings; -1 = role */
    char *value;      /* owned */
    int line;
} preset_line;

struct config {
    slot *slots;      /* config_n_settings, one per table entry */
    char **strings; /* every string a settings field points to; freed at destroy */
    size_t n_strings, cap_strings;
    char *file_path; /* config file read, or NULL */
    server_preset *presets; /* (n_presets) the [model.NAME] sections, in file order */
    int n_presets;
    preset_line *plines; /* (n_plines) their lines */
    int n_plines;
    int section;      /* the preset the file's lines go to while it is read; -1 = none */
    bool help, print;
};

/* ATTND_<KEY> and --<key-with-dashes> for a table key. */
void config_env_name(char *buf, size_t cap, const char *key);
void config_flag_name(char *buf, size_t cap, const char *key);

#endif /* ATTND_CONFIG_INTERNAL_H */

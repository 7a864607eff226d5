/*
 * sess_file.h — the session file format (sess.h describes it): a session's history to the text of
 * its file and back. Pure functions; the files themselves are statedir.c's.
 */
#ifndef ATTND_SERVER_SESS_FILE_H
#define ATTND_SERVER_SESS_FILE_H

#include <stddef.h>
#include <stdint.h>

#define SESS_FILE_SUFFIX ".session.json"
#define SESS_FILE_MAX_TOKENS ((size_t)1 << 24)

typedef enum {
    SESS_FILE_OK,
    SESS_FILE_OTHER_MODEL, /* a valid file of another model: not ours, left alone */
    SESS_FILE_DAMAGED,     /* why says what is wrong */
} sess_file_result;

typedef struct sess_file {
    int32_t *tokens; /* (n_tokens) owned: the caller frees it (also on DAMAGED: NULL then) */
    int n_tokens;
    int64_t created_ms, last_use_ms; /* missing in the file: now, and created_ms */
    char id[65], owner[17];          /* as the file says ("" when missing or too long): a
                                        shared store checks them against the record's key */
    char why[160];                   /* on DAMAGED */
} sess_file;

/* The file's text (new string, caller frees; NULL when out of memory). owner "" = none. */
char *sess_file_encode(const char *id, const char *owner, const char *model_tag, int64_t created_ms,
                       int64_t last_use_ms, const int32_t *tokens, int n_tokens);
/* Parses len bytes of text, a file of model_tag's vocabulary. DAMAGED also when out of memory. */
sess_file_result sess_file_decode(const char *text, size_t len, const char *model_tag, sess_file *out);

#endif

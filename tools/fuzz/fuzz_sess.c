/*
 * fuzz_sess.c — (fuzzing only) the session-file loader on arbitrary bytes.
 *
 * The input is written as <dir>/fuzz.session.json in a private state directory, and a session
 * store is opened on that directory (which loads every session file of the model "m/vocab64").
 * A session that loads is then used as the server would: acquired, extended, persisted and
 * released, and the store reopened must hold the same history.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "sess.h"
#include "slog.h"

static char g_dir[64];
static char g_file[128];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_state_dir("sess", "fuzz.session.json", g_dir, g_file);
    slog_set_level(SERVER_LOG_ERROR); /* damaged files are warned about; keep the output short */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write_file(g_file, data, size);
    sess_store *st = NULL;
    attnd_err err;
    if (sess_store_create(&st, g_dir, "m/vocab64", 4, &err) != ATTND_OK) return 0;
    sess *s = NULL;
    if (sess_acquire(st, NULL, "fuzz", &s, &err) == ATTND_OK) {
        int n = s->n_tokens;
        int32_t *toks = malloc(((size_t)n + 1) * sizeof(int32_t));
        if (n) memcpy(toks, s->tokens, (size_t)n * sizeof(int32_t)); /* an empty history may have no array */
        toks[n] = 5;
        FUZZ_CHECK(sess_release(st, s, toks, n + 1, &err) == ATTND_OK, "release: %s", err.msg);
        FUZZ_CHECK(sess_persist(st, NULL, "fuzz", NULL, &err) == ATTND_OK, "persist: %s", err.msg);
        sess_store_destroy(st);
        st = NULL;
        FUZZ_CHECK(sess_store_create(&st, g_dir, "m/vocab64", 4, &err) == ATTND_OK, "reopen: %s", err.msg);
        FUZZ_CHECK(sess_acquire(st, NULL, "fuzz", &s, &err) == ATTND_OK, "reopened store lost the session: %s", err.msg);
        FUZZ_CHECK(s->n_tokens == n + 1 && !memcmp(s->tokens, toks, ((size_t)n + 1) * sizeof(int32_t)),
                   "history differs after persist and reload");
        sess_abandon(st, s);
        free(toks);
    }
    sess_store_destroy(st);
    return 0;
}

/*
 * fuzz_rstore.c — (fuzzing only) the stored-response loader on arbitrary bytes.
 *
 * The input is written as <dir>/resp_fuzz.response.json in a private state directory and a
 * response store is opened on it. When the file loads, the response is read back, stored again
 * (replacing it) and the store reopened must give the same response; damaged files are skipped,
 * never a crash.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "rstore.h"
#include "slog.h"

static char g_dir[64];
static char g_file[128];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_state_dir("rstore", "resp_fuzz.response.json", g_dir, g_file);
    slog_set_level(SERVER_LOG_ERROR);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write_file(g_file, data, size);
    rstore *s = NULL;
    attnd_err err;
    if (rstore_create(&s, g_dir, "m/vocab64", 8, &err) != ATTND_OK) return 0;
    json_t *resp = NULL, *conv = NULL;
    char session[SESS_ID_MAX + 1] = "";
    if (rstore_get(s, NULL, "resp_fuzz", &resp, &conv, session, &err) == ATTND_OK) {
        FUZZ_CHECK(resp != NULL, "a loaded entry without its response");
        attnd_status put = rstore_put(s, NULL, resp, conv, session[0] ? session : NULL, NULL, &err);
        rstore_destroy(s);
        s = NULL;
        if (put == ATTND_OK) {
            FUZZ_CHECK(rstore_create(&s, g_dir, "m/vocab64", 8, &err) == ATTND_OK, "reopen: %s", err.msg);
            json_t *again = NULL;
            FUZZ_CHECK(rstore_get(s, NULL, "resp_fuzz", &again, NULL, NULL, &err) == ATTND_OK,
                       "the stored response was lost: %s", err.msg);
            FUZZ_CHECK(json_equal(again, resp), "the response differs after store and reload");
            json_decref(again);
        }
    }
    json_decref(resp);
    json_decref(conv);
    rstore_destroy(s);
    return 0;
}

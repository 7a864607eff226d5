/*
 * fuzz_statedir.c — (fuzzing only) the state directory's durable writes and removals under the
 * fault hook's file (statedir.h, $ATTND_FAULT_FILE), both on arbitrary bytes.
 *
 * The input up to its first NUL is the fault file ("<step> <ERRNO> [<name part>]" lines, or any
 * bytes); the rest is the text written over an entry that holds "old". Whatever fails, the
 * contract must hold: a write that returns OK left exactly the new text; one that fails left the
 * old text, or the new one only when it failed after the rename (the directory sync); no
 * temporary file is ever left; a removal that returns OK left no file.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "slog.h"
#include "statedir.h"

static char g_dir[64], g_fault[128];
static statedir *g_sd;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    /* the fault file lives in the directory too: its name is no entry's, so writes ignore it */
    fuzz_state_dir("statedir", "faults", g_dir, g_fault);
    setenv("ATTND_FAULT_FILE", g_fault, 1);
    slog_set_level(SERVER_LOG_ERROR);
    attnd_err err;
    if (statedir_open(&g_sd, g_dir, NULL, &err) != ATTND_OK) abort();
    return 0;
}

static void set_faults(const uint8_t *p, size_t n) { fuzz_write_file(g_fault, p, n); }

/* The entry's text ("" and false when there is no file). */
static bool holds(char **text, size_t *len) {
    attnd_err err;
    return statedir_read(g_sd, "ab", "e1", ".session.json", SIZE_MAX, text, len, NULL, &err) == ATTND_OK;
}

static int temp_files(void) {
    DIR *d = opendir(g_dir);
    if (!d) abort();
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t nf = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t len = nul ? size - nf - 1 : 0;
    attnd_err err;
    set_faults(NULL, 0);
    FUZZ_CHECK(statedir_write(g_sd, "ab", "e1", ".session.json", "old", 3, NULL, &err) == ATTND_OK, "%s", err.msg);
    set_faults(data, nf);
    int e = -1;
    attnd_status rc = statedir_write(g_sd, "ab", "e1", ".session.json", text, len, &e, &err);
    set_faults(NULL, 0);
    char *got = NULL;
    size_t glen = 0;
    FUZZ_CHECK(holds(&got, &glen), "the entry vanished (write %d)", rc);
    bool is_new = glen == len && !memcmp(got, text, len), is_old = glen == 3 && !memcmp(got, "old", 3);
    free(got);
    FUZZ_CHECK(rc != ATTND_OK || is_new, "a write answered OK without the new text");
    FUZZ_CHECK(rc == ATTND_OK || is_old || is_new, "a failed write left something else");
    FUZZ_CHECK(rc == ATTND_OK || e != 0 || rc == ATTND_ERR_NOMEM, "a failed write without its errno");
    FUZZ_CHECK(temp_files() == 0, "a temporary file was left (write %d)", rc);
    set_faults(data, nf);
    rc = statedir_remove(g_sd, "ab", "e1", ".session.json", &e, &err);
    set_faults(NULL, 0);
    got = NULL;
    bool there = holds(&got, &glen);
    free(got);
    FUZZ_CHECK(rc != ATTND_OK || !there, "a removal answered OK with the file still there");
    return 0;
}

/*
 * fuzz_hub.c — (fuzzing only) what `attnd pull` reads from the network and the command line:
 * a model reference (hub_parse_ref) and a repository's tree listing (hub_pick_from_tree).
 *
 * The input up to its first NUL is a reference; the rest is a tree listing (JSON), picked with
 * the reference's tag. Whatever the bytes: a parsed reference has a repository of the form
 * org/repo with no ".." part, and a picked path is a GGUF inside the repository (no leading '/',
 * no ".." component).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "hub.h"

/* Whether a '/'-separated component of p is "..". */
static int has_dotdot(const char *p) {
    for (const char *c = p;; c++) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.') return 1;
        c += n;
        if (!*c) return 0;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t rl = nul ? (size_t)(nul - data) : size;
    char *ref = malloc(rl + 1);
    if (!ref) return 0;
    memcpy(ref, data, rl);
    ref[rl] = '\0';
    hub_ref r;
    attnd_err err;
    if (hub_parse_ref(ref, &r, &err) == ATTND_OK) {
        const char *slash = strchr(r.repo, '/');
        FUZZ_CHECK(slash && !strchr(slash + 1, '/') && !strstr(r.repo, ".."), "bad repo '%s'", r.repo);
    } else {
        r.tag[0] = '\0';
    }
    free(ref);
    if (!nul) return 0;
    char path[1024];
    if (hub_pick_from_tree((const char *)nul + 1, size - rl - 1, r.tag, path, sizeof(path), &err) == ATTND_OK) {
        size_t n = strlen(path);
        FUZZ_CHECK(path[0] != '/' && n > 5 && !strcmp(path + n - 5, ".gguf"), "bad pick '%s'", path);
        FUZZ_CHECK(!has_dotdot(path), "'..' in '%s'", path);
    }
    return 0;
}

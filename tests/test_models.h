/*
 * test_models.h — (tests only) where the test models are, and the quantized variants the suite
 * makes itself: test_model_path("stories260K-Q8_0.gguf") runs `attnd quantize` on
 * tests/data/models/stories260K.gguf into the build folder's test-models/ the first time it is asked for,
 * and again whenever the source model is newer than the variant (quantize writes to a temporary file and renames, so concurrent tests are safe). The
 * committed llama.cpp references (tests/data/reference-greedy.json) were made from the same
 * variants by tests/data/regenerate.sh.
 *
 * Names: "stories260K.gguf" (tests/data/models), "attnd-sotu.gguf" (models/, the default model),
 * and "<one of those>-<TYPE>.gguf" for any TYPE `attnd quantize` knows.
 */
#ifndef ATTND_TEST_MODELS_H
#define ATTND_TEST_MODELS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline const char *test_model_base_path(const char *base, char *buf, size_t cap) {
    if (!strcmp(base, "attnd-sotu")) snprintf(buf, cap, "%s/models/attnd-sotu.gguf", ATTND_SOURCE_DIR);
    else snprintf(buf, cap, "%s/models/%s.gguf", ATTND_DATA_DIR, base);
    return buf;
}

/* The path of test model `name` in buf (made first when it is a quantized variant); the test
 * fails when it cannot be made. */
static inline const char *test_model_path(const char *name, char *buf, size_t cap) {
    char base[128], type[32];
    const char *dash = strrchr(name, '-'), *dot = strrchr(name, '.');
    bool variant = dash && dot && dot > dash && (size_t)(dash - name) < sizeof base &&
                   (size_t)(dot - dash - 1) < sizeof type && strcmp(name, "attnd-sotu.gguf");
    if (!variant) {
        snprintf(base, sizeof base, "%.*s", (int)(dot ? dot - name : (long)strlen(name)), name);
        return test_model_base_path(base, buf, cap);
    }
    snprintf(base, sizeof base, "%.*s", (int)(dash - name), name);
    snprintf(type, sizeof type, "%.*s", (int)(dot - dash - 1), dash + 1);
    snprintf(buf, cap, "%s/%s", ATTND_TEST_TMP, name);
    char src[1024], cmd[4096];
    test_model_base_path(base, src, sizeof src);
    /* a variant made before its source last changed (a new default model) is made again */
    struct stat vs, ss;
    if (stat(buf, &vs) == 0 && (stat(src, &ss) != 0 || vs.st_mtime > ss.st_mtime)) return buf;
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' quantize --quiet '%s' '%s' %s 2>&1", ATTND_TEST_TMP, ATTND_BINARY,
             src, buf, type);
    cr_assert_eq(system(cmd), 0, "could not make %s: %s", name, cmd);
    return buf;
}

#endif

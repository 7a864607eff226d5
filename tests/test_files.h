/*
 * test_files.h — (tests only) a whole file read into memory. Every step asserts: a test that gets
 * the text has it. Header-only, static inline.
 */
#ifndef ATTND_TEST_FILES_H
#define ATTND_TEST_FILES_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

/* The bytes of path, malloc'd and NUL-terminated (the caller frees them); *len gets their count. */
static inline char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    cr_assert_geq(n, 0, "cannot size %s", path);
    char *s = malloc((size_t)n + 1);
    cr_assert(s && fread(s, 1, (size_t)n, f) == (size_t)n, "cannot read %s", path);
    s[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return s;
}

#endif

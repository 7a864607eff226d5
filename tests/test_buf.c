/*
 * test_buf.c — the growable buffer (engine/buf.c): appends keep it NUL-terminated, growth keeps
 * the contents, printf appends formatted text of any length, clear keeps the storage; and the
 * growable arrays of attnd_grow (engine/common.c).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/buf.h"
#include "attnd/common.h"

Test(buf, appends_stay_nul_terminated_across_growth) {
    buf b;
    buf_init(&b);
    cr_assert_null(b.p, "nothing allocated before the first append");
    char chunk[100];
    memset(chunk, 'x', sizeof(chunk));
    for (int i = 0; i < 50; i++) cr_assert(buf_append(&b, chunk, sizeof(chunk)));
    cr_assert_eq(b.len, 5000);
    cr_assert_geq(b.cap, 5001);
    cr_assert_eq(b.p[5000], '\0');
    cr_assert_eq(strspn(b.p, "x"), 5000, "growth kept every byte");
    cr_assert(buf_append(&b, "", 0));
    cr_assert_eq(b.len, 5000);
    buf_free(&b);
    cr_assert_null(b.p);
    cr_assert_eq(b.len, 0);
    buf_free(NULL);
}

Test(buf, printf_appends_formatted_text_of_any_length) {
    buf b;
    buf_init(&b);
    cr_assert(buf_puts(&b, "n="));
    cr_assert(buf_printf(&b, "%d %s", 42, "ok"));
    cr_assert_str_eq(b.p, "n=42 ok");
    char big[3000];
    memset(big, 'y', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_assert(buf_printf(&b, "[%s]", big));
    cr_assert_eq(b.len, 7 + 2 + 2999);
    cr_assert_eq(b.p[b.len - 1], ']');
    size_t cap = b.cap;
    buf_clear(&b);
    cr_assert_eq(b.len, 0);
    cr_assert_str_eq(b.p, "");
    cr_assert_eq(b.cap, cap, "clear keeps the storage");
    buf_free(&b);
}

/* buf_reserve used to add len + extra + 1 unchecked: a huge extra wrapped round to a small need,
 * and it answered "room enough" for a size no buffer has. */
Test(buf, a_reserve_past_size_max_is_refused) {
    buf b;
    buf_init(&b);
    cr_assert(buf_append(&b, "abc", 3));
    size_t cap = b.cap;
    cr_assert_not(buf_reserve(&b, SIZE_MAX), "len + SIZE_MAX + 1 overflows");
    cr_assert_not(buf_reserve(&b, SIZE_MAX - 3), "so does len + (SIZE_MAX - len) + 1");
    cr_assert_eq(b.cap, cap, "a refused reserve changes nothing");
    cr_assert_str_eq(b.p, "abc");
    cr_assert(buf_reserve(&b, cap), "an ordinary reserve still grows");
    cr_assert_geq(b.cap, 3 + cap + 1);
    cr_assert_str_eq(b.p, "abc");
    buf_free(&b);
}

// ---- attnd_grow (attnd/common.h): the growable arrays beside the byte buffer ------------------

Test(grow, doubles_from_first_keeps_contents_and_refuses_overflow) {
    int32_t *v = NULL;
    size_t cap = 0;
    cr_assert(attnd_grow(&v, &cap, 1, sizeof(*v), 16));
    cr_assert_eq(cap, 16);
    for (int i = 0; i < 16; i++) v[i] = i;
    cr_assert(attnd_grow(&v, &cap, 16, sizeof(*v), 16), "enough room already");
    cr_assert_eq(cap, 16);
    cr_assert(attnd_grow(&v, &cap, 100, sizeof(*v), 16));
    cr_assert_eq(cap, 128);
    for (int i = 0; i < 16; i++) cr_assert_eq(v[i], i, "growth kept element %d", i);
    int32_t *before = v;
    cr_assert_not(attnd_grow(&v, &cap, SIZE_MAX / 2, sizeof(*v), 16), "a size past SIZE_MAX is refused");
    cr_assert_eq(v, before);
    cr_assert_eq(cap, 128, "a refused growth changes nothing");
    free(v);
}

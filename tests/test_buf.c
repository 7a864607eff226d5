/*
 * test_buf.c — the growable buffer (engine/buf.c): appends keep it NUL-terminated, growth keeps
 * the contents, printf appends formatted text of any length, clear keeps the storage.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "attnd/buf.h"

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

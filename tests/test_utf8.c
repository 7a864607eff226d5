/* test_utf8.c — UTF-8 validation, repair and encoding: valid text passes untouched, every kind of invalid
 * byte becomes exactly one U+FFFD, NUL is kept or replaced as asked. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/utf8.h"

#define FFFD "\xEF\xBF\xBD"

static void expect_sanitized(const char *in, size_t n, bool replace_nul, const char *want, size_t want_n) {
    size_t got_n;
    char *got = utf8_sanitize(in, n, replace_nul, &got_n);
    cr_assert_not_null(got);
    cr_assert_eq(got_n, want_n, "length %zu, expected %zu", got_n, want_n);
    cr_assert_eq(memcmp(got, want, want_n), 0);
    cr_assert_eq(got[got_n], '\0');
    free(got);
}

Test(utf8, character_lengths) {
    cr_assert_eq(utf8_char_len("a", 1), 1);
    cr_assert_eq(utf8_char_len("\xC3\xA9", 2), 2);         /* é */
    cr_assert_eq(utf8_char_len("\xE2\x96\x81", 3), 3);     /* ▁ */
    cr_assert_eq(utf8_char_len("\xF0\x9F\x98\x80", 4), 4); /* 😀 */
    cr_assert_eq(utf8_char_len("\xE2\x96", 2), 0, "truncated");
    cr_assert_eq(utf8_char_len("\x80", 1), 0, "stray continuation");
    cr_assert_eq(utf8_char_len("\xC0\xAF", 2), 0, "overlong");
    cr_assert_eq(utf8_char_len("\xE0\x80\xAF", 3), 0, "overlong 3-byte");
    cr_assert_eq(utf8_char_len("\xED\xA0\x80", 3), 0, "surrogate");
    cr_assert_eq(utf8_char_len("\xF4\x90\x80\x80", 4), 0, "beyond U+10FFFF");
    cr_assert_eq(utf8_char_len("", 0), 0);
}

Test(utf8, valid_text_is_copied_unchanged) {
    const char *s = "caf\xC3\xA9 \xF0\x9F\x98\x80 \xE2\x96\x81x";
    cr_assert(utf8_valid(s, strlen(s), true));
    expect_sanitized(s, strlen(s), true, s, strlen(s));
}

Test(utf8, each_invalid_byte_becomes_one_replacement_character) {
    expect_sanitized("a\xE2\x96", 3, false, "a" FFFD FFFD, 7);
    expect_sanitized("\x80x\xFF", 3, false, FFFD "x" FFFD, 7);
    cr_assert_not(utf8_valid("a\xE2\x96", 3, false));
}

Test(utf8, nul_is_kept_or_replaced_as_asked) {
    cr_assert(utf8_valid("a\0b", 3, false));
    cr_assert_not(utf8_valid("a\0b", 3, true));
    expect_sanitized("a\0b", 3, false, "a\0b", 3);
    expect_sanitized("a\0b", 3, true, "a" FFFD "b", 5);
}

Test(utf8, encode_writes_what_char_len_reads_back) {
    const uint32_t cps[] = {0,      0x41,   0x7F,   0x80,    0xE9,    0x7FF,   0x800,
                            0x2581, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF};
    const size_t lens[] = {1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4};
    for (size_t i = 0; i < sizeof(cps) / sizeof(cps[0]); i++) {
        char out[4];
        cr_assert_eq(utf8_encode(out, cps[i]), lens[i], "U+%X", cps[i]);
        cr_expect_eq(utf8_char_len(out, lens[i]), lens[i], "U+%X reads back", cps[i]);
    }
    char out[4];
    cr_expect_eq(utf8_encode(out, 0xE9), 2);
    cr_expect_eq(memcmp(out, "\xC3\xA9", 2), 0);
    cr_expect_eq(utf8_encode(out, 0x1F600), 4);
    cr_expect_eq(memcmp(out, "\xF0\x9F\x98\x80", 4), 0);
    cr_expect_eq(utf8_encode(out, 0x110000), 0, "beyond Unicode");
}

Test(utf8, hex_digits_in_both_cases) {
    const char *digits = "0123456789abcdef", *upper = "ABCDEF";
    for (int i = 0; i < 16; i++) cr_expect_eq(utf8_hex_digit(digits[i]), i);
    for (int i = 0; i < 6; i++) cr_expect_eq(utf8_hex_digit(upper[i]), 10 + i);
    cr_expect_eq(utf8_hex_digit('g'), -1);
    cr_expect_eq(utf8_hex_digit('G'), -1);
    cr_expect_eq(utf8_hex_digit('/'), -1);
    cr_expect_eq(utf8_hex_digit(':'), -1);
    cr_expect_eq(utf8_hex_digit('\0'), -1);
}

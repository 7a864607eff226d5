/*
 * test_server_slog.c — the server log (server/slog.c): one call is one line, whatever a client
 * put into the message.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "slog.h"

Test(slog, escape_writes_control_characters_as_hex) {
    char out[64];
    cr_expect_eq(slog_escape(out, sizeof(out), "a\nb\r\x1b[31m\x7f" "c"), strlen("a\\x0ab\\x0d\\x1b[31m\\x7fc"));
    cr_expect_str_eq(out, "a\\x0ab\\x0d\\x1b[31m\\x7fc");
    cr_expect_eq(slog_escape(out, sizeof(out), "caf\xc3\xa9 /x?y=1"), 12, "UTF-8 and printable ASCII pass");
    cr_expect_str_eq(out, "caf\xc3\xa9 /x?y=1");
    cr_expect_eq(slog_escape(out, 6, "ab\ncd"), 2, "an escape that does not fit is dropped whole");
    cr_expect_str_eq(out, "ab");
}

Test(slog, a_forged_newline_stays_on_the_same_line) {
    char path[] = "/tmp/attnd-slog-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    int saved = dup(STDERR_FILENO);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    slog_info("GET %s 404", "/x\n<3>2026-01-01T00:00:00.000Z attnd[error] forged");
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char buf[512] = {0};
    cr_assert_gt(pread(fd, buf, sizeof(buf) - 1, 0), 0);
    close(fd);
    unlink(path);
    cr_expect_eq(strchr(buf, '\n'), buf + strlen(buf) - 1, "more than one line: %s", buf);
    cr_expect(strstr(buf, "GET /x\\x0a<3>2026"), "%s", buf);
    cr_expect(buf[0] >= '0' && buf[0] <= '9', "the line starts with its own timestamp: %s", buf);
}

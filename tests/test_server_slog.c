/*
 * test_server_slog.c — the server log (server/process/slog.c): one call is one line, whatever a client
 * put into the message.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Logs one info line with stderr sent to a temporary file and returns what was written. With
 * as_journal, JOURNAL_STREAM names that file's device:inode, as journald names its stream. Each
 * Criterion test runs in its own process, so slog's one-time journal check sees this set-up. */
static void log_one_line(char *buf, size_t cap, bool as_journal) {
    char path[] = "/tmp/attnd-slog-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    char js[64];
    snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
    if (as_journal) setenv("JOURNAL_STREAM", js, 1);
    else unsetenv("JOURNAL_STREAM");
    int saved = dup(STDERR_FILENO);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    slog_info("GET %s 404", "/x\n<3>2026-01-01T00:00:00.000Z attnd[error] forged");
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    memset(buf, 0, cap);
    cr_assert_gt(pread(fd, buf, cap - 1, 0), 0);
    close(fd);
    unlink(path);
}

Test(slog, a_forged_newline_stays_on_the_same_line) {
    char buf[512];
    log_one_line(buf, sizeof(buf), false);
    cr_expect_eq(strchr(buf, '\n'), buf + strlen(buf) - 1, "more than one line: %s", buf);
    cr_expect(strstr(buf, "GET /x\\x0a<3>2026"), "%s", buf);
    cr_expect(buf[0] >= '0' && buf[0] <= '9', "no syslog prefix when stderr is not the journal: %s", buf);
}

Test(slog, lines_carry_syslog_priorities_only_when_stderr_is_the_journal) {
    char buf[512];
    log_one_line(buf, sizeof(buf), true);
    cr_expect(!strncmp(buf, "<6>", 3), "%s", buf);
    cr_expect_eq(strchr(buf, '\n'), buf + strlen(buf) - 1, "more than one line: %s", buf);
}

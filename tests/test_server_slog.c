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

Test(slog, request_ids_are_short_and_safe_for_a_header_and_a_log_line) {
    cr_expect(slog_request_id_valid("req-0123abc"));
    cr_expect(slog_request_id_valid("4bf92f35.77b3:da6a_3ce9-29"));
    cr_expect(!slog_request_id_valid(""));
    cr_expect(!slog_request_id_valid("a b"));
    cr_expect(!slog_request_id_valid("x\ny"));
    cr_expect(!slog_request_id_valid("caf\xc3\xa9"));
    char id[80];
    memset(id, 'a', 64);
    id[64] = '\0';
    cr_expect(slog_request_id_valid(id), "64 characters");
    id[64] = 'a', id[65] = '\0';
    cr_expect(!slog_request_id_valid(id), "65 characters");
}

Test(slog, a_thread_working_for_a_request_tags_its_lines) {
    char path[] = "/tmp/attnd-slog-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    int saved = dup(STDERR_FILENO);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    slog_set_request("req-42");
    slog_info("one");
    slog_set_request(NULL);
    slog_info("two");
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char buf[512] = {0};
    cr_assert_gt(pread(fd, buf, sizeof(buf) - 1, 0), 0);
    close(fd);
    unlink(path);
    cr_expect(strstr(buf, "attnd[info] req=req-42 one\n"), "%s", buf);
    cr_expect(strstr(buf, "attnd[info] two\n"), "%s", buf);
}

/*
 * test_server_statedir.c — the state directory's file layer (server/runtime/statedir.c): the id
 * and owner rules, owner~id naming, the scan (valid names only, interrupted writes removed),
 * writes that replace a file whole, staged writes that are committed or discarded without a
 * temporary file left, and failures that carry the errno of the call that failed.
 */
#define _GNU_SOURCE /* nftw */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "statedir.h"

static char dir[64];

static void make_dir(void) {
    strcpy(dir, "/tmp/attnd-statedir-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Everything under dir, depth first (some tests leave directories in it). */
static void remove_dir(void) { cr_assert_eq(nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS), 0); }

TestSuite(statedir, .init = make_dir, .fini = remove_dir);

static statedir *open_dir(void) {
    statedir *sd;
    attnd_err err;
    int e = -1;
    cr_assert_eq(statedir_open(&sd, dir, &e, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(e, 0, "success reports no errno");
    return sd;
}

/* Writes text as the file dir/name, outside the module. */
static void put_file(const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0, "%s", p);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static bool exists(const char *name) {
    char p[256];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* The number of entries in dir whose name contains part. */
static int count_named(const char *part) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}

static char *read_entry(statedir *sd, const char *owner, const char *id) {
    char *text;
    size_t len;
    attnd_err err;
    cr_assert_eq(statedir_read(sd, owner, id, ".x.json", 1 << 20, &text, &len, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(strlen(text), len);
    return text;
}

Test(statedir, ids_and_owners_follow_one_rule) {
    cr_assert(statedir_id_valid("a"));
    cr_assert(statedir_id_valid("resp_01.Ab-9"));
    cr_assert_not(statedir_id_valid(NULL));
    cr_assert_not(statedir_id_valid(""));
    cr_assert_not(statedir_id_valid(".hidden"));
    cr_assert_not(statedir_id_valid("a/b"));
    cr_assert_not(statedir_id_valid("o~id"), "'~' separates the owner, so no id holds one");
    cr_assert_not(statedir_id_valid("x.session.json.tmp.1"), "its file would look like an interrupted write's");
    cr_assert(statedir_id_valid("x.tmp"));
    char long_id[STATEDIR_ID_MAX + 2];
    memset(long_id, 'a', sizeof(long_id) - 1);
    long_id[STATEDIR_ID_MAX + 1] = '\0';
    cr_assert_not(statedir_id_valid(long_id));
    long_id[STATEDIR_ID_MAX] = '\0';
    cr_assert(statedir_id_valid(long_id));
    cr_assert(statedir_owner_valid(NULL));
    cr_assert(statedir_owner_valid(""));
    cr_assert(statedir_owner_valid("0123456789abcdef"));
    cr_assert_not(statedir_owner_valid("0123456789abcdef0"), "17 digits");
    cr_assert_not(statedir_owner_valid("ABCD"), "lower case only");
}

Test(statedir, paths_name_the_owner_before_a_tilde) {
    statedir *sd = open_dir();
    char *p = statedir_path(sd, NULL, "s1", ".session.json"), *q = statedir_path(sd, "beef", "s1", ".session.json");
    char want[256];
    snprintf(want, sizeof(want), "%s/s1.session.json", dir);
    cr_assert_str_eq(p, want);
    snprintf(want, sizeof(want), "%s/beef~s1.session.json", dir);
    cr_assert_str_eq(q, want);
    cr_assert_str_eq(statedir_dir(sd), dir);
    free(p);
    free(q);
    statedir_close(sd);
}

typedef struct seen {
    char names[8][128];
    int n;
} seen;

static void collect(void *user, const char *owner, const char *id) {
    seen *s = user;
    cr_assert_lt(s->n, 8);
    snprintf(s->names[s->n++], sizeof(s->names[0]), "%s|%s", owner, id);
}

static bool saw(const seen *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) return true;
    return false;
}

Test(statedir, scan_reports_valid_names_and_removes_interrupted_writes) {
    put_file("plain.x.json", "1");
    put_file("beef~owned.x.json", "2");
    put_file("other.y.json", "3");            /* another suffix: not this scan's */
    put_file("BEEF~bad-owner.x.json", "4");   /* owner not lower-case hex */
    put_file("~no-owner.x.json", "5");        /* empty owner */
    put_file(".x.json", "6");                 /* empty id */
    put_file("plain.x.json.tmp.4242.7", "{"); /* a crash mid-write */
    put_file("other.y.json.tmp.1.1", "{");    /* another suffix's: left alone */
    statedir *sd = open_dir();
    seen s = {0};
    attnd_err err;
    cr_assert_eq(statedir_scan(sd, ".x.json", collect, &s, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(s.n, 2, "only the two valid names, saw %d", s.n);
    cr_assert(saw(&s, "|plain"));
    cr_assert(saw(&s, "beef|owned"));
    cr_assert_not(exists("plain.x.json.tmp.4242.7"), "the interrupted write is removed");
    cr_assert(exists("other.y.json.tmp.1.1"));
    statedir_close(sd);
}

Test(statedir, open_creates_the_directory_and_refuses_a_file) {
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/state", dir);
    statedir *sd;
    attnd_err err;
    int e = -1;
    cr_assert_eq(statedir_open(&sd, sub, &e, &err), ATTND_OK, "%s", err.msg);
    struct stat sb;
    cr_assert_eq(stat(sub, &sb), 0);
    cr_assert(S_ISDIR(sb.st_mode));
    cr_assert_eq(sb.st_mode & 0777, 0700);
    statedir_close(sd);
    put_file("plain", "not a directory");
    snprintf(sub, sizeof(sub), "%s/plain/state", dir);
    cr_assert_eq(statedir_open(&sd, sub, &e, &err), ATTND_ERR_IO);
    cr_assert_eq(e, ENOTDIR, "errno %d", e);
    cr_assert_null(sd);
    cr_assert_not_null(strstr(err.msg, sub), "the message names the directory: %s", err.msg);
}

Test(statedir, write_replaces_the_whole_file_and_leaves_no_temporary) {
    statedir *sd = open_dir();
    attnd_err err;
    int e = -1;
    cr_assert_eq(statedir_write(sd, "beef", "a", ".x.json", "first, and longer", 17, &e, &err), ATTND_OK, "%s",
                 err.msg);
    cr_assert_eq(e, 0);
    cr_assert_eq(statedir_write(sd, "beef", "a", ".x.json", "second", 6, NULL, &err), ATTND_OK, "%s", err.msg);
    char *t = read_entry(sd, "beef", "a");
    cr_assert_str_eq(t, "second");
    free(t);
    cr_assert(statedir_exists(sd, "beef", "a", ".x.json"));
    cr_assert_not(statedir_exists(sd, NULL, "a", ".x.json"), "no owner is another name");
    cr_assert_eq(count_named(".tmp."), 0);
    statedir_close(sd);
}

Test(statedir, a_staged_write_is_committed_or_discarded_without_a_trace) {
    statedir *sd = open_dir();
    attnd_err err;
    cr_assert_eq(statedir_write(sd, NULL, "s", ".x.json", "old", 3, NULL, &err), ATTND_OK, "%s", err.msg);
    statedir_staged *st1, *st2;
    cr_assert_eq(statedir_stage(sd, NULL, "s", ".x.json", "newer", 5, &st1, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(statedir_stage(sd, NULL, "s", ".x.json", "older", 5, &st2, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(count_named(".tmp."), 2, "two staged files, both next to the target");
    char *t = read_entry(sd, NULL, "s");
    cr_assert_str_eq(t, "old", "staging does not touch the file");
    free(t);
    cr_assert_eq(statedir_commit(sd, st1, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(statedir_discard(sd, st2, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(statedir_sync(sd, NULL, &err), ATTND_OK, "%s", err.msg);
    t = read_entry(sd, NULL, "s");
    cr_assert_str_eq(t, "newer");
    free(t);
    cr_assert_eq(count_named(".tmp."), 0);
    statedir_close(sd);
}

Test(statedir, remove_accepts_a_missing_entry_and_reports_errno) {
    statedir *sd = open_dir();
    attnd_err err;
    int e = -1;
    cr_assert_eq(statedir_write(sd, NULL, "gone", ".x.json", "x", 1, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(statedir_remove(sd, NULL, "gone", ".x.json", &e, &err), ATTND_OK, "%s", err.msg);
    cr_assert_not(exists("gone.x.json"));
    cr_assert_eq(statedir_remove(sd, NULL, "gone", ".x.json", &e, &err), ATTND_OK, "already gone is fine");
    cr_assert_eq(e, 0);
    char p[256];
    snprintf(p, sizeof(p), "%s/busy.x.json", dir);
    cr_assert_eq(mkdir(p, 0700), 0); /* an entry unlink(2) refuses whoever runs the test */
    cr_assert_eq(statedir_remove(sd, NULL, "busy", ".x.json", &e, &err), ATTND_ERR_IO);
    cr_assert_eq(e, EISDIR, "errno %d", e);
    cr_assert_not_null(strstr(err.msg, "busy.x.json"), "%s", err.msg);
    statedir_close(sd);
}

Test(statedir, failed_writes_and_reads_carry_errno_and_keep_the_old_file) {
    statedir *sd = open_dir();
    attnd_err err;
    int e = -1;
    char p[256];
    snprintf(p, sizeof(p), "%s/d.x.json", dir);
    cr_assert_eq(mkdir(p, 0700), 0);
    put_file("d.x.json/keep", "k"); /* rename(2) cannot replace a non-empty directory */
    cr_assert_eq(statedir_write(sd, NULL, "d", ".x.json", "text", 4, &e, &err), ATTND_ERR_IO);
    cr_assert(e == EISDIR || e == ENOTEMPTY || e == EEXIST, "errno %d (%s)", e, err.msg);
    cr_assert(exists("d.x.json/keep"), "the old entry is intact");
    cr_assert_eq(count_named(".tmp."), 0, "no temporary file is left");

    cr_assert_eq(statedir_write(sd, NULL, "big", ".x.json", "0123456789", 10, NULL, &err), ATTND_OK, "%s", err.msg);
    char *text = (char *)1;
    size_t len = 1;
    cr_assert_eq(statedir_read(sd, NULL, "big", ".x.json", 9, &text, &len, &e, &err), ATTND_ERR_IO);
    cr_assert_eq(e, EFBIG, "a file over the caller's limit: errno %d", e);
    cr_assert_null(text);
    cr_assert_eq(statedir_read(sd, NULL, "absent", ".x.json", 9, &text, &len, &e, &err), ATTND_ERR_IO);
    cr_assert_eq(e, ENOENT, "errno %d", e);
    statedir_close(sd);
}

// ---- injected faults (the test hook of statedir.h) ---------------------------------------------

/* Every step of a write failing with each errno: the call fails with that errno, the old
 * contents stay, no temporary file is left, and the health counters see it; with the fault
 * gone the next write works and clears "degraded". */
Test(statedir, an_injected_fault_at_any_step_fails_the_write_and_leaves_the_old_file) {
    statedir *sd = open_dir();
    attnd_err err;
    int e = 0;
    cr_assert_eq(statedir_write(sd, "", "f", ".x.json", "old", 3, &e, &err), ATTND_OK, "%s", err.msg);
    char fault[128];
    snprintf(fault, sizeof(fault), "%s/../attnd-fault-%d", dir, (int)getpid());
    setenv("ATTND_FAULT_FILE", fault, 1);
    static const char *steps[] = {"open", "write", "fsync", "rename", "dirsync"};
    static const struct { const char *name; int e; } errs[] = {{"ENOSPC", ENOSPC}, {"EROFS", EROFS}, {"EIO", EIO}};
    for (size_t i = 0; i < 5; i++)
        for (size_t k = 0; k < 3; k++) {
            FILE *f = fopen(fault, "w");
            fprintf(f, "%s %s\n", steps[i], errs[k].name);
            fclose(f);
            statedir_stats before, after;
            statedir_health(&before);
            attnd_status rc = statedir_write(sd, "", "f", ".x.json", "new", 3, &e, &err);
            statedir_health(&after);
            cr_assert_eq(rc, ATTND_ERR_IO, "%s %s", steps[i], errs[k].name);
            cr_assert_eq(e, errs[k].e, "%s: errno %d", steps[i], e);
            cr_assert(after.degraded && after.failures == before.failures + 1);
            cr_assert_eq(count_named(".tmp."), 0, "%s: no temporary file left", steps[i]);
            char *text = read_entry(sd, "", "f");
            /* a failed directory sync comes after the rename: the new file is in place, unsynced */
            cr_assert_str_eq(text, i == 4 ? "new" : "old", "%s %s", steps[i], errs[k].name);
            free(text);
            if (i == 4) cr_assert_eq(statedir_write(sd, "", "f", ".x.json", "old", 3, NULL, &err), ATTND_ERR_IO);
            if (i == 4) { /* put "old" back without the fault */
                unlink(fault);
                cr_assert_eq(statedir_write(sd, "", "f", ".x.json", "old", 3, NULL, &err), ATTND_OK);
            }
        }
    FILE *f = fopen(fault, "w");
    fprintf(f, "unlink EROFS\n");
    fclose(f);
    cr_assert_eq(statedir_remove(sd, "", "f", ".x.json", &e, &err), ATTND_ERR_IO);
    cr_assert_eq(e, EROFS);
    cr_assert(exists("f.x.json"), "a removal that failed leaves the file");
    unlink(fault);
    cr_assert_eq(statedir_remove(sd, "", "f", ".x.json", &e, &err), ATTND_OK, "%s", err.msg);
    cr_assert_not(exists("f.x.json"));
    statedir_stats h;
    statedir_health(&h);
    cr_assert_not(h.degraded, "a durable change clears degraded");
    unsetenv("ATTND_FAULT_FILE");
    statedir_close(sd);
}

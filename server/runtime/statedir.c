/*
 * statedir.c — the state directory's files (see statedir.h for the naming and the contract).
 */
#include "statedir.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "slog.h"

struct statedir {
    char *dir;
};

struct statedir_staged {
    char *path, *tmp;
};

// ---- health and injected faults ------------------------------------------------------------

static atomic_ulong n_failures; /* writes and removals that failed, since start */
static atomic_bool failing;     /* the last write or removal failed */

void statedir_health(statedir_stats *out) {
    out->failures = atomic_load(&n_failures);
    out->degraded = atomic_load(&failing);
}

/* The errno the test hook injects at step of the file path, 0 = none: $ATTND_FAULT_FILE names a
 * file whose lines are "<step> <errno name> [<part of a file name>]" (steps open, write, fsync,
 * rename, dirsync, unlink; "*" = every one; with a third word only files whose path holds it
 * fail, and dirsync matches the file whose rename or removal it makes durable). Read at each step, so a test turns a fault on
 * and off while the server runs. */
static int injected(const char *step, const char *path) {
    static const struct { const char *name; int e; } names[] = {
        {"ENOSPC", ENOSPC}, {"EROFS", EROFS}, {"EIO", EIO}, {"EDQUOT", EDQUOT}, {"EACCES", EACCES}};
    const char *fpath = getenv("ATTND_FAULT_FILE");
    FILE *f = fpath && *fpath ? fopen(fpath, "r") : NULL;
    if (!f) return 0;
    char line[256], s[32], e[32], part[160];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) {
        int n = sscanf(line, "%31s %31s %159s", s, e, part);
        if (n < 2 || (strcmp(s, step) && strcmp(s, "*")) || (n == 3 && (!path || !strstr(path, part)))) continue;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (!strcmp(e, names[i].name)) found = names[i].e;
    }
    fclose(f);
    return found;
}

/* The file this thread last renamed or removed: a dirsync fault with a name part matches it,
 * since the sync makes that change durable (the test hook's only state; per thread). */
static _Thread_local char last_change[512];

static void note_change(const char *path) { snprintf(last_change, sizeof(last_change), "%s", path); }

/* True, with errno set, when the test hook fails this step of path. */
static bool fault(const char *step, const char *path) {
    int e = injected(step, path);
    if (e) errno = e;
    return e != 0;
}

/* Fails with the errno of the system call that just failed: message "<what> <name>: <strerror>". */
static attnd_status io_fail(int *sys_errno, attnd_err *err, const char *what, const char *name) {
    int e = errno;
    if (sys_errno) *sys_errno = e;
    atomic_fetch_add(&n_failures, 1);
    atomic_store(&failing, true);
    return attnd_fail(err, ATTND_ERR_IO, "%s %s: %s", what, name, strerror(e));
}

static attnd_status nomem(int *sys_errno, attnd_err *err) {
    if (sys_errno) *sys_errno = 0;
    return attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
}

static attnd_status ok(int *sys_errno) {
    if (sys_errno) *sys_errno = 0;
    return ATTND_OK;
}

// ---- names --------------------------------------------------------------------------------

bool statedir_id_valid(const char *id) {
    if (!id || !*id || *id == '.') return false;
    size_t n = 0;
    for (const char *p = id; *p; p++, n++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return false;
    }
    /* "<entry><suffix>.tmp." marks an interrupted write's file (statedir_scan removes those): an
     * id holding ".tmp." could name an entry that looks like one */
    return n <= STATEDIR_ID_MAX && !strstr(id, ".tmp.");
}

bool statedir_owner_valid(const char *owner) {
    if (!owner) return true;
    size_t n = strlen(owner);
    for (size_t i = 0; i < n; i++)
        if (!((owner[i] >= '0' && owner[i] <= '9') || (owner[i] >= 'a' && owner[i] <= 'f'))) return false;
    return n <= STATEDIR_OWNER_MAX;
}

static char *path_in(const char *dir, const char *owner, const char *id, const char *suffix) {
    owner = owner ? owner : "";
    size_t n = strlen(dir) + strlen(owner) + strlen(id) + strlen(suffix) + 3;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s%s%s%s", dir, owner, *owner ? "~" : "", id, suffix);
    return p;
}

char *statedir_path(const statedir *sd, const char *owner, const char *id, const char *suffix) {
    return path_in(sd->dir, owner, id, suffix);
}

bool statedir_exists_in(const char *dir, const char *owner, const char *id, const char *suffix) {
    if (!statedir_id_valid(id) || !statedir_owner_valid(owner)) return false;
    char *path = path_in(dir, owner, id, suffix);
    struct stat sb;
    bool yes = path && lstat(path, &sb) == 0;
    free(path);
    return yes;
}

/* Splits fname = [<owner>~]<id><suffix> into owner ("" when none) and id; false for any other name. */
static bool parse_name(const char *fname, const char *suffix, char owner[STATEDIR_OWNER_MAX + 1],
                       char id[STATEDIR_ID_MAX + 1]) {
    size_t fl = strlen(fname), sl = strlen(suffix);
    if (fl <= sl || strcmp(fname + fl - sl, suffix) != 0) return false;
    const char *stem_end = fname + fl - sl, *tilde = memchr(fname, '~', fl - sl), *idp = tilde ? tilde + 1 : fname;
    owner[0] = '\0';
    if (tilde) {
        size_t ol = (size_t)(tilde - fname);
        if (ol == 0 || ol > STATEDIR_OWNER_MAX) return false;
        memcpy(owner, fname, ol);
        owner[ol] = '\0';
        if (!statedir_owner_valid(owner)) return false;
    }
    size_t il = (size_t)(stem_end - idp);
    if (il > STATEDIR_ID_MAX) return false;
    memcpy(id, idp, il);
    id[il] = '\0';
    return statedir_id_valid(id);
}

// ---- the directory ------------------------------------------------------------------------

/* Creates and removes a file in dir. */
static attnd_status check_writable(const char *dir, int *sys_errno, attnd_err *err) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/.attnd-write-test-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        int e = errno;
        if (sys_errno) *sys_errno = e;
        return attnd_fail(err, ATTND_ERR_IO, "state directory %s is not writable: %s", dir, strerror(e));
    }
    close(fd);
    unlink(path);
    return ok(sys_errno);
}

attnd_status statedir_open(statedir **out, const char *dir, int *sys_errno, attnd_err *err) {
    *out = NULL;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return io_fail(sys_errno, err, "cannot create state directory", dir);
    attnd_status rc = check_writable(dir, sys_errno, err);
    if (rc != ATTND_OK) return rc;
    statedir *sd = calloc(1, sizeof(*sd));
    if (!sd || !(sd->dir = strdup(dir))) {
        free(sd);
        return nomem(sys_errno, err);
    }
    *out = sd;
    return ok(sys_errno);
}

void statedir_close(statedir *sd) {
    if (!sd) return;
    free(sd->dir);
    free(sd);
}

const char *statedir_dir(const statedir *sd) { return sd->dir; }

/* name is <entry><suffix>.tmp.<...>: a temporary file a crash left behind mid-write, never
 * renamed, so never acknowledged. */
static bool remove_if_stale_tmp(const statedir *sd, const char *name, const char *suffix) {
    char pattern[64];
    snprintf(pattern, sizeof(pattern), "%s.tmp.", suffix);
    if (!strstr(name, pattern)) return false;
    char *p = statedir_path(sd, "", name, "");
    if (p && unlink(p) == 0) slog_info("removed %s, left by an interrupted write", p);
    free(p);
    return true;
}

attnd_status statedir_scan(statedir *sd, const char *suffix,
                           void (*each)(void *user, const char *owner, const char *id), void *user, int *sys_errno,
                           attnd_err *err) {
    DIR *d = opendir(sd->dir);
    if (!d) return io_fail(sys_errno, err, "cannot read state directory", sd->dir);
    struct dirent *e;
    char owner[STATEDIR_OWNER_MAX + 1], id[STATEDIR_ID_MAX + 1];
    while ((e = readdir(d))) {
        if (!remove_if_stale_tmp(sd, e->d_name, suffix) && parse_name(e->d_name, suffix, owner, id))
            each(user, owner, id);
    }
    closedir(d);
    return ok(sys_errno);
}

attnd_status statedir_load(statedir **out, const char *dir, const char *suffix,
                           void (*each)(void *user, const char *owner, const char *id), void *user, attnd_err *err) {
    *out = NULL;
    if (!dir || !*dir) return ATTND_OK;
    attnd_status rc = statedir_open(out, dir, NULL, err);
    if (rc == ATTND_OK && (rc = statedir_scan(*out, suffix, each, user, NULL, err)) != ATTND_OK) {
        statedir_close(*out);
        *out = NULL;
    }
    return rc;
}

// ---- files --------------------------------------------------------------------------------

bool statedir_exists(const statedir *sd, const char *owner, const char *id, const char *suffix) {
    char *path = statedir_path(sd, owner, id, suffix);
    struct stat sb;
    bool yes = !path || lstat(path, &sb) == 0;
    free(path);
    return yes;
}

/* Reads all of fd (at most max_len bytes) into a new NUL-terminated buffer. */
static attnd_status read_all(int fd, const char *path, size_t max_len, char **text, size_t *len, int *sys_errno,
                             attnd_err *err) {
    size_t cap = 0, n = 0;
    char *buf = NULL;
    for (;;) {
        if (n + 1 >= cap && !attnd_grow(&buf, &cap, n + 4097, 1, 4097)) { /* room to read, and the NUL */
            free(buf);
            return nomem(sys_errno, err);
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            free(buf);
            return io_fail(sys_errno, err, "cannot read", path);
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n > max_len) {
            free(buf);
            errno = EFBIG;
            return io_fail(sys_errno, err, "cannot read", path);
        }
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return ok(sys_errno);
}

attnd_status statedir_read(const statedir *sd, const char *owner, const char *id, const char *suffix, size_t max_len,
                           char **text, size_t *len, int *sys_errno, attnd_err *err) {
    *text = NULL;
    *len = 0;
    char *path = statedir_path(sd, owner, id, suffix);
    if (!path) return nomem(sys_errno, err);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    attnd_status rc =
        fd < 0 ? io_fail(sys_errno, err, "cannot open", path) : read_all(fd, path, max_len, text, len, sys_errno, err);
    if (fd >= 0) close(fd);
    free(path);
    return rc;
}

/* Writes len bytes of text to a new temporary file next to path and fsyncs it. */
static attnd_status write_tmp(const char *path, const char *text, size_t len, char **tmp_out, int *sys_errno,
                              attnd_err *err) {
    *tmp_out = NULL;
    size_t n = strlen(path) + 48;
    char *tmp = malloc(n);
    if (!tmp) return nomem(sys_errno, err);
    static unsigned long counter;
    snprintf(tmp, n, "%s.tmp.%ld.%lu", path, (long)getpid(), __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    int fd = fault("open", tmp) ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        attnd_status rc = io_fail(sys_errno, err, "cannot write", tmp);
        free(tmp);
        return rc;
    }
    size_t off = 0;
    int e = 0;
    while (off < len && !e) {
        ssize_t w = fault("write", tmp) ? -1 : write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) e = errno;
        else if (w == 0) e = EIO; /* a regular file that takes nothing: no errno of its own */
        else off += (size_t)w;
    }
    if (!e && (fault("fsync", tmp) || fsync(fd) != 0)) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (e) {
        errno = e;
        attnd_status rc = io_fail(sys_errno, err, "cannot write", tmp);
        unlink(tmp);
        free(tmp);
        return rc;
    }
    *tmp_out = tmp;
    return ok(sys_errno);
}

attnd_status statedir_stage(statedir *sd, const char *owner, const char *id, const char *suffix, const char *text,
                            size_t len, statedir_staged **staged, int *sys_errno, attnd_err *err) {
    *staged = NULL;
    statedir_staged *s = calloc(1, sizeof(*s));
    if (!s || !(s->path = statedir_path(sd, owner, id, suffix))) {
        free(s);
        return nomem(sys_errno, err);
    }
    attnd_status rc = write_tmp(s->path, text, len, &s->tmp, sys_errno, err);
    if (rc != ATTND_OK) {
        free(s->path);
        free(s);
        return rc;
    }
    *staged = s;
    return ATTND_OK;
}

static void staged_free(statedir_staged *s) {
    free(s->path);
    free(s->tmp);
    free(s);
}

attnd_status statedir_commit(statedir *sd, statedir_staged *staged, int *sys_errno, attnd_err *err) {
    (void)sd;
    attnd_status rc = ok(sys_errno);
    note_change(staged->path);
    if (fault("rename", staged->path) || rename(staged->tmp, staged->path) != 0) {
        rc = io_fail(sys_errno, err, "cannot write", staged->path);
        unlink(staged->tmp);
    }
    staged_free(staged);
    return rc;
}

attnd_status statedir_discard(statedir *sd, statedir_staged *staged, int *sys_errno, attnd_err *err) {
    (void)sd;
    attnd_status rc = ok(sys_errno);
    if (unlink(staged->tmp) != 0 && errno != ENOENT) rc = io_fail(sys_errno, err, "cannot remove", staged->tmp);
    staged_free(staged);
    return rc;
}

attnd_status statedir_sync(statedir *sd, int *sys_errno, attnd_err *err) {
    int fd = open(sd->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    attnd_status rc = ok(sys_errno);
    if (fd < 0 || fault("dirsync", last_change[0] ? last_change : sd->dir) || fsync(fd) != 0) rc = io_fail(sys_errno, err, "cannot sync directory", sd->dir);
    else atomic_store(&failing, false); /* a change made durable: the store works again */
    if (fd >= 0) close(fd);
    return rc;
}

attnd_status statedir_write(statedir *sd, const char *owner, const char *id, const char *suffix, const char *text,
                            size_t len, int *sys_errno, attnd_err *err) {
    statedir_staged *s;
    attnd_status rc = statedir_stage(sd, owner, id, suffix, text, len, &s, sys_errno, err);
    if (rc == ATTND_OK) rc = statedir_commit(sd, s, sys_errno, err);
    if (rc == ATTND_OK) rc = statedir_sync(sd, sys_errno, err);
    return rc;
}

attnd_status statedir_remove(statedir *sd, const char *owner, const char *id, const char *suffix, int *sys_errno,
                             attnd_err *err) {
    char *path = statedir_path(sd, owner, id, suffix);
    if (!path) return nomem(sys_errno, err);
    attnd_status rc = ok(sys_errno);
    note_change(path);
    if ((fault("unlink", path) || unlink(path) != 0) && errno != ENOENT) rc = io_fail(sys_errno, err, "cannot remove", path);
    free(path);
    /* the removal survives a crash only once the directory is synced */
    if (rc == ATTND_OK) rc = statedir_sync(sd, sys_errno, err);
    return rc;
}

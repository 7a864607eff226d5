/*
 * statedir.h — the state directory's file layer, under the session store (sess.c) and the
 * response store (rstore.c): naming, validation, scanning, durable writes and removal. It knows
 * nothing of what the files hold.
 *
 * Names: an entry is <id><suffix>, or <owner>~<id><suffix> when it belongs to one API key among
 * several. An id is 1..64 characters of [A-Za-z0-9._-] not starting with '.', an owner tag 1..16
 * lower-case hex digits, so '~' and '/' never occur in either and no name escapes the directory.
 *
 * Durability: a write goes to a unique temporary file next to its target (<target>.tmp.<pid>.<n>),
 * which is fsynced, renamed over the target, and then the directory is fsynced: once
 * statedir_write returns OK the new contents survive a crash, and a reader never sees a half
 * written file. A crash mid-write leaves only a temporary file, which statedir_scan removes.
 *
 * Failures: every operation that changes the directory returns a status the caller must check
 * (the compiler enforces it), ATTND_ERR_IO with a message naming the file, or ATTND_ERR_NOMEM.
 * When sys_errno is not NULL it receives the errno of the system call that failed (ENOSPC,
 * EROFS, EDQUOT...), 0 on success and 0 for failures that are not a system call's (out of
 * memory): the caller can tell a full disk from a broken one without parsing the message.
 *
 * Thread-safety: a statedir holds no mutable state after statedir_open; any thread may call any
 * function. Ordering two writers of the same file is the caller's job (see statedir_stage).
 */
#ifndef ATTND_SERVER_STATEDIR_H
#define ATTND_SERVER_STATEDIR_H

#include <stdbool.h>
#include <stddef.h>

#include "attnd/common.h"

#define STATEDIR_ID_MAX 64
#define STATEDIR_OWNER_MAX 16 /* hex digits of an owner tag */

#define STATEDIR_MUST_CHECK __attribute__((warn_unused_result))

typedef struct statedir statedir;
/* A written, fsynced temporary file not yet renamed over its target (statedir_stage). */
typedef struct statedir_staged statedir_staged;

/* True for 1..64 characters of [A-Za-z0-9._-], not starting with '.' and without ".tmp." (the
 * mark of a temporary file). */
bool statedir_id_valid(const char *id);
/* True for NULL or 0..16 lower-case hex digits ("" and NULL = no owner). */
bool statedir_owner_valid(const char *owner);

/* Opens dir: creates it (0700) when missing and checks that a file can be created in it, so an
 * unwritable directory is refused at start-up rather than failing every later save. */
STATEDIR_MUST_CHECK attnd_status statedir_open(statedir **out, const char *dir, int *sys_errno, attnd_err *err);
void statedir_close(statedir *sd); /* accepts NULL */
const char *statedir_dir(const statedir *sd);

/* Calls each(user, owner, id) for every entry named [<owner>~]<id><suffix> with a valid owner
 * ("" when none) and id, in directory order; other names are ignored. The temporary files of
 * interrupted writes of such entries are removed (and logged) instead. */
STATEDIR_MUST_CHECK attnd_status statedir_scan(statedir *sd, const char *suffix,
                                               void (*each)(void *user, const char *owner, const char *id), void *user,
                                               int *sys_errno, attnd_err *err);

/* A store's start: dir NULL or "" = no directory (*out NULL, OK); else statedir_open, then
 * statedir_scan(suffix, each, user). On failure *out is NULL. */
STATEDIR_MUST_CHECK attnd_status statedir_load(statedir **out, const char *dir, const char *suffix,
                                               void (*each)(void *user, const char *owner, const char *id), void *user,
                                               attnd_err *err);

/* <dir>/[<owner>~]<id><suffix> (new string, caller frees; NULL when out of memory). owner NULL
 * or "" = none. */
char *statedir_path(const statedir *sd, const char *owner, const char *id, const char *suffix);
/* True when the entry exists (as anything, a dangling link included), and when out of memory:
 * a caller that must never overwrite a file it did not write refuses rather than risk it. */
bool statedir_exists(const statedir *sd, const char *owner, const char *id, const char *suffix);
/* Whether dir, a state directory not opened here (another store's), holds the entry: false for
 * an invalid id or owner, and when out of memory (a question, not a guard). */
bool statedir_exists_in(const char *dir, const char *owner, const char *id, const char *suffix);
/* The whole entry (new buffer with a NUL after the len bytes, caller frees). At most max_len
 * bytes: a longer file is ATTND_ERR_IO with sys_errno EFBIG. */
attnd_status statedir_read(const statedir *sd, const char *owner, const char *id, const char *suffix, size_t max_len,
                           char **text, size_t *len, int *sys_errno, attnd_err *err);

/* Replaces the entry with len bytes of text, durably (temporary file, fsync, rename, directory
 * fsync). On failure the old contents are intact and no temporary file is left. */
STATEDIR_MUST_CHECK attnd_status statedir_write(statedir *sd, const char *owner, const char *id, const char *suffix,
                                                const char *text, size_t len, int *sys_errno, attnd_err *err);
/* Removes the entry durably (unlink, then the directory fsynced); one already gone is OK. */
STATEDIR_MUST_CHECK attnd_status statedir_remove(statedir *sd, const char *owner, const char *id, const char *suffix,
                                                 int *sys_errno, attnd_err *err);

/*
 * statedir_write in steps, for a caller that must decide under its own lock whether a snapshot
 * taken earlier may still replace the file (an older snapshot must never be renamed over a newer
 * one): statedir_stage writes and fsyncs the temporary file (slow, outside the lock);
 * statedir_commit renames it over the target (under the lock) or statedir_discard drops it;
 * statedir_sync then makes the rename durable. commit and discard free *staged whatever happens
 * and leave no temporary file.
 */
STATEDIR_MUST_CHECK attnd_status statedir_stage(statedir *sd, const char *owner, const char *id, const char *suffix,
                                                const char *text, size_t len, statedir_staged **staged, int *sys_errno,
                                                attnd_err *err);
STATEDIR_MUST_CHECK attnd_status statedir_commit(statedir *sd, statedir_staged *staged, int *sys_errno, attnd_err *err);
STATEDIR_MUST_CHECK attnd_status statedir_discard(statedir *sd, statedir_staged *staged, int *sys_errno,
                                                  attnd_err *err);
/* fsyncs the directory: renames and removals done before it survive a crash. */
STATEDIR_MUST_CHECK attnd_status statedir_sync(statedir *sd, int *sys_errno, attnd_err *err);

/* The state directory's health, process-wide (every statedir): writes and removals that failed
 * since start, and whether the last one failed (cleared by the next one made durable). */
typedef struct statedir_stats {
    unsigned long failures;
    bool degraded;
} statedir_stats;
void statedir_health(statedir_stats *out);

/*
 * Test hook: when $ATTND_FAULT_FILE names a readable file, each line "<step> <ERRNO> [<name
 * part>]" fails that step of every write or removal with that errno, as if the system call had:
 * steps open, write, fsync, rename (the commit), dirsync, unlink, or "*"; errnos ENOSPC, EROFS,
 * EIO, EDQUOT, EACCES. With a name part (".response.json") only the files whose path holds it
 * fail; a dirsync matches the file whose rename or removal it syncs. The file is read at each
 * step (delete it and the faults stop). Unset in production.
 */

#endif

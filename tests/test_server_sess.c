/*
 * test_server_sess.c — the session store (server/runtime/sess.c): ids, busy/409 semantics, prefix
 * reuse of anonymous entries, LRU eviction of KV handles, and the on-disk format surviving a
 * "restart" (a second store over the same directory). KV handles are opaque here: fake
 * non-NULL pointers stand in for the scheduler's kv_seqs, since the store never dereferences them.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sess.h"
#include "sess_json.h"

static char dir[64];

static void make_dir(void) {
    snprintf(dir, sizeof(dir), "/tmp/attnd-sess-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

TestSuite(sess, .init = make_dir, .fini = remove_dir);

static struct kv_seq *fake_kv(int i) { return (struct kv_seq *)(uintptr_t)(0x1000 + i * 16); }
static void forget_kv(struct kv_seq *kv) { (void)kv; }

/* A store of up to max sessions for model, persisted in state_dir (NULL: in memory), holding the
 * named sessions given after max (NULL-terminated). */
static sess_store *new_store(const char *state_dir, const char *model, int max, ...) {
    sess_store *st;
    attnd_err err = {{0}};
    cr_assert_eq(sess_store_create(&st, state_dir, model, max, &err), ATTND_OK, "%s", err.msg);
    char id[SESS_ID_MAX + 1];
    va_list ap;
    va_start(ap, max);
    for (const char *name; (name = va_arg(ap, const char *));)
        cr_assert_eq(sess_create(st, NULL, name, id, &err), ATTND_OK, "%s", err.msg);
    va_end(ap);
    return st;
}

/* A turn of session `name`: acquired, given fake KV i (when i > 0) holding 1 position, and
 * released with the history t (n). Returns the session (idle again). */
static sess *take_turn(sess_store *st, const char *name, int i, const int32_t *t, int n) {
    sess *s;
    cr_assert_eq(sess_acquire(st, NULL, name, &s, NULL), ATTND_OK, "acquire %s", name);
    if (i > 0) sess_set_kv(st, s, fake_kv(i), 1, 10);
    cr_assert_eq(sess_release(st, s, t, n, NULL), ATTND_OK, "release %s", name);
    return s;
}

Test(sess, ids_are_validated) {
    cr_assert(sess_id_valid("a"));
    cr_assert(sess_id_valid("123e4567-e89b-12d3-a456-426614174000"));
    cr_assert_not(sess_id_valid(""));
    cr_assert_not(sess_id_valid(".hidden"));
    cr_assert_not(sess_id_valid("../etc"));
    cr_assert_not(sess_id_valid("a/b"));
    char long_id[80];
    memset(long_id, 'x', 65);
    long_id[65] = '\0';
    cr_assert_not(sess_id_valid(long_id));
}

Test(sess, create_generates_or_takes_ids_and_refuses_duplicates) {
    sess_store *st = new_store(NULL, "m", 10, NULL);
    char id[SESS_ID_MAX + 1], id2[SESS_ID_MAX + 1];
    cr_assert_eq(sess_create(st, NULL, NULL, id, NULL), ATTND_OK);
    cr_assert(sess_id_valid(id));
    cr_assert_eq(sess_create(st, NULL, "mine", id2, NULL), ATTND_OK);
    cr_assert_str_eq(id2, "mine");
    attnd_err err;
    cr_assert_eq(sess_create(st, NULL, "mine", id2, &err), ATTND_ERR_BUSY);
    cr_assert(strstr(err.msg, "mine"));
    cr_assert_eq(sess_create(st, NULL, "bad/id", id2, &err), ATTND_ERR_INVALID);
    cr_assert_eq(sess_count(st), 2);
    sess_store_destroy(st);
}

Test(sess, max_sessions_is_enforced) {
    sess_store *st = new_store(NULL, "m", 2, "a", "b", NULL);
    char id[SESS_ID_MAX + 1];
    cr_assert_eq(sess_create(st, NULL, "c", id, NULL), ATTND_ERR_NOMEM);
    sess_store_destroy(st);
}

Test(sess, a_busy_session_cannot_be_acquired_or_deleted) {
    sess_store *st = new_store(NULL, "m", 10, "s", NULL);
    sess *s, *s2;
    cr_assert_eq(sess_acquire(st, NULL, "s", &s, NULL), ATTND_OK);
    cr_assert_eq(sess_acquire(st, NULL, "s", &s2, NULL), ATTND_ERR_BUSY);
    struct kv_seq *kv;
    cr_assert_eq(sess_delete(st, NULL, "s", &kv, NULL, NULL), ATTND_ERR_BUSY);
    int32_t hist[] = {1, 2, 3};
    cr_assert_eq(sess_release(st, s, hist, 3, NULL), ATTND_OK);
    cr_assert_eq(sess_acquire(st, NULL, "s", &s2, NULL), ATTND_OK);
    cr_assert_eq(s2->n_tokens, 3);
    sess_abandon(st, s2);
    cr_assert_eq(sess_delete(st, NULL, "s", &kv, NULL, NULL), ATTND_OK);
    cr_assert_eq(sess_acquire(st, NULL, "s", &s2, NULL), ATTND_ERR_NOT_FOUND);
    sess_store_destroy(st);
}

Test(sess, anonymous_entries_are_picked_by_longest_common_prefix) {
    sess_store *st = new_store(NULL, "m", 10, NULL);
    int32_t a[] = {1, 10, 11, 12}, b[] = {1, 20, 21, 22};
    sess *ea = sess_acquire_anon(st, NULL, a, 4, 4);
    sess_set_kv(st, ea, fake_kv(1), 3, 100);
    sess_release(st, ea, a, 4, NULL);
    sess *eb = sess_acquire_anon(st, NULL, b, 4, 4);
    cr_assert_neq(ea, eb, "the only idle entry shares just BOS, so a new one is made");
    sess_set_kv(st, eb, fake_kv(2), 3, 100);
    sess_release(st, eb, b, 4, NULL);
    int32_t q[] = {1, 20, 21, 99};
    sess *pick = sess_acquire_anon(st, NULL, q, 4, 4);
    cr_assert_eq(pick, eb);
    cr_assert_eq(sess_common_prefix(pick->tokens, pick->kv_len, q, 4), 3);
    sess_abandon(st, pick);
    json_t *list = sess_list_json(st, NULL);
    cr_assert_not_null(list);
    json_decref(list);
    sess_take_all_kv(st, forget_kv);
    sess_store_destroy(st);
}

Test(sess, eviction_takes_the_least_recently_used_kv_no_slot_uses) {
    sess_store *st = new_store(NULL, "m", 10, "old", "new", "busy", NULL);
    sess *b;
    int32_t t[] = {1, 2};
    sess *o = take_turn(st, "old", 1, t, 2);
    usleep(3000);
    take_turn(st, "new", 2, t, 2);
    sess_acquire(st, NULL, "busy", &b, NULL);
    sess_set_kv(st, b, fake_kv(3), 1, 10);
    cr_assert_eq(sess_evict_lru(st), fake_kv(1));
    cr_assert_null(o->kv);
    cr_assert_eq(o->n_tokens, 2, "the history stays");
    cr_assert_eq(sess_evict_lru(st), fake_kv(2));
    /* busy but still queued: admission does not count its KV, so it must stay evictable */
    cr_assert_eq(sess_evict_lru(st), fake_kv(3), "a queued session's KV goes after the idle ones");
    sess_set_kv(st, b, fake_kv(3), 1, 10);
    sess_set_running(st, b, true);
    cr_assert_null(sess_evict_lru(st), "a running session's KV is never evicted");
    sess_set_kv(st, b, NULL, 0, 0);
    sess_abandon(st, b);
    cr_assert_not(b->running, "abandoning clears running");
    sess_store_destroy(st);
}

Test(sess, histories_survive_a_restart_and_other_models_files_are_ignored) {
    sess_store *st = new_store(dir, "model-A", 10, "conv", NULL);
    char id[SESS_ID_MAX + 1];
    int32_t hist[] = {1, 415, 461, 7};
    sess *s = take_turn(st, "conv", 0, hist, 4);
    attnd_err err;
    cr_assert_eq(sess_persist(st, NULL, "conv", NULL, &err), ATTND_OK, "%s", err.msg);
    sess_store_destroy(st);

    char path[256];
    snprintf(path, sizeof(path), "%s/conv.session.json", dir);
    cr_assert_eq(access(path, R_OK), 0, "one file per session");
    FILE *f = fopen(path, "r");
    char buf[512] = {0};
    cr_assert(fread(buf, 1, sizeof(buf) - 1, f) > 0);
    fclose(f);
    cr_assert(strstr(buf, "\"format\":\"attnd-session\"") && strstr(buf, "\"tokens\":[1,415,461,7]"), "%s", buf);

    st = new_store(dir, "model-A", 10, NULL);
    cr_assert_eq(sess_acquire(st, NULL, "conv", &s, NULL), ATTND_OK);
    cr_assert_eq(s->n_tokens, 4);
    cr_assert_eq(s->tokens[2], 461);
    cr_assert_null(s->kv, "KV is rebuilt on demand, never persisted");
    sess_abandon(st, s);
    sess_store_destroy(st);

    st = new_store(dir, "model-B", 10, NULL);
    cr_assert_eq(sess_count(st), 0);
    /* model A's "conv" is not model B's to take: creating it is refused, the file is untouched */
    cr_expect_eq(sess_create(st, NULL, "conv", id, &err), ATTND_ERR_BUSY);
    cr_expect(strstr(err.msg, "conv"), "%s", err.msg);
    cr_expect_eq(sess_persist_all(st), 0);
    sess_store_destroy(st);
    f = fopen(path, "r");
    char again[512] = {0};
    cr_assert(fread(again, 1, sizeof(again) - 1, f) > 0);
    fclose(f);
    cr_expect_str_eq(again, buf, "another model's session file changed");
}

Test(sess, an_unwritable_state_dir_is_refused_at_start) {
    if (geteuid() == 0) {
        /* root writes anywhere: a regular file in the directory's place is unwritable for all */
        char path[256];
        snprintf(path, sizeof(path), "%s/not-a-dir", dir);
        FILE *f = fopen(path, "w");
        fclose(f);
        sess_store *st = NULL;
        attnd_err err = {{0}};
        cr_expect_eq(sess_store_create(&st, path, "m", 10, &err), ATTND_ERR_IO);
        cr_expect(strstr(err.msg, "not-a-dir"), "%s", err.msg);
        cr_expect_null(st);
        return;
    }
    chmod(dir, 0500);
    sess_store *st = NULL;
    attnd_err err = {{0}};
    cr_expect_eq(sess_store_create(&st, dir, "m", 10, &err), ATTND_ERR_IO);
    cr_expect(strstr(err.msg, "not writable"), "%s", err.msg);
    cr_expect_null(st);
    chmod(dir, 0700);
}

Test(sess, damaged_files_are_skipped_not_fatal) {
    char path[256];
    snprintf(path, sizeof(path), "%s/broken.session.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"format\":\"attnd-session\",\"version\":1,\"model\":\"m\",\"tokens\":[1,-5]}", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/junk.session.json", dir);
    f = fopen(path, "w");
    fputs("not json", f);
    fclose(f);
    sess_store *st = new_store(dir, "m", 10, NULL);
    cr_assert_eq(sess_count(st), 0);
    sess_store_destroy(st);
}

Test(sess, delete_removes_the_file) {
    sess_store *st = new_store(dir, "m", 10, "gone", NULL);
    char path[256];
    cr_assert_eq(sess_persist(st, NULL, "gone", NULL, NULL), ATTND_OK);
    snprintf(path, sizeof(path), "%s/gone.session.json", dir);
    cr_assert_eq(access(path, F_OK), 0);
    struct kv_seq *kv;
    cr_assert_eq(sess_delete(st, NULL, "gone", &kv, NULL, NULL), ATTND_OK);
    cr_assert_neq(access(path, F_OK), 0);
    sess_store_destroy(st);
}

// ---- session lifetime and durability ---------------------------------------------------------

static struct kv_seq *sunk[8];
static int n_sunk;
static void sink(void *user, struct kv_seq *kv) {
    (void)user;
    if (n_sunk < 8) sunk[n_sunk++] = kv;
}

static bool file_exists(const char *id) {
    char p[256];
    snprintf(p, sizeof(p), "%s/%s.session.json", dir, id);
    return access(p, F_OK) == 0;
}

Test(sess, at_max_sessions_the_least_recently_used_idle_session_is_evicted) {
    sess_store *st = new_store(dir, "m", 2, NULL);
    sess_store_set_lifetime(st, 0, true);
    n_sunk = 0;
    sess_store_set_kv_sink(st, sink, NULL);
    char id[SESS_ID_MAX + 1];
    int32_t t[] = {1, 2, 3};
    sess *b;
    cr_assert_eq(sess_create(st, NULL, "a", id, NULL), ATTND_OK);
    cr_assert_eq(sess_create(st, NULL, "b", id, NULL), ATTND_OK);
    take_turn(st, "a", 1, t, 3);
    cr_assert_eq(sess_persist(st, NULL, "a", NULL, NULL), ATTND_OK);
    usleep(3000);
    take_turn(st, "b", 0, t, 3);
    cr_assert(file_exists("a"));
    cr_assert_eq(sess_create(st, NULL, "c", id, NULL), ATTND_OK, "the limit evicts instead of refusing");
    cr_assert_null(sess_info_json(st, NULL, "a"), "'a' was the least recently used");
    cr_assert_not(file_exists("a"), "its file is removed too");
    cr_assert_eq(n_sunk, 1);
    cr_assert_eq(sunk[0], fake_kv(1), "its KV went to the scheduler");
    /* a busy session is never evicted: with both busy, the limit refuses */
    sess *c;
    cr_assert_eq(sess_acquire(st, NULL, "b", &b, NULL), ATTND_OK);
    cr_assert_eq(sess_acquire(st, NULL, "c", &c, NULL), ATTND_OK);
    cr_assert_eq(sess_create(st, NULL, "d", id, NULL), ATTND_ERR_NOMEM);
    sess_abandon(st, b);
    sess_abandon(st, c);
    sess_store_set_lifetime(st, 0, false);
    cr_assert_eq(sess_create(st, NULL, "d", id, NULL), ATTND_ERR_NOMEM, "eviction switched off: refused");
    sess_store_destroy(st);
}

Test(sess, idle_sessions_expire_after_the_ttl) {
    sess_store *st = new_store(dir, "m", 10, NULL);
    char id[SESS_ID_MAX + 1];
    sess *busy;
    cr_assert_eq(sess_create(st, NULL, "old", id, NULL), ATTND_OK);
    cr_assert_eq(sess_create(st, NULL, "busy", id, NULL), ATTND_OK);
    cr_assert_eq(sess_persist(st, NULL, "old", NULL, NULL), ATTND_OK);
    cr_assert_eq(sess_acquire(st, NULL, "busy", &busy, NULL), ATTND_OK);
    cr_assert_eq(sess_expire(st), 0, "no TTL set: nothing expires");
    /* a 10-minute TTL on the clock the test moves: a minute's margin for a loaded machine's real time */
    sess_store_set_lifetime(st, 600000, false);
    attnd_clock_advance_ms(540000);
    cr_assert_eq(sess_expire(st), 0, "9 minutes idle: within the TTL");
    attnd_clock_advance_ms(70000);
    cr_assert_eq(sess_create(st, NULL, "fresh", id, NULL), ATTND_OK); /* "fresh" is made now: 0 ms old */
    cr_assert_eq(sess_expire(st), 1, "only the idle, old session expires");
    cr_assert_null(sess_info_json(st, NULL, "old"));
    cr_assert_not(file_exists("old"));
    json_t *j = sess_info_json(st, NULL, "busy");
    cr_assert_not_null(j, "a busy session never expires");
    json_decref(j);
    cr_assert_not_null(j = sess_info_json(st, NULL, "fresh"));
    json_decref(j);
    sess_abandon(st, busy);
    sess_store_destroy(st);
}

Test(sess, persist_is_durable_and_start_up_removes_interrupted_writes) {
    sess_store *st = new_store(dir, "m", 10, NULL);
    char id[SESS_ID_MAX + 1], p[256];
    sess *s;
    int32_t t1[] = {5, 6}, t2[] = {5, 6, 7, 8};
    cr_assert_eq(sess_create(st, NULL, "x", id, NULL), ATTND_OK);
    cr_assert_eq(sess_acquire(st, NULL, "x", &s, NULL), ATTND_OK);
    sess_release(st, s, t1, 2, NULL);
    cr_assert_eq(sess_persist(st, NULL, "x", NULL, NULL), ATTND_OK);
    cr_assert_eq(sess_acquire(st, NULL, "x", &s, NULL), ATTND_OK);
    sess_release(st, s, t2, 4, NULL);
    cr_assert_eq(sess_persist(st, NULL, "x", NULL, NULL), ATTND_OK);
    cr_assert_eq(sess_persist(st, NULL, "x", NULL, NULL), ATTND_OK, "nothing new: a no-op");
    sess_store_destroy(st);
    snprintf(p, sizeof(p), "%s/x.session.json.tmp.4242.7", dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("{\"partial", f);
    fclose(f);
    st = new_store(dir, "m", 10, NULL);
    cr_assert_neq(access(p, F_OK), 0, "the leftover temporary file is removed");
    json_t *j = sess_info_json(st, NULL, "x");
    cr_assert_eq(json_integer_value(json_object_get(j, "tokens")), 4, "the newest history is the one on disk");
    json_decref(j);
    sess_store_destroy(st);
}

Test(sess, owners_see_only_their_own_sessions_and_prompt_cache) {
    sess_store *st = new_store(dir, "m", 10, NULL);
    const char *a = "00000000000000aa", *b = "00000000000000bb";
    char id[SESS_ID_MAX + 1];
    attnd_err err;
    cr_assert_eq(sess_create(st, a, "chat", id, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(sess_create(st, b, "chat", id, &err), ATTND_OK, "ids are per owner: %s", err.msg);
    sess *s;
    cr_expect_eq(sess_acquire(st, NULL, "chat", &s, &err), ATTND_ERR_NOT_FOUND, "no owner sees neither");
    cr_assert_eq(sess_acquire(st, a, "chat", &s, &err), ATTND_OK);
    int32_t hist[] = {1, 2, 3};
    sess_release(st, s, hist, 3, NULL);
    cr_assert_eq(sess_persist(st, a, "chat", NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(sess_persist(st, b, "chat", NULL, &err), ATTND_OK, "%s", err.msg);
    json_t *la = sess_list_json(st, a), *ln = sess_list_json(st, NULL);
    cr_expect_eq(json_array_size(json_object_get(la, "data")), 1);
    cr_expect_eq(json_array_size(json_object_get(ln, "data")), 0);
    json_decref(la), json_decref(ln);
    cr_expect_null(sess_info_json(st, NULL, "chat"));
    struct kv_seq *kv;
    cr_expect_eq(sess_delete(st, b, "nope", &kv, NULL, &err), ATTND_ERR_NOT_FOUND);

    /* the prompt cache: b never matches a's cached prefix; taking a's entry over empties it */
    int32_t prompt[] = {9, 8, 7, 6};
    sess *an = sess_acquire_anon(st, a, prompt, 4, 1);
    cr_assert_not_null(an);
    sess_set_kv(st, an, fake_kv(1), 4, 64);
    sess_release(st, an, prompt, 4, NULL);
    sess *bn = sess_acquire_anon(st, b, prompt, 4, 1);
    cr_assert_eq(bn, an, "the single entry is reused");
    cr_expect_eq(bn->n_tokens, 0, "but a's history is gone");
    cr_expect_eq(bn->kv_len, 0, "and nothing of a's KV counts as cached");
    cr_expect_str_eq(bn->owner, b);
    sess_abandon(st, bn);
    sess_take_all_kv(st, forget_kv);
    sess_store_destroy(st);

    /* files are per owner and load back to the same owner */
    char path[256];
    snprintf(path, sizeof(path), "%s/%s~chat.session.json", dir, a);
    cr_expect_eq(access(path, R_OK), 0, "%s", path);
    st = new_store(dir, "m", 10, NULL);
    cr_assert_eq(sess_acquire(st, a, "chat", &s, &err), ATTND_OK, "%s", err.msg);
    cr_expect_eq(s->n_tokens, 3);
    sess_abandon(st, s);
    cr_expect_eq(sess_acquire(st, NULL, "chat", &s, &err), ATTND_ERR_NOT_FOUND);
    sess_store_destroy(st);
}

Test(sess, one_key_never_evicts_another_keys_sessions) {
    sess_store *st = new_store(dir, "m", 6, NULL);
    sess_store_set_lifetime(st, 0, true);
    sess_store_set_quota(st, 3);
    char id[SESS_ID_MAX + 1], name[16];
    attnd_err err;
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "a%d", i);
        cr_assert_eq(sess_create(st, "aa", name, id, &err), ATTND_OK, "%s", err.msg);
        usleep(2000);
    }
    /* key bb makes 6: from its 4th on, each evicts bb's own oldest */
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof(name), "b%d", i);
        cr_assert_eq(sess_create(st, "bb", name, id, &err), ATTND_OK, "%s", err.msg);
        usleep(2000);
    }
    sess_info *v;
    int n = sess_list_info(st, "aa", &v);
    cr_assert_eq(n, 3, "all of aa's sessions stay (%d)", n);
    free(v);
    n = sess_list_info(st, "bb", &v);
    cr_assert_eq(n, 3, "bb keeps its quota");
    for (int i = 0; i < n; i++) cr_assert(strcmp(v[i].id, "b0") && strcmp(v[i].id, "b1") && strcmp(v[i].id, "b2"),
                                          "bb's oldest went: %s stayed", v[i].id);
    free(v);
    /* bb's sessions all busy: nothing of its own to evict, and aa's are not touched */
    sess *b[3];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof(name), "b%d", i + 3);
        cr_assert_eq(sess_acquire(st, "bb", name, &b[i], NULL), ATTND_OK);
    }
    cr_assert_eq(sess_quota_check(st, "bb", &err), ATTND_ERR_NOMEM, "the check a fork calls says so too");
    cr_assert_eq(sess_create(st, "bb", "b9", id, &err), ATTND_ERR_NOMEM);
    cr_assert(strstr(err.msg, "max_sessions_per_key"), "the 429 names the quota: %s", err.msg);
    cr_assert_eq(sess_quota_check(st, "aa", &err), ATTND_OK, "aa may still make one (its own oldest goes)");
    cr_assert_eq(sess_count(st), 6);
    for (int i = 0; i < 3; i++) sess_abandon(st, b[i]);
    /* no per-key quota: the whole store full still takes only the creator's own */
    sess_store_set_quota(st, 0);
    cr_assert_eq(sess_create(st, "bb", "b10", id, &err), ATTND_OK, "%s", err.msg);
    n = sess_list_info(st, "aa", &v);
    cr_assert_eq(n, 3, "max_sessions reached: bb evicted its own, not aa's");
    free(v);
    cr_assert_eq(sess_create(st, "cc", "c0", id, &err), ATTND_ERR_NOMEM, "cc has nothing to evict");
    cr_assert(strstr(err.msg, "max_sessions"), "%s", err.msg);
    sess_store_destroy(st);
}

Test(sess, a_delete_whose_directory_sync_fails_is_an_error_and_memory_follows_the_disk) {
    sess_store *st = new_store(dir, "m", 4, "keep", "gone", NULL);
    cr_assert_eq(sess_persist(st, NULL, "keep", NULL, NULL), ATTND_OK);
    cr_assert_eq(sess_persist(st, NULL, "gone", NULL, NULL), ATTND_OK);
    char fault[96];
    snprintf(fault, sizeof(fault), "%s.fault", dir);
    setenv("ATTND_FAULT_FILE", fault, 1);
    FILE *f = fopen(fault, "w");
    cr_assert_not_null(f);
    fputs("unlink EROFS keep.session\ndirsync EIO gone.session\n", f);
    fclose(f);
    struct kv_seq *kv;
    int e = 0;
    attnd_err err;
    cr_assert_eq(sess_delete(st, NULL, "keep", &kv, &e, &err), ATTND_ERR_IO);
    cr_assert_eq(e, EROFS);
    cr_assert(file_exists("keep") && sess_count(st) == 2, "the file stays, so does the session");
    cr_assert_eq(sess_delete(st, NULL, "gone", &kv, &e, &err), ATTND_ERR_IO, "not durable: an error");
    cr_assert_eq(e, EIO);
    cr_assert_not(file_exists("gone"));
    cr_assert_eq(sess_count(st), 1, "the file went, so did the session: a restart finds the same");
    unlink(fault);
    sess_store_destroy(st);
    st = new_store(dir, "m", 4, NULL);
    cr_assert_eq(sess_count(st), 1);
    sess_store_destroy(st);
}

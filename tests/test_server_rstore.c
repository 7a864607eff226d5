/*
 * test_server_rstore.c — stored responses (server/runtime/rstore.c): what is put comes back as copies,
 * survives a restart through the state directory, other models' and damaged files are left
 * alone, deleting the last response of a session reports the session as orphaned.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rstore.h"

static char dir[64];

static void setup(void) {
    snprintf(dir, sizeof(dir), "/tmp/attnd-rstore-test-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(rstore, .init = setup, .fini = teardown);

/* A store of up to max responses for model, kept in state_dir (NULL: in memory). */
static rstore *open_store(const char *state_dir, const char *model, int max) {
    rstore *s;
    attnd_err err = {{0}};
    cr_assert_eq(rstore_create(&s, state_dir, model, max, &err), ATTND_OK, "%s", err.msg);
    return s;
}

/* A store restarted over dir for model holds n responses. */
static void expect_stored(const char *model, int n, const char *why) {
    rstore *s = open_store(dir, model, 8);
    cr_assert_eq(rstore_count(s), n, "%s", why);
    rstore_destroy(s);
}

/* Writes text as the file dir/name. */
static void write_file(const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static json_t *response(const char *id, const char *text) {
    return json_pack("{s:s,s:s,s:[{s:s,s:[{s:s,s:s}]}]}", "id", id, "object", "response", "output", "type", "message",
                     "content", "type", "output_text", "text", text);
}

static json_t *conversation(const char *reply) {
    return json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "user", "content", "hi", "role", "assistant", "content", reply);
}

static void put(rstore *s, const char *id, const char *session, const char *reply) {
    json_t *r = response(id, reply), *c = conversation(reply);
    attnd_err err;
    cr_assert_eq(rstore_put(s, NULL, r, c, session, NULL, &err), ATTND_OK, "%s", err.msg);
    json_decref(r);
    json_decref(c);
}

static const char *reply_of(json_t *conv) {
    return json_string_value(json_object_get(json_array_get(conv, 1), "content"));
}

Test(rstore, stored_responses_survive_a_restart) {
    attnd_err err;
    rstore *s = open_store(dir, "model-a", 8);
    put(s, "resp_1", "resp_1", "first");
    put(s, "resp_2", "resp_1", "second");
    put(s, "resp_2", "resp_1", "second, again"); /* replaces */
    cr_assert_eq(rstore_count(s), 2);
    rstore_destroy(s);

    s = open_store(dir, "model-a", 8);
    cr_assert_eq(rstore_count(s), 2);
    json_t *r, *c;
    char session[SESS_ID_MAX + 1];
    cr_assert_eq(rstore_get(s, NULL, "resp_2", &r, &c, session, &err), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(json_string_value(json_object_get(r, "id")), "resp_2");
    cr_assert_str_eq(reply_of(c), "second, again");
    cr_assert_str_eq(session, "resp_1");
    /* copies: changing them changes nothing stored */
    json_array_clear(c);
    json_decref(r);
    json_decref(c);
    cr_assert_eq(rstore_get(s, NULL, "resp_2", NULL, &c, NULL, &err), ATTND_OK);
    cr_assert_str_eq(reply_of(c), "second, again");
    json_decref(c);
    cr_assert_eq(rstore_get(s, NULL, "resp_9", &r, NULL, NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_null(r);
    rstore_destroy(s);

    /* another model's store sees none of them */
    expect_stored("model-b", 0, "another model's store");
}

Test(rstore, deleting_the_last_response_of_a_session_orphans_it) {
    attnd_err err;
    rstore *s = open_store(dir, "m", 8);
    put(s, "resp_a", "resp_a", "a");
    put(s, "resp_b", "resp_a", "b");
    char orphan[SESS_ID_MAX + 1];
    cr_assert_eq(rstore_delete(s, NULL, "resp_a", orphan, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(orphan, "", "resp_b still continues in session resp_a");
    cr_assert_eq(rstore_delete(s, NULL, "resp_a", orphan, NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(rstore_delete(s, NULL, "resp_b", orphan, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(orphan, "resp_a");
    rstore_destroy(s);
    expect_stored("m", 0, "deleted responses' files are gone");
}

Test(rstore, limits_bad_entries_and_damaged_files_are_refused) {
    attnd_err err;
    rstore *s = open_store(NULL, "m", 2);
    put(s, "resp_1", "resp_1", "x");
    put(s, "resp_2", "resp_2", "y");
    json_t *r = response("resp_3", "z"), *c = conversation("z");
    cr_assert_eq(rstore_put(s, NULL, r, c, "resp_3", NULL, &err), ATTND_ERR_BUSY);
    cr_assert(strstr(err.msg, "2 responses"), "%s", err.msg);
    cr_assert_eq(rstore_put(s, NULL, r, c, "../etc", NULL, &err), ATTND_ERR_INVALID, "a session id that is not a valid id");
    json_decref(r);
    r = response("../x", "z");
    cr_assert_eq(rstore_put(s, NULL, r, c, "resp_3", NULL, &err), ATTND_ERR_INVALID, "a response id that is not a file name");
    json_decref(r);
    json_decref(c);
    rstore_destroy(s);

    write_file("resp_bad.response.json",
               "{\"format\": \"attnd-response\", \"version\": 1, \"model\": \"m\", \"response\": {\"id\": "
               "\"resp_other\"}, \"session\": \"s\", \"conversation\": []}");
    write_file("resp_trunc.response.json", "{\"format\": \"attnd-resp");
    expect_stored("m", 0, "a file whose id does not match its name, and a truncated one, are skipped");
}

Test(rstore, another_owners_response_is_not_found_also_after_a_restart) {
    attnd_err err;
    rstore *s = open_store(dir, "m", 8);
    json_t *r = response("resp_k", "mine"), *c = conversation("mine");
    cr_assert_eq(rstore_put(s, "ab12", r, c, "resp_k", NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(rstore_put(s, "XYZ", r, c, "resp_k", NULL, &err), ATTND_ERR_INVALID, "an owner tag is hex");
    json_decref(r);
    json_decref(c);
    rstore_destroy(s);
    s = open_store(dir, "m", 8);
    cr_assert_eq(rstore_get(s, NULL, "resp_k", NULL, NULL, NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(rstore_get(s, "cd34", "resp_k", NULL, NULL, NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(rstore_delete(s, "cd34", "resp_k", NULL, NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(rstore_get(s, "ab12", "resp_k", NULL, &c, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(reply_of(c), "mine");
    json_decref(c);
    rstore_destroy(s);
}

/* owner's put of response id (session id) and its status; *e gets the errno. */
static attnd_status try_put(rstore *s, const char *owner, const char *id, const char *reply, int *e, attnd_err *err) {
    json_t *r = response(id, reply), *c = conversation(reply);
    attnd_status rc = rstore_put(s, owner, r, c, id, e, err);
    json_decref(r);
    json_decref(c);
    return rc;
}

/* Files in dir whose name holds part. */
static int files_with(const char *part) {
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "ls -a '%s' | grep -c -F -- '%s'", dir, part);
    FILE *p = popen(cmd, "r");
    int n = -1;
    cr_assert(p && fscanf(p, "%d", &n) == 1);
    pclose(p);
    return n;
}

Test(rstore, each_owner_has_its_own_count_and_byte_quota) {
    attnd_err err;
    rstore *s = open_store(dir, "m", 100);
    rstore_set_limits(s, &(rstore_limits){.per_owner = 2, .per_owner_bytes = 2000});
    cr_assert_eq(try_put(s, "aa", "resp_a1", "x", NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(try_put(s, "aa", "resp_a2", "x", NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(rstore_admit(s, "aa", &err), ATTND_ERR_BUSY, "a full quota is refused before the work");
    cr_assert_eq(try_put(s, "aa", "resp_a3", "x", NULL, &err), ATTND_ERR_BUSY);
    cr_assert(strstr(err.msg, "max_responses_per_key"), "the message names the setting: %s", err.msg);
    cr_assert_eq(try_put(s, "aa", "resp_a2", "replaced", NULL, &err), ATTND_OK, "replacing is not one more: %s", err.msg);
    /* another key is not touched by aa's being full */
    cr_assert_eq(rstore_admit(s, "bb", &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(try_put(s, "bb", "resp_b1", "x", NULL, &err), ATTND_OK, "%s", err.msg);
    char big[3000];
    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_assert_eq(try_put(s, "bb", "resp_b2", big, NULL, &err), ATTND_ERR_BUSY, "over the byte quota");
    cr_assert(strstr(err.msg, "response_bytes_per_key"), "%s", err.msg);
    cr_assert_eq(rstore_get(s, "bb", "resp_b2", NULL, NULL, NULL, &err), ATTND_ERR_NOT_FOUND, "nothing half stored");
    cr_assert_eq(files_with("resp_b2"), 0, "and no file");
    cr_assert_eq(rstore_count(s), 3);
    rstore_destroy(s);
}

Test(rstore, expired_responses_leave_memory_and_disk_also_at_start) {
    attnd_err err;
    rstore *s = open_store(dir, "m", 8);
    put(s, "resp_old", "resp_old", "x");
    rstore_destroy(s);
    /* a file stored long ago (its "stored" field), next to the fresh one */
    write_file("resp_older.response.json",
               "{\"format\":\"attnd-response\",\"version\":1,\"model\":\"m\",\"owner\":\"\",\"session\":\"resp_older\","
               "\"stored\":1000,\"response\":{\"id\":\"resp_older\"},\"conversation\":[]}");
    s = open_store(dir, "m", 8);
    cr_assert_eq(rstore_count(s), 2);
    rstore_set_limits(s, &(rstore_limits){.ttl_ms = 60000});
    cr_assert_eq(rstore_count(s), 1, "the one stored in 1970 expired at once");
    cr_assert_eq(files_with("resp_older"), 0, "its file is gone");
    cr_assert_eq(rstore_get(s, NULL, "resp_old", NULL, NULL, NULL, &err), ATTND_OK, "the fresh one stays");
    rstore_set_limits(s, &(rstore_limits){.ttl_ms = 1});
    attnd_clock_advance_ms(20);
    cr_assert_eq(rstore_get(s, NULL, "resp_old", NULL, NULL, NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(files_with(".response.json"), 0);
    rstore_destroy(s);
}

Test(rstore, responses_expire_on_time_without_any_use_of_the_store) {
    rstore *s = open_store(dir, "m", 8);
    rstore_set_limits(s, &(rstore_limits){.ttl_ms = 300}); /* the store is empty: nothing is due */
    put(s, "resp_t1", "resp_t1", "x");
    cr_assert_eq(files_with("resp_t1"), 1, "stored");
    /* nothing calls the store from here: its own thread removes the file when the TTL passes */
    int waited = 0;
    while (files_with("resp_t1") && waited < 15000) usleep(5000), waited += 5;
    cr_assert_eq(files_with("resp_t1"), 0, "the expired response's file is still there after %d ms", waited);
    cr_assert_eq(rstore_count(s), 0);
    rstore_destroy(s);
}

/* Turns the statedir fault hook on with line ("" = off). */
static void set_fault(const char *line) {
    char path[128];
    snprintf(path, sizeof(path), "%s.fault", dir);
    if (!*line) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "%s\n", line);
    fclose(f);
    setenv("ATTND_FAULT_FILE", path, 1);
}

Test(rstore, a_put_that_is_not_durable_fails_and_memory_matches_the_disk) {
    static const char *steps[] = {"open", "write", "fsync", "rename", "dirsync"};
    static const char *errs[] = {"ENOSPC", "EROFS", "EIO"};
    static const int errnos[] = {ENOSPC, EROFS, EIO};
    attnd_err err;
    rstore *s = open_store(dir, "m", 64);
    put(s, "resp_keep", "resp_keep", "before");
    int k = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) {
            char line[64], id[32];
            snprintf(line, sizeof(line), "%s %s .response.json", steps[i], errs[j]);
            snprintf(id, sizeof(id), "resp_f%d", k++);
            set_fault(line);
            int e = 0;
            cr_assert_eq(try_put(s, NULL, id, "x", &e, &err), ATTND_ERR_IO, "%s", line);
            cr_assert_eq(e, errnos[j], "%s: the errno reaches the caller (%d)", line, e);
            /* before the rename nothing is kept; after it the file is in place and memory holds it */
            bool kept = rstore_get(s, NULL, id, NULL, NULL, NULL, &err) == ATTND_OK;
            cr_assert_eq(kept, i == 4, "%s: kept %d", line, kept);
            cr_assert_eq(files_with(id), i == 4 ? 1 : 0, "%s: no temporary file, and the file iff kept", line);
            cr_assert_eq(try_put(s, NULL, "resp_keep", "overwritten", &e, &err), ATTND_ERR_IO, "%s", line);
            json_t *c;
            cr_assert_eq(rstore_get(s, NULL, "resp_keep", NULL, &c, NULL, &err), ATTND_OK);
            cr_assert_str_eq(reply_of(c), i == 4 ? "overwritten" : "before", "%s", line);
            json_decref(c);
            set_fault("");
            put(s, "resp_keep", "resp_keep", "before");
        }
    int n = rstore_count(s);
    rstore_destroy(s);
    expect_stored("m", n, "a restart loads what memory held");
}

Test(rstore, a_delete_that_is_not_durable_fails_and_the_response_stays) {
    attnd_err err;
    rstore *s = open_store(dir, "m", 8);
    put(s, "resp_d", "resp_d", "x");
    put(s, "resp_e", "resp_e", "y");
    char orphan[SESS_ID_MAX + 1];
    int e = 0;
    set_fault("unlink EROFS");
    cr_assert_eq(rstore_delete(s, NULL, "resp_d", orphan, &e, &err), ATTND_ERR_IO);
    cr_assert_eq(e, EROFS);
    cr_assert_str_eq(orphan, "", "nothing orphaned by a delete that failed");
    cr_assert_eq(rstore_get(s, NULL, "resp_d", NULL, NULL, NULL, &err), ATTND_OK, "its file stays, so it stays");
    /* the unlink done, only its directory sync failed: the file is gone, so is the entry */
    set_fault("dirsync EIO .response.json");
    cr_assert_eq(rstore_delete(s, NULL, "resp_e", orphan, &e, &err), ATTND_ERR_IO, "not durable: an error");
    cr_assert_eq(e, EIO);
    cr_assert_eq(rstore_get(s, NULL, "resp_e", NULL, NULL, NULL, &err), ATTND_ERR_NOT_FOUND, "memory = disk");
    cr_assert_str_eq(orphan, "resp_e", "its session is left to the caller");
    set_fault("");
    cr_assert_eq(rstore_count(s), 1);
    rstore_destroy(s);
    expect_stored("m", 1, "a restart finds what memory held");
    s = open_store(dir, "m", 8);
    cr_assert_eq(rstore_delete(s, NULL, "resp_d", orphan, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(orphan, "resp_d");
    rstore_destroy(s);
    expect_stored("m", 0, "deleted for good");
}

/*
 * test_server_rstore.c — stored responses (server/runtime/rstore.c): what is put comes back as copies,
 * survives a restart through the state directory, other models' and damaged files are left
 * alone, deleting the last response of a session reports the session as orphaned.
 */
#include <criterion/criterion.h>
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
    cr_assert_eq(rstore_put(s, NULL, r, c, session, &err), ATTND_OK, "%s", err.msg);
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
    cr_assert_eq(rstore_delete(s, NULL, "resp_a", orphan, &err), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(orphan, "", "resp_b still continues in session resp_a");
    cr_assert_eq(rstore_delete(s, NULL, "resp_a", orphan, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(rstore_delete(s, NULL, "resp_b", orphan, &err), ATTND_OK, "%s", err.msg);
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
    cr_assert_eq(rstore_put(s, NULL, r, c, "resp_3", &err), ATTND_ERR_NOMEM);
    cr_assert(strstr(err.msg, "2 responses"), "%s", err.msg);
    cr_assert_eq(rstore_put(s, NULL, r, c, "../etc", &err), ATTND_ERR_INVALID, "a session id that is not a valid id");
    json_decref(r);
    r = response("../x", "z");
    cr_assert_eq(rstore_put(s, NULL, r, c, "resp_3", &err), ATTND_ERR_INVALID, "a response id that is not a file name");
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
    cr_assert_eq(rstore_put(s, "ab12", r, c, "resp_k", &err), ATTND_OK, "%s", err.msg);
    cr_assert_eq(rstore_put(s, "XYZ", r, c, "resp_k", &err), ATTND_ERR_INVALID, "an owner tag is hex");
    json_decref(r);
    json_decref(c);
    rstore_destroy(s);
    s = open_store(dir, "m", 8);
    cr_assert_eq(rstore_get(s, NULL, "resp_k", NULL, NULL, NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(rstore_get(s, "cd34", "resp_k", NULL, NULL, NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(rstore_delete(s, "cd34", "resp_k", NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert_eq(rstore_get(s, "ab12", "resp_k", NULL, &c, NULL, &err), ATTND_OK, "%s", err.msg);
    cr_assert_str_eq(reply_of(c), "mine");
    json_decref(c);
    rstore_destroy(s);
}

/*
 * test_server_mreg.c — the model registry (server/runtime/mreg.c) over fake loaders: loading on
 * first use, a failed load kept with its message, the least recently used idle model unloaded
 * for room (count and memory), never a model in use or waited for, explicit unload refused while
 * busy, a request waiting for a load while someone asks to unload it, and a hold on a loaded
 * model that neither loads it nor counts as a use; then the request layer on a server of two
 * models (stories260K twice): /props, /slots, /apply-template and sessions by `model` or
 * ?model=, and the 409 for another model's session.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "mreg.h"
#include "server_rig.h"

typedef struct fake {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool gate_closed;          /* loads wait while it is closed */
    atomic_int loads, unloads;
    int64_t clock_ms;
    char unloaded[8][32];      /* names unloaded, in order */
    int n_unloaded;
    size_t extra_bytes[4];     /* by preset: what a load adds to mreg_add's estimate */
} fake;

typedef struct inst {
    char name[32];
} inst;

static attnd_status fake_load(void *user, const char *name, const char *path, int preset, void **out, size_t *bytes,
                              attnd_err *err) {
    fake *f = user;
    (void)preset;
    *bytes += f->extra_bytes[preset];
    pthread_mutex_lock(&f->mu);
    while (f->gate_closed) pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    if (strstr(path, "broken")) return attnd_fail(err, ATTND_ERR_FORMAT, "%s: not a GGUF file", path);
    inst *i = calloc(1, sizeof(*i));
    snprintf(i->name, sizeof(i->name), "%s", name);
    atomic_fetch_add(&f->loads, 1);
    *out = i;
    return ATTND_OK;
}

static void fake_unload(void *user, void *p) {
    fake *f = user;
    inst *i = p;
    pthread_mutex_lock(&f->mu);
    if (f->n_unloaded < 8) snprintf(f->unloaded[f->n_unloaded++], 32, "%s", i->name);
    pthread_mutex_unlock(&f->mu);
    atomic_fetch_add(&f->unloads, 1);
    free(i);
}

static int64_t fake_now(void *user) { return ((fake *)user)->clock_ms; }

static mreg *make_waiting(fake *f, int max_loaded, size_t memory, int room_wait_ms) {
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->clock_ms = 1000;
    mreg_ops ops = {fake_load, fake_unload, fake_now, f};
    mreg_limits lim = {.max_loaded = max_loaded, .memory_bytes = memory, .room_wait_ms = room_wait_ms};
    mreg *reg;
    attnd_err err;
    cr_assert_eq(mreg_create(&reg, &ops, &lim, &err), ATTND_OK);
    cr_assert_eq(mreg_add(reg, "a", "/m/a.gguf", 0, 100, &err), ATTND_OK);
    cr_assert_eq(mreg_add(reg, "b", "/m/b.gguf", 1, 100, &err), ATTND_OK);
    cr_assert_eq(mreg_add(reg, "c", "/m/c.gguf", 2, 100, &err), ATTND_OK);
    cr_assert_eq(mreg_add(reg, "broken", "/m/broken.gguf", 3, 100, &err), ATTND_OK);
    return reg;
}

static mreg *make(fake *f, int max_loaded, size_t memory) { return make_waiting(f, max_loaded, memory, 0); }

static mreg_state state_of(mreg *reg, const char *name) {
    mreg_info in;
    mreg_info_get(reg, mreg_find(reg, name), &in);
    return in.state;
}

/* Uses model name once at time t (acquire, release). */
static void use(fake *f, mreg *reg, const char *name, int64_t t) {
    f->clock_ms = t;
    mreg_ref ref;
    attnd_err err;
    cr_assert_eq(mreg_acquire(reg, name, &ref, NULL, NULL, &err), ATTND_OK, "%s: %s", name, err.msg);
    cr_assert_str_eq(((inst *)ref.inst)->name, name);
    mreg_release(reg, &ref);
}

Test(mreg, a_model_loads_on_first_use_and_stays) {
    fake f;
    mreg *reg = make(&f, 0, 0);
    cr_assert_eq(state_of(reg, "a"), MREG_UNLOADED);
    use(&f, reg, "a", 1000);
    use(&f, reg, "a", 2000);
    cr_assert_eq(atomic_load(&f.loads), 1);
    cr_assert_eq(state_of(reg, "a"), MREG_LOADED);
    mreg_destroy(reg);
    cr_assert_eq(atomic_load(&f.unloads), 1, "destroy unloads what is loaded");
}

Test(mreg, an_unknown_name_is_not_found_and_lists_the_names) {
    fake f;
    mreg *reg = make(&f, 0, 0);
    mreg_ref ref;
    attnd_err err;
    cr_assert_eq(mreg_acquire(reg, "zz", &ref, NULL, NULL, &err), ATTND_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "'zz'") && strstr(err.msg, "a, b, c, broken"), "%s", err.msg);
    cr_assert_eq(mreg_add(reg, "a", "/x", 0, 1, &err), ATTND_ERR_INVALID, "a duplicate name is refused");
    mreg_destroy(reg);
}

Test(mreg, a_failed_load_names_the_model_and_the_others_keep_serving) {
    fake f;
    mreg *reg = make(&f, 0, 0);
    mreg_ref ref;
    attnd_err err;
    cr_assert_eq(mreg_acquire(reg, "broken", &ref, NULL, NULL, &err), ATTND_ERR_IO);
    cr_assert(strstr(err.msg, "model 'broken' failed to load") && strstr(err.msg, "not a GGUF"), "%s", err.msg);
    cr_assert_eq(state_of(reg, "broken"), MREG_FAILED);
    use(&f, reg, "a", 1000);
    /* the failure is kept: the next request is answered at once, without a second load */
    cr_assert_eq(mreg_acquire(reg, "broken", &ref, NULL, NULL, &err), ATTND_ERR_IO);
    mreg_info in;
    mreg_info_get(reg, mreg_find(reg, "broken"), &in);
    cr_assert_eq(in.load_failures, 1);
    /* an explicit load tries again */
    cr_assert_eq(mreg_load(reg, "broken", &err), ATTND_OK);
    mreg_wait_loads(reg);
    mreg_info_get(reg, mreg_find(reg, "broken"), &in);
    cr_assert_eq(in.load_failures, 2);
    mreg_destroy(reg);
}

Test(mreg, the_least_recently_used_idle_model_makes_room_by_count) {
    fake f;
    mreg *reg = make(&f, 2, 0);
    use(&f, reg, "a", 1000);
    use(&f, reg, "b", 2000);
    use(&f, reg, "a", 3000); /* b is now the least recently used */
    use(&f, reg, "c", 4000);
    cr_assert_eq(state_of(reg, "b"), MREG_UNLOADED);
    cr_assert_eq(state_of(reg, "a"), MREG_LOADED);
    cr_assert_eq(state_of(reg, "c"), MREG_LOADED);
    cr_assert_eq(f.n_unloaded, 1);
    cr_assert_str_eq(f.unloaded[0], "b");
    mreg_destroy(reg);
}

Test(mreg, the_memory_budget_unloads_as_many_as_needed) {
    fake f;
    mreg *reg = make(&f, 0, 250); /* two models of 100 fit */
    use(&f, reg, "a", 1000);
    use(&f, reg, "b", 2000);
    use(&f, reg, "c", 3000);
    cr_assert_eq(state_of(reg, "a"), MREG_UNLOADED);
    cr_assert_eq(state_of(reg, "b"), MREG_LOADED);
    mreg_info in;
    mreg_info_get(reg, mreg_find(reg, "a"), &in);
    cr_assert_eq(in.unloads, 1);
    cr_assert_eq(in.loads, 1);
    mreg_destroy(reg);
}

Test(mreg, a_load_larger_than_its_estimate_unloads_idle_models_but_never_a_busy_one) {
    fake f;
    mreg *reg = make(&f, 0, 250); /* estimates 100 each; a holds 200 once loaded (a draft's KV) */
    f.extra_bytes[0] = 100;
    use(&f, reg, "b", 1000);
    use(&f, reg, "a", 2000); /* 100 + 100 fit; 200 + 100 do not: b, idle, unloads */
    mreg_wait_loads(reg);
    mreg_info in;
    mreg_info_get(reg, mreg_find(reg, "a"), &in);
    cr_assert_eq(in.bytes, 200, "the registry keeps the size the load reported");
    cr_assert_eq(state_of(reg, "b"), MREG_UNLOADED);
    cr_assert_eq(atomic_load(&f.unloads), 1);
    cr_assert_str_eq(f.unloaded[0], "b");
    attnd_err err;
    cr_assert_eq(mreg_unload(reg, "a", &err), ATTND_OK);
    use(&f, reg, "a", 3000);
    mreg_info_get(reg, mreg_find(reg, "a"), &in);
    cr_assert_eq(in.bytes, 200, "each load counts from mreg_add's estimate, not from the last load's");
    mreg_destroy(reg);

    reg = make(&f, 0, 250); /* again, with b in use while a loads: b stays, over the budget */
    f.extra_bytes[0] = 100;
    mreg_ref held;
    cr_assert_eq(mreg_acquire(reg, "b", &held, NULL, NULL, &err), ATTND_OK);
    use(&f, reg, "a", 2000);
    mreg_wait_loads(reg);
    cr_assert_eq(state_of(reg, "b"), MREG_LOADED);
    cr_assert_eq(state_of(reg, "a"), MREG_LOADED);
    f.clock_ms = 3500;
    mreg_release(reg, &held);
    use(&f, reg, "c", 4000); /* 300 + 100: a, the least recently used, makes the room */
    cr_assert_eq(state_of(reg, "c"), MREG_LOADED);
    cr_assert_eq(state_of(reg, "a"), MREG_UNLOADED);
    cr_assert_eq(state_of(reg, "b"), MREG_LOADED);
    mreg_destroy(reg);
}

Test(mreg, a_model_in_use_is_never_unloaded_for_room) {
    fake f;
    mreg *reg = make(&f, 1, 0);
    mreg_ref held;
    attnd_err err;
    cr_assert_eq(mreg_acquire(reg, "a", &held, NULL, NULL, &err), ATTND_OK);
    mreg_ref ref;
    cr_assert_eq(mreg_acquire(reg, "b", &ref, NULL, NULL, &err), ATTND_ERR_NOMEM);
    cr_assert(strstr(err.msg, "'b'") && strstr(err.msg, "in use"), "%s", err.msg);
    cr_assert_eq(state_of(reg, "a"), MREG_LOADED);
    cr_assert_eq(mreg_unload(reg, "a", &err), ATTND_ERR_BUSY, "an explicit unload is refused too");
    mreg_release(reg, &held);
    use(&f, reg, "b", 5000); /* idle now: it makes room */
    cr_assert_eq(state_of(reg, "a"), MREG_UNLOADED);
    mreg_destroy(reg);
}

Test(mreg, a_model_larger_than_the_budget_is_refused_with_its_size) {
    fake f;
    mreg *reg = make(&f, 0, 50);
    mreg_ref ref;
    attnd_err err;
    cr_assert_eq(mreg_acquire(reg, "a", &ref, NULL, NULL, &err), ATTND_ERR_NOMEM);
    cr_assert(strstr(err.msg, "models_memory_mb"), "%s", err.msg);
    mreg_destroy(reg);
}

typedef struct waiter {
    mreg *reg;
    attnd_status st;
    mreg_ref ref;
} waiter;

static void *wait_for_a(void *p) {
    waiter *w = p;
    attnd_err err;
    w->st = mreg_acquire(w->reg, "a", &w->ref, NULL, NULL, &err);
    return NULL;
}

static int waiters_of(mreg *reg, const char *name) {
    mreg_info in;
    mreg_info_get(reg, mreg_find(reg, name), &in);
    return in.waiters;
}

Test(mreg, an_unload_while_a_request_waits_for_the_load_leaves_it_its_model) {
    fake f;
    mreg *reg = make(&f, 1, 0);
    f.gate_closed = true;
    waiter w = {.reg = reg};
    pthread_t t;
    pthread_create(&t, NULL, wait_for_a, &w);
    for (int i = 0; i < 2000 && waiters_of(reg, "a") == 0; i++) usleep(1000);
    cr_assert_eq(waiters_of(reg, "a"), 1);
    cr_assert_eq(state_of(reg, "a"), MREG_LOADING);
    attnd_err err;
    cr_assert_eq(mreg_unload(reg, "a", &err), ATTND_ERR_INVALID, "still loading: nothing to unload");
    pthread_mutex_lock(&f.mu);
    f.gate_closed = false;
    pthread_cond_broadcast(&f.cv);
    pthread_mutex_unlock(&f.mu);
    /* the load ends: the waiter holds it, so neither an unload nor another model's room takes it */
    pthread_join(t, NULL);
    cr_assert_eq(w.st, ATTND_OK);
    cr_assert_str_eq(((inst *)w.ref.inst)->name, "a");
    cr_assert_eq(mreg_unload(reg, "a", &err), ATTND_ERR_BUSY);
    mreg_ref ref;
    cr_assert_eq(mreg_acquire(reg, "b", &ref, NULL, NULL, &err), ATTND_ERR_NOMEM);
    cr_assert_eq(atomic_load(&f.unloads), 0);
    mreg_release(reg, &w.ref);
    cr_assert_eq(mreg_unload(reg, "a", &err), ATTND_OK);
    cr_assert_eq(atomic_load(&f.unloads), 1);
    mreg_destroy(reg);
}

Test(mreg, a_waited_for_model_is_not_a_victim_of_another_load) {
    fake f;
    mreg *reg = make(&f, 2, 0);
    use(&f, reg, "a", 1000);
    f.gate_closed = true;
    attnd_err err;
    cr_assert_eq(mreg_load(reg, "b", &err), ATTND_OK);     /* b loads: 2 of 2 */
    cr_assert_eq(state_of(reg, "b"), MREG_LOADING);
    /* c needs room: a is idle and goes, b (loading) does not */
    cr_assert_eq(mreg_load(reg, "c", &err), ATTND_OK);
    cr_assert_eq(state_of(reg, "a"), MREG_UNLOADED);
    pthread_mutex_lock(&f.mu);
    f.gate_closed = false;
    pthread_cond_broadcast(&f.cv);
    pthread_mutex_unlock(&f.mu);
    mreg_wait_loads(reg);
    cr_assert_eq(state_of(reg, "b"), MREG_LOADED);
    cr_assert_eq(state_of(reg, "c"), MREG_LOADED);
    mreg_destroy(reg);
}

static void read_name(void *p, void *user) { snprintf(user, 32, "%s", ((inst *)p)->name); }

Test(mreg, peeking_at_a_loaded_model_does_not_count_as_a_use) {
    fake f;
    mreg *reg = make(&f, 2, 0);
    use(&f, reg, "a", 1000);
    use(&f, reg, "b", 2000);
    char name[32] = "";
    f.clock_ms = 3000;
    cr_assert(mreg_peek(reg, mreg_find(reg, "a"), read_name, name));
    cr_assert_str_eq(name, "a");
    cr_assert_not(mreg_peek(reg, mreg_find(reg, "c"), read_name, name), "c is not loaded");
    use(&f, reg, "c", 4000); /* a is still the least recently used */
    cr_assert_eq(state_of(reg, "a"), MREG_UNLOADED);
    cr_assert_eq(state_of(reg, "b"), MREG_LOADED);
    mreg_destroy(reg);
}

Test(mreg, holding_a_loaded_model_neither_loads_nor_counts_as_a_use) {
    fake f;
    mreg *reg = make(&f, 2, 0);
    mreg_ref ref;
    cr_assert_not(mreg_hold_loaded(reg, mreg_find(reg, "c"), &ref), "c is not loaded");
    cr_assert_eq(ref.idx, -1);
    cr_assert_eq(state_of(reg, "c"), MREG_UNLOADED, "a hold loads nothing");
    cr_assert_eq(atomic_load(&f.loads), 0);
    use(&f, reg, "a", 1000);
    use(&f, reg, "b", 2000);
    f.clock_ms = 3000;
    cr_assert(mreg_hold_loaded(reg, mreg_find(reg, "a"), &ref));
    cr_assert_str_eq(((inst *)ref.inst)->name, "a");
    attnd_err err;
    cr_assert_eq(mreg_unload(reg, "a", &err), ATTND_ERR_BUSY, "a held model is in use");
    mreg_release(reg, &ref);
    use(&f, reg, "c", 4000); /* a, held and released at 3000, is still the least recently used */
    cr_assert_eq(state_of(reg, "a"), MREG_UNLOADED);
    cr_assert_eq(state_of(reg, "b"), MREG_LOADED);
    mreg_destroy(reg);
}

typedef struct taker {
    mreg *reg;
    const char *name;
    attnd_status st;
    attnd_err err;
    mreg_ref ref;
} taker;

static void *take(void *p) {
    taker *t = p;
    t->st = mreg_acquire(t->reg, t->name, &t->ref, NULL, NULL, &t->err);
    return NULL;
}

static bool wait_waiters(mreg *reg, const char *name, int n) {
    for (int i = 0; i < 5000 && waiters_of(reg, name) != n; i++) usleep(1000);
    return waiters_of(reg, name) == n;
}

Test(mreg, a_request_waits_for_room_while_the_least_recently_used_model_drains) {
    fake f;
    mreg *reg = make_waiting(&f, 1, 0, 10000);
    mreg_ref held;
    attnd_err err;
    cr_assert_eq(mreg_acquire(reg, "a", &held, NULL, NULL, &err), ATTND_OK);
    taker tb = {.reg = reg, .name = "b"}, ta = {.reg = reg, .name = "a"};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, take, &tb);
    cr_assert(wait_waiters(reg, "b", 1), "b's request waits for room (no 503)");
    pthread_create(&t2, NULL, take, &ta);
    cr_assert(wait_waiters(reg, "a", 1), "a drains: a new request for it is held, not served");
    cr_assert_eq(state_of(reg, "a"), MREG_LOADED);
    cr_assert_eq(mreg_unload(reg, "a", &err), ATTND_ERR_BUSY, "its running request still holds it");
    mreg_release(reg, &held); /* a's last request ends: a unloads, b loads */
    pthread_join(t1, NULL);
    cr_assert_eq(tb.st, ATTND_OK, "%s", tb.err.msg);
    cr_assert_str_eq(((inst *)tb.ref.inst)->name, "b");
    cr_assert(wait_waiters(reg, "a", 1), "a's held request now waits for b's room in turn");
    mreg_release(reg, &tb.ref);
    pthread_join(t2, NULL);
    cr_assert_eq(ta.st, ATTND_OK, "%s", ta.err.msg);
    cr_assert_str_eq(((inst *)ta.ref.inst)->name, "a");
    cr_assert_eq(f.n_unloaded, 2);
    cr_assert_str_eq(f.unloaded[0], "a");
    cr_assert_str_eq(f.unloaded[1], "b");
    mreg_release(reg, &ta.ref);
    mreg_destroy(reg);
}

Test(mreg, a_wait_for_room_ends_at_its_deadline_and_the_drained_model_serves_again) {
    fake f;
    mreg *reg = make_waiting(&f, 1, 0, 150);
    mreg_ref held, ref;
    attnd_err err;
    cr_assert_eq(mreg_acquire(reg, "a", &held, NULL, NULL, &err), ATTND_OK);
    double t0 = attnd_now_s();
    cr_assert_eq(mreg_acquire(reg, "b", &ref, NULL, NULL, &err), ATTND_ERR_NOMEM);
    cr_assert_geq(attnd_now_s() - t0, 0.14, "it waited for room first");
    cr_assert(strstr(err.msg, "'b'") && strstr(err.msg, "stayed in use"), "%s", err.msg);
    cr_assert_eq(waiters_of(reg, "b"), 0);
    cr_assert_eq(mreg_acquire(reg, "a", &ref, NULL, NULL, &err), ATTND_OK, "nobody waits for room: a serves at once");
    mreg_release(reg, &ref);
    mreg_release(reg, &held);
    cr_assert_eq(f.n_unloaded, 0);
    mreg_destroy(reg);
}

Test(mreg, the_requests_waiting_for_room_are_bounded) {
    fake f;
    mreg *reg = make_waiting(&f, 1, 0, 10000);
    mreg_ref held, ref;
    attnd_err err;
    cr_assert_eq(mreg_acquire(reg, "a", &held, NULL, NULL, &err), ATTND_OK);
    taker tb[64];
    pthread_t t[64];
    for (int i = 0; i < 64; i++) {
        tb[i] = (taker){.reg = reg, .name = "b"};
        pthread_create(&t[i], NULL, take, &tb[i]);
    }
    cr_assert(wait_waiters(reg, "b", 64));
    cr_assert_eq(mreg_acquire(reg, "b", &ref, NULL, NULL, &err), ATTND_ERR_BUSY, "the 65th is refused at once");
    cr_assert(strstr(err.msg, "wait"), "%s", err.msg);
    mreg_release(reg, &held);
    for (int i = 0; i < 64; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(tb[i].st, ATTND_OK, "%s", tb[i].err.msg);
        mreg_release(reg, &tb[i].ref);
    }
    mreg_destroy(reg);
}

// ---- the request layer on a server of two models (server_rig.h: no socket) ------------------

#define STORIES ATTND_DATA_DIR "/models/stories260K.gguf"

/* One request to srv: its status, and its body in *body (caller frees). */
static int ask(struct server *srv, const char *method, const char *url, const char *json, char **body) {
    rig_rec c = {0};
    rig_run(srv, &c, method, url, json);
    cr_assert_eq(c.replies, 1, "%s %s: one answer", method, url);
    *body = c.body;
    return c.status;
}

static void expect(struct server *srv, const char *method, const char *url, const char *json, int status,
                   const char *has) {
    char *body = NULL;
    int got = ask(srv, method, url, json, &body);
    cr_expect_eq(got, status, "%s %s: %d, want %d: %.300s", method, url, got, status, body ? body : "");
    cr_expect(has == NULL || (body && strstr(body, has)), "%s %s: no %s in %.300s", method, url, has, body ? body : "");
    free(body);
}

Test(mreg_http, the_endpoints_of_one_model_route_by_model_on_a_server_of_two, .timeout = 60) {
    char dir[] = "/tmp/attnd-mreg-XXXXXX", a[64], b[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(a, sizeof(a), "%s/a.gguf", dir);
    snprintf(b, sizeof(b), "%s/b.gguf", dir);
    cr_assert_eq(symlink(STORIES, a), 0);
    cr_assert_eq(symlink(STORIES, b), 0);
    server_settings cfg;
    rig_settings(&cfg, NULL, NULL, 1);
    cfg.models_dir = dir;
    cfg.models_cache = false;
    attnd_err err;
    struct server *srv = rig_start(&cfg, false, &err);
    cr_assert_not_null(srv, "%s", err.msg);
    /* read-only GETs of a model not loaded: its state, and it stays unloaded */
    expect(srv, "GET", "/props?model=b", NULL, 200, "\"status\":{\"value\":\"unloaded\"}");
    expect(srv, "GET", "/slots?model=b", NULL, 200, "[]");
    expect(srv, "GET", "/props?model=zz", NULL, 404, "model 'zz' not found; available: a, b");
    expect(srv, "GET", "/props", NULL, 400, "available: a, b");
    cr_expect_eq(state_of(srv->models, "b"), MREG_UNLOADED, "/props and /slots load nothing");
    /* the other parameters of a query do not hide model */
    expect(srv, "GET", "/v1/sessions?limit=5&model=a&x", NULL, 200, "\"data\":[]");
    expect(srv, "POST", "/v1/sessions", "{\"model\": \"a\", \"id\": \"s1\"}", 200, "\"id\":\"s1\"");
    expect(srv, "GET", "/v1/sessions/s1?model=a", NULL, 200, "\"id\":\"s1\"");
    expect(srv, "GET", "/v1/sessions/s1?model=b", NULL, 409, "belongs to model 'a', not 'b'");
    expect(srv, "POST", "/v1/completions", "{\"model\": \"b\", \"prompt\": \"Once\", \"max_tokens\": 1, \"session_id\": \"s1\"}",
           409, "belongs to model 'a'");
    expect(srv, "POST", "/apply-template", "{\"model\": \"b\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
           200, "Hi");
    expect(srv, "GET", "/props?model=b", NULL, 200, "\"status\":{\"value\":\"loaded\"}");
    server_destroy(srv);
    unlink(a);
    unlink(b);
    rmdir(dir);
}

/*
 * test_server_conn.c — the connection tracker (server/api/conn.c) without MHD and without a
 * network: each "connection" is one end of a socketpair, opened, advanced and closed through the
 * conn_slot calls the MHD callbacks make, and the watchdog's sweep is run at chosen times. What is
 * checked: the header, body and keep-alive deadlines (a connection past one is shut down, which
 * its peer sees as end of stream; one within it is left alone), the 503 verdict past
 * max_connections with /health's reserved slot, the per-address cap (exact, freed on close, and
 * one second of header time for a connection over it), the limits' defaults, and the framing
 * checks of a request's headers (conn_framing_*).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"

// ---- a socketpair per connection ---------------------------------------------------------------

typedef struct pair {
    int ours;  /* the tracked end (what MHD would hold) */
    int peer;  /* the client's end: reads end of stream once ours is shut down */
} pair;

static pair pair_open(void) {
    int fd[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0, "socketpair: %s", strerror(errno));
    return (pair){fd[0], fd[1]};
}

static void pair_close(pair p) { close(p.ours), close(p.peer); }

/* Whether the tracked end was shut down: the peer reads end of stream at once. */
static bool was_shut(pair p) {
    struct pollfd pf = {.fd = p.peer, .events = POLLIN};
    if (poll(&pf, 1, 0) != 1) return false;
    char c;
    return recv(p.peer, &c, 1, MSG_DONTWAIT) == 0;
}

/* A tracker whose watchdog never fires during a test (deadlines of a minute and more); the tests
 * run the sweep themselves at chosen times. */
static conn_tracker *tracker(int max_connections, int per_address) {
    conn_limits lim = {.max_connections = max_connections, .header_timeout_s = 60, .idle_timeout_s = 300,
                       .body_timeout_s = 120, .per_address = per_address};
    conn_tracker *ct;
    attnd_err err;
    cr_assert_eq(conn_tracker_create(&ct, &lim, &err), ATTND_OK, "%s", err.msg);
    return ct;
}

// ---- deadlines ---------------------------------------------------------------------------------

Test(conn, a_connection_without_headers_is_shut_down_after_the_header_deadline) {
    conn_tracker *ct = tracker(8, 4);
    pair p = pair_open();
    double t0 = attnd_now_s();
    conn_slot *s = conn_open(ct, p.ours, "10.0.0.1");
    cr_assert_not_null(s);
    cr_assert_eq(conn_tracker_sweep(ct, t0 + 59), 0, "within header_timeout_s nothing is closed");
    cr_assert_not(was_shut(p));
    cr_assert_eq(conn_tracker_sweep(ct, t0 + 61), 1);
    cr_assert(was_shut(p), "the late connection is shut down");
    cr_assert_eq(conn_tracker_sweep(ct, t0 + 1000), 0, "and only once");
    conn_close(ct, s);
    conn_tracker_destroy(ct);
    pair_close(p);
}

Test(conn, headers_start_the_body_deadline_and_a_complete_body_clears_it) {
    conn_tracker *ct = tracker(8, 4);
    pair a = pair_open(), b = pair_open();
    double t0 = attnd_now_s();
    conn_slot *sa = conn_open(ct, a.ours, "10.0.0.1"), *sb = conn_open(ct, b.ours, "10.0.0.2");
    cr_assert_eq(conn_slot_begin(ct, sa, false), CONN_OK);
    cr_assert_eq(conn_slot_begin(ct, sb, false), CONN_OK);
    cr_assert_eq(conn_tracker_sweep(ct, t0 + 61), 0, "past the header deadline, within the body's");
    conn_slot_body_done(ct, sb); /* b's body is in: it is being answered, however long */
    cr_assert_eq(conn_tracker_sweep(ct, attnd_now_s() + 121), 1, "only the one still waiting for its body");
    cr_assert(was_shut(a));
    cr_assert_not(was_shut(b));
    cr_assert_eq(conn_tracker_sweep(ct, t0 + 1e6), 0, "an answered request has no deadline");
    conn_close(ct, sa), conn_close(ct, sb);
    conn_tracker_destroy(ct);
    pair_close(a), pair_close(b);
}

Test(conn, a_keep_alive_connection_gets_the_idle_timeout_plus_the_header_deadline) {
    conn_tracker *ct = tracker(8, 4);
    pair p = pair_open();
    conn_slot *s = conn_open(ct, p.ours, "10.0.0.1");
    cr_assert_eq(conn_slot_begin(ct, s, false), CONN_OK);
    conn_slot_body_done(ct, s);
    double t0 = attnd_now_s();
    conn_slot_end(ct, s);
    cr_assert_eq(conn_tracker_sweep(ct, t0 + 300 + 59), 0, "idle 300 s + headers 60 s");
    cr_assert_eq(conn_tracker_sweep(ct, attnd_now_s() + 300 + 61), 1);
    cr_assert(was_shut(p));
    conn_close(ct, s);
    conn_tracker_destroy(ct);
    pair_close(p);
}

// ---- limits ------------------------------------------------------------------------------------

Test(conn, past_max_connections_requests_get_503_but_reserved_ones_do_not) {
    conn_tracker *ct = tracker(2, 8);
    pair p[3];
    conn_slot *s[3];
    for (int i = 0; i < 3; i++) p[i] = pair_open(), s[i] = conn_open(ct, p[i].ours, "10.0.0.1");
    cr_assert_eq(conn_slot_begin(ct, s[0], false), CONN_FULL, "three open, two allowed");
    cr_assert_eq(conn_slot_begin(ct, s[1], true), CONN_OK, "/health and /metrics pass");
    conn_close(ct, s[2]);
    cr_assert_eq(conn_slot_begin(ct, s[0], false), CONN_OK, "two open: within the limit again");
    conn_close(ct, s[0]), conn_close(ct, s[1]);
    conn_tracker_destroy(ct);
    for (int i = 0; i < 3; i++) pair_close(p[i]);
}

Test(conn, one_address_holds_at_most_per_address_places_until_one_closes) {
    conn_tracker *ct = tracker(16, 2);
    pair p[4];
    conn_slot *s[4];
    for (int i = 0; i < 3; i++) p[i] = pair_open(), s[i] = conn_open(ct, p[i].ours, "10.0.0.1");
    p[3] = pair_open(), s[3] = conn_open(ct, p[3].ours, "10.0.0.2");
    /* the order requests arrive in decides, not the order connections opened */
    cr_assert_eq(conn_slot_begin(ct, s[2], false), CONN_OK);
    cr_assert_eq(conn_slot_begin(ct, s[0], false), CONN_OK);
    cr_assert_eq(conn_slot_begin(ct, s[1], false), CONN_ADDRESS_FULL, "the third from one address");
    cr_assert_eq(conn_slot_begin(ct, s[3], false), CONN_OK, "another address is not affected");
    cr_assert_eq(conn_slot_begin(ct, s[0], false), CONN_OK, "a keep-alive request keeps its place");
    cr_assert_eq(conn_slot_begin(ct, s[1], true), CONN_OK, "reserved routes pass the cap too");
    conn_close(ct, s[2]);
    cr_assert_eq(conn_slot_begin(ct, s[1], false), CONN_OK, "a closed connection frees its place");
    conn_close(ct, s[0]), conn_close(ct, s[1]), conn_close(ct, s[3]);
    conn_tracker_destroy(ct);
    for (int i = 0; i < 4; i++) pair_close(p[i]);
}

Test(conn, a_connection_from_an_address_at_its_cap_has_one_second_for_its_headers) {
    conn_tracker *ct = tracker(16, 1);
    pair a = pair_open(), b = pair_open();
    conn_slot *sa = conn_open(ct, a.ours, "::1");
    cr_assert_eq(conn_slot_begin(ct, sa, false), CONN_OK);
    conn_slot_body_done(ct, sa);
    double t0 = attnd_now_s();
    conn_slot *sb = conn_open(ct, b.ours, "::1");
    /* the watchdog may have been first (a busy machine): either way b is shut within 2 s */
    cr_assert_leq(conn_tracker_sweep(ct, t0 + 2), 1);
    cr_assert(was_shut(b), "shut after a second, not after header_timeout_s (60)");
    cr_assert_not(was_shut(a));
    conn_close(ct, sa), conn_close(ct, sb);
    conn_tracker_destroy(ct);
    pair_close(a), pair_close(b);
}

Test(conn, limits_below_one_are_raised_and_per_address_defaults_to_half) {
    conn_limits lim = {0};
    conn_tracker *ct;
    attnd_err err;
    cr_assert_eq(conn_tracker_create(&ct, &lim, &err), ATTND_OK, "%s", err.msg);
    conn_slot *s = conn_open(ct, -1, "10.0.0.1");
    cr_assert_eq(conn_slot_begin(ct, s, false), CONN_OK, "max_connections raised to 1, per_address to 1");
    conn_slot *t = conn_open(ct, -1, "10.0.0.2");
    cr_assert_eq(conn_slot_begin(ct, t, false), CONN_FULL, "two open past a limit of one");
    conn_close(ct, s), conn_close(ct, t);
    conn_tracker_destroy(ct);

    lim = (conn_limits){.max_connections = 6, .header_timeout_s = 60, .body_timeout_s = 60};
    cr_assert_eq(conn_tracker_create(&ct, &lim, &err), ATTND_OK, "%s", err.msg);
    conn_slot *c[4];
    for (int i = 0; i < 4; i++) c[i] = conn_open(ct, -1, "10.0.0.3");
    for (int i = 0; i < 3; i++) cr_assert_eq(conn_slot_begin(ct, c[i], false), CONN_OK, "place %d of 3", i + 1);
    cr_assert_eq(conn_slot_begin(ct, c[3], false), CONN_ADDRESS_FULL, "half of 6");
    for (int i = 0; i < 4; i++) conn_close(ct, c[i]);
    conn_tracker_destroy(ct);
}

Test(conn, untracked_connections_and_null_are_accepted) {
    conn_tracker *ct = tracker(1, 1);
    cr_assert_eq(conn_slot_begin(ct, NULL, false), CONN_OK, "no slot: nothing to count against");
    conn_slot_body_done(ct, NULL);
    conn_slot_end(ct, NULL);
    conn_close(ct, conn_open(ct, -1, "10.0.0.1"));
    char addr[CONN_ADDR_MAX];
    conn_client_address(NULL, addr, sizeof(addr));
    cr_assert_str_eq(addr, "?");
    conn_tracker_destroy(ct);
    conn_tracker_destroy(NULL);
}

// ---- framing: what libmicrohttpd lets through ---------------------------------------------------

typedef struct hdr {
    const char *key, *value;
    size_t vl; /* the value's bytes (a NUL may be one of them) */
} hdr;
#define H(k, v) {k, v, sizeof(v) - 1}

/* The verdict on one request's headers (up to 4). */
static int framing_of(const hdr *h, char *why, size_t cap) {
    conn_framing f = {0};
    for (int i = 0; i < 4 && h[i].key; i++)
        conn_framing_header(&f, h[i].key, strlen(h[i].key), h[i].value, h[i].vl);
    conn_framing_end(&f);
    snprintf(why, cap, "%s", f.why);
    return f.status;
}

Test(conn, framing_refuses_transfer_codings_but_chunked_and_ambiguous_headers) {
    static const struct {
        hdr h[4];
        int want;
    } C[] = {
        {{H("Host", "a"), H("Transfer-Encoding", "chunked")}, 0},
        {{H("Host", "a"), H("transfer-encoding", "Chunked")}, 0},
        {{H("Host", "a"), H("Content-Length", "12"), H("Content-Length", "12")}, 0},
        {{H("Host", "a"), H("X-Tab", "a\tb")}, 0},
        {{H("Transfer-Encoding", "chunked, identity")}, 400},
        {{H("Transfer-Encoding", "chunked"), H("Transfer-Encoding", "identity")}, 400},
        {{H("Transfer-Encoding", "chunked"), H("Transfer-Encoding", "chunked")}, 400},
        {{H("Transfer-Encoding", "identity")}, 400},
        {{H("Transfer-Encoding", "gzip")}, 400},
        {{H("Transfer-Encoding", "chunked ")}, 400},
        {{H("Transfer-Encoding", "")}, 400},
        {{H("Transfer-Encoding", "gzip, chunked")}, 501},
        {{H("Transfer-Encoding", "chunked"), H("Content-Length", "5")}, 400},
        {{H("Content-Length", "5"), H("Content-Length", "6")}, 400},
        {{H("Transfer-Encoding ", "chunked")}, 400},
        {{H("X-Foo\t", "a")}, 400},
        {{H("X(Foo)", "a")}, 400},
        {{H("Host", "a"), H("Host", "b")}, 400},
        {{H("Host", "a"), H("host", "a")}, 400},
        {{H("X-Foo", "a\x01" "b")}, 400},
        {{H("X-Foo", "a\x7f")}, 400},
        {{H("X-Foo", "a\rb")}, 400},
        {{H("X-Foo", "a\0b")}, 400},
    };
    for (size_t k = 0; k < sizeof(C) / sizeof(*C); k++) {
        char why[160];
        int got = framing_of(C[k].h, why, sizeof(why));
        cr_assert_eq(got, C[k].want, "case %zu (%s: %s): %d, want %d (%s)", k, C[k].h[0].key, C[k].h[0].value, got,
                     C[k].want, why);
        cr_assert(got == 0 || why[0], "case %zu: a refusal says why", k);
    }
}

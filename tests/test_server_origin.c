/*
 * test_server_origin.c — the Origin and Host rules (server/api/origin.c) against cross-site
 * requests and DNS rebinding.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "origin.h"

Test(origin, loopback_binds_are_recognised) {
    cr_expect(origin_bind_is_loopback("127.0.0.1"));
    cr_expect(origin_bind_is_loopback("127.1.2.3"));
    cr_expect(origin_bind_is_loopback("::1"));
    cr_expect(origin_bind_is_loopback("localhost"));
    cr_expect(!origin_bind_is_loopback("0.0.0.0"));
    cr_expect(!origin_bind_is_loopback("::"));
    cr_expect(!origin_bind_is_loopback("192.168.1.5"));
}

Test(origin, host_must_name_loopback_or_be_allowed) {
    const char *ok[] = {"127.0.0.1:8080", "127.0.0.1", "localhost:8080", "LOCALHOST", "localhost.", "app.localhost:1",
                        "[::1]:8080", "[::1]", NULL};
    for (int i = 0; ok[i]; i++) cr_expect(origin_host_ok(ok[i], NULL), "%s refused", ok[i]);
    cr_expect(origin_host_ok(NULL, NULL), "no Host (HTTP/1.0) passes");
    const char *no[] = {"evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.evil.example",
                        "192.168.1.5:8080", "[::2]:80", "", NULL};
    for (int i = 0; no[i]; i++) cr_expect(!origin_host_ok(no[i], NULL), "%s accepted", no[i]);
    cr_expect(origin_host_ok("Box.LAN:8080", "tunnel.example, box.lan"));
    cr_expect(!origin_host_ok("box.lan.evil:8080", "tunnel.example, box.lan"));
    cr_expect(!origin_host_ok("evil.example", "*"), "'*' is not a wildcard for hosts");
}

Test(origin, foreign_origins_are_refused_unless_listed) {
    cr_expect(origin_request_ok(NULL, "127.0.0.1:8080", NULL), "curl sends no Origin");
    cr_expect(origin_request_ok("http://127.0.0.1:8080", "127.0.0.1:8080", NULL), "the server's own page");
    cr_expect(origin_request_ok("https://api.example", "api.example", NULL), "its own page behind a TLS proxy");
    cr_expect(!origin_request_ok("https://evil.example", "127.0.0.1:8080", NULL));
    cr_expect(!origin_request_ok("null", "127.0.0.1:8080", NULL), "sandboxed frames and file:// pages");
    cr_expect(!origin_request_ok("http://127.0.0.1:9999", "127.0.0.1:8080", NULL), "another local port");
    cr_expect(origin_request_ok("http://app.example", "127.0.0.1:8080", "http://app.example, http://b.example"));
    cr_expect(!origin_request_ok("http://app.example.evil", "127.0.0.1:8080", "http://app.example"));
    cr_expect(origin_request_ok("https://anything.example", "x", "*"));
}

Test(origin, lists_match_whole_entries) {
    const char *l = " a.example , b.example,,c";
    cr_expect(origin_list_has(l, "a.example", 9, false));
    cr_expect(origin_list_has(l, "c", 1, false));
    cr_expect(!origin_list_has(l, "a.exam", 6, false));
    cr_expect(!origin_list_has(l, "", 0, false));
    cr_expect(!origin_list_has(NULL, "a", 1, true));
    cr_expect(origin_list_has("*", "a", 1, true));
    cr_expect(!origin_list_has("*", "a", 1, false));
}

/*
 * origin.c — Origin and Host checks against cross-site requests and DNS rebinding (see
 * origin.h).
 */
#include "origin.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

bool origin_list_has(const char *list, const char *item, size_t n, bool star_matches) {
    if (!list) return false;
    if (star_matches && !strcmp(list, "*")) return true;
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        const char *t = e;
        while (t > p && t[-1] == ' ') t--;
        if ((size_t)(t - p) == n && n && !strncmp(p, item, n)) return true;
        p = e;
    }
    return false;
}

/* Is the address literal or name s (n bytes, no port, no brackets) the loopback interface? */
static bool is_loopback_name(const char *s, size_t n) {
    char buf[256];
    if (n == 0 || n >= sizeof(buf)) return false;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (buf[n - 1] == '.') buf[--n] = '\0'; /* "localhost." is the same name */
    if (!strcasecmp(buf, "localhost") || (n > 10 && !strcasecmp(buf + n - 10, ".localhost"))) return true;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, buf, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, buf, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return false;
}

bool origin_bind_is_loopback(const char *bind_host) {
    return bind_host && is_loopback_name(bind_host, strlen(bind_host));
}

/* The host part of a Host header value: brackets and ":port" removed. */
static void host_name(const char *host, const char **p, size_t *n) {
    if (host[0] == '[') {
        const char *e = strchr(host, ']');
        *p = host + 1;
        *n = e ? (size_t)(e - host - 1) : 0;
        return;
    }
    const char *c = strchr(host, ':');
    *p = host;
    *n = c && !strchr(c + 1, ':') ? (size_t)(c - host) : strlen(host);
}

bool origin_host_ok(const char *host, const char *allowed_hosts) {
    if (!host) return true;
    const char *p;
    size_t n;
    host_name(host, &p, &n);
    if (is_loopback_name(p, n)) return true;
    if (!allowed_hosts) return false;
    /* names compare case-insensitively: lower-case a copy, the list is matched the same way */
    char name[256], list[1024];
    if (n >= sizeof(name) || strlen(allowed_hosts) >= sizeof(list)) return false;
    for (size_t i = 0; i < n; i++) name[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
    size_t k = 0;
    for (const char *q = allowed_hosts; *q; q++) list[k++] = (char)(*q >= 'A' && *q <= 'Z' ? *q + 32 : *q);
    list[k] = '\0';
    return origin_list_has(list, name, n, false);
}

bool origin_request_ok(const char *origin, const char *host, const char *cors) {
    if (!origin) return true;
    if (host) { /* same origin: the page came from this very host (http, or https via a proxy) */
        const char *h = !strncmp(origin, "http://", 7) ? origin + 7 : !strncmp(origin, "https://", 8) ? origin + 8 : NULL;
        if (h && !strcmp(h, host)) return true;
    }
    return origin_list_has(cors, origin, strlen(origin), true);
}

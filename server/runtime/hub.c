/*
 * hub.c — resolving and downloading models from the Hugging Face Hub (see hub.h): the Hub's
 * JSON API through libcurl and jansson, resumable downloads, and SHA-256 (FIPS 180-4) to check
 * what arrived.
 */
#include "hub.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnd/buf.h"

#define HUB_DEFAULT_ENDPOINT "https://huggingface.co"
#define HUB_MAX_FILES 20000

// ---- SHA-256 ----------------------------------------------------------------------------------

typedef struct sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t blk[64];
    size_t n;
} sha256;

static const uint32_t SHA_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return x >> n | x << (32 - n); }

static void sha_block(sha256 *s, const uint8_t *p) {
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | p[4 * i + 1] << 16 | p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ w[i - 15] >> 3;
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ w[i - 2] >> 10;
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(v, s->h, sizeof(v));
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = v[7] + (ror(v[4], 6) ^ ror(v[4], 11) ^ ror(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6])) +
                      SHA_K[i] + w[i];
        uint32_t t2 = (ror(v[0], 2) ^ ror(v[0], 13) ^ ror(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof(uint32_t));
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) s->h[i] += v[i];
}

static void sha_init(sha256 *s) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memset(s, 0, sizeof(*s));
    memcpy(s->h, H0, sizeof(H0));
}

static void sha_update(sha256 *s, const uint8_t *p, size_t n) {
    s->len += n;
    while (n) {
        size_t k = 64 - s->n < n ? 64 - s->n : n;
        memcpy(s->blk + s->n, p, k);
        s->n += k, p += k, n -= k;
        if (s->n == 64) sha_block(s, s->blk), s->n = 0;
    }
}

/* The digest as 64 lower-case hex digits. */
static void sha_final(sha256 *s, char hex[65]) {
    uint64_t bits = s->len * 8;
    uint8_t pad = 0x80, zero = 0, len[8];
    sha_update(s, &pad, 1);
    while (s->n != 56) sha_update(s, &zero, 1);
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha_update(s, len, 8);
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", s->h[i]);
}

static attnd_status sha_file(const char *path, char hex[65], attnd_err *err) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", path, strerror(errno));
    sha256 s;
    sha_init(&s);
    uint8_t buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), fp)) > 0) sha_update(&s, buf, n);
    bool bad = ferror(fp);
    fclose(fp);
    if (bad) return attnd_fail(err, ATTND_ERR_IO, "%s: read failed", path);
    sha_final(&s, hex);
    return ATTND_OK;
}

// ---- names and paths ----------------------------------------------------------------------------

static bool name_char(char c) { return isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-'; }

/* A path inside a repository: components of [A-Za-z0-9._-+ ], none empty or starting with '.'
 * (so no "." or "..", and no hidden file). */
static bool safe_repo_path(const char *p) {
    if (!*p || *p == '/' || strlen(p) > 512) return false;
    for (const char *c = p; *c;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0 || c[0] == '.') return false;
        for (size_t i = 0; i < n; i++)
            if (!name_char(c[i]) && c[i] != '+' && c[i] != ' ') return false;
        c += n + (e != NULL);
        if (e && !*c) return false;
    }
    return true;
}

/* One part of a repository id as the Hub allows it: 1..96 of [A-Za-z0-9._-], not starting or
 * ending with '.' or '-', no ".." or "--". */
static bool repo_part_ok(const char *p, size_t n) {
    if (n == 0 || n > 96 || strchr(".-", p[0]) || strchr(".-", p[n - 1])) return false;
    for (size_t i = 0; i < n; i++)
        if (!name_char(p[i]) || (i && p[i] == p[i - 1] && (p[i] == '.' || p[i] == '-'))) return false;
    return true;
}

attnd_status hub_parse_ref(const char *s, hub_ref *out, attnd_err *err) {
    memset(out, 0, sizeof(*out));
    if (!strncmp(s, "hf://", 5)) s += 5;
    const char *colon = strchr(s, ':'), *slash = strchr(s, '/');
    size_t rl = colon ? (size_t)(colon - s) : strlen(s);
    bool ok = slash && slash < s + rl && repo_part_ok(s, (size_t)(slash - s)) &&
              repo_part_ok(slash + 1, (size_t)(s + rl - slash - 1)) && (!colon || strlen(colon + 1) < sizeof(out->tag));
    for (const char *t = colon ? colon + 1 : ""; ok && *t; t++) ok = name_char(*t);
    if (!ok || (colon && !colon[1]))
        return attnd_fail(err, ATTND_ERR_INVALID, "'%.200s' is not a Hub model reference: expected org/repo or "
                          "org/repo:QUANT (letters, digits, '.', '_', '-')", s);
    memcpy(out->repo, s, rl);
    if (colon) strcpy(out->tag, colon + 1);
    return ATTND_OK;
}

attnd_status hub_cache_dir(char *out, size_t cap, attnd_err *err) {
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = x && *x == '/' ? snprintf(out, cap, "%s/attnd/models", x)
            : home && *home ? snprintf(out, cap, "%s/.cache/attnd/models", home) : -1;
    if (n < 0) return attnd_fail(err, ATTND_ERR_INVALID, "no cache directory: set XDG_CACHE_HOME or HOME");
    return n < (int)cap ? ATTND_OK : attnd_fail(err, ATTND_ERR_INVALID, "cache directory path too long");
}

/* mkdir -p of the directories above path (not path itself). */
static attnd_status make_parents(const char *path, attnd_err *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp))
        return attnd_fail(err, ATTND_ERR_INVALID, "path too long");
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", tmp, strerror(errno));
        *p = '/';
    }
    return ATTND_OK;
}

static uint64_t file_bytes(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

// ---- the Hub's API --------------------------------------------------------------------------------

typedef struct hub_ctx {
    const hub_opts *o;
    char endpoint[1024];
    const char *token;
    char cache[2048];
} hub_ctx;

static attnd_status ctx_init(hub_ctx *c, const hub_opts *o, attnd_err *err) {
    static const hub_opts none = {0};
    c->o = o ? o : &none;
    const char *e = c->o->endpoint ? c->o->endpoint : getenv("HF_ENDPOINT");
    if (!e || !*e) e = HUB_DEFAULT_ENDPOINT;
    size_t n = strlen(e);
    while (n && e[n - 1] == '/') n--;
    if (n >= sizeof(c->endpoint)) return attnd_fail(err, ATTND_ERR_INVALID, "HF_ENDPOINT too long");
    memcpy(c->endpoint, e, n);
    c->endpoint[n] = '\0';
    c->token = c->o->token ? c->o->token : getenv("HF_TOKEN");
    if (c->token && !*c->token) c->token = NULL;
    if (c->o->cache_dir) {
        if (snprintf(c->cache, sizeof(c->cache), "%s", c->o->cache_dir) >= (int)sizeof(c->cache))
            return attnd_fail(err, ATTND_ERR_INVALID, "cache directory path too long");
        return ATTND_OK;
    }
    return hub_cache_dir(c->cache, sizeof(c->cache), err);
}

/* A libcurl handle with the request's common settings (auth header in *hdr, to free). */
static CURL *curl_for(const hub_ctx *c, const char *url, struct curl_slist **hdr) {
    static bool ready;
    if (!ready) ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
    CURL *h = ready ? curl_easy_init() : NULL;
    if (!h) return NULL;
    *hdr = NULL;
    if (c->token) {
        char auth[1100];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %.1000s", c->token);
        *hdr = curl_slist_append(*hdr, auth); /* libcurl does not send it on to another host */
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdr);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "attnd");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stalled transfer ends after 60 s */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    return h;
}

/* Runs the request h, then frees it and its headers; *status: the HTTP status (0 when none came). */
static CURLcode perform_and_free(CURL *h, struct curl_slist *hdr, long *status) {
    CURLcode rc = curl_easy_perform(h);
    *status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    return rc;
}

/* The message for a failed request of `what`. */
static attnd_status http_fail(attnd_err *err, const char *what, CURLcode rc, long status) {
    if (rc != CURLE_OK && status < 400)
        return attnd_fail(err, ATTND_ERR_IO, "%s: %s", what, curl_easy_strerror(rc));
    if (status == 401 || status == 403)
        return attnd_fail(err, ATTND_ERR_IO, "%s: HTTP %ld: the repository is gated or private; accept its terms on "
                          "the Hub and set HF_TOKEN to a token of yours", what, status);
    if (status == 404) return attnd_fail(err, ATTND_ERR_NOT_FOUND, "%s: HTTP 404: no such repository or file", what);
    return attnd_fail(err, ATTND_ERR_IO, "%s: HTTP %ld", what, status);
}

static size_t to_buf(char *p, size_t sz, size_t n, void *user) {
    buf *b = user;
    if (b->len + sz * n > (64u << 20)) return 0; /* an API answer, not a file: 64 MiB at most */
    return buf_append(b, p, sz * n) ? sz * n : 0;
}

/* GET url and parse its JSON body into *out (a new reference). */
static attnd_status api_get(const hub_ctx *c, const char *url, json_t **out, attnd_err *err) {
    struct curl_slist *hdr;
    CURL *h = curl_for(c, url, &hdr);
    if (!h) return attnd_fail(err, ATTND_ERR_NOMEM, "cannot start libcurl");
    buf b = {0};
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, to_buf);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    long status;
    CURLcode rc = perform_and_free(h, hdr, &status);
    attnd_status st = ATTND_OK;
    if (rc != CURLE_OK || status != 200) st = http_fail(err, url, rc, status);
    json_error_t je;
    if (!st && !(*out = json_loadb(b.p ? b.p : "", b.len, 0, &je)))
        st = attnd_fail(err, ATTND_ERR_FORMAT, "%s: the answer is not JSON: %s", url, je.text);
    buf_free(&b);
    return st;
}

/* One file of a repository, as the tree lists it. */
typedef struct hub_file {
    char *path;
    uint64_t size;
    char sha[65]; /* the LFS object's sha256; "" when the Hub lists none */
} hub_file;

typedef struct hub_listing {
    char commit[96];
    hub_file *files;
    size_t n;
} hub_listing;

static void listing_free(hub_listing *l) {
    for (size_t i = 0; i < l->n; i++) free(l->files[i].path);
    free(l->files);
    memset(l, 0, sizeof(*l));
}

/* The main branch's commit (or the first branch's) from GET .../refs. */
static attnd_status repo_commit(const hub_ctx *c, const char *repo, char *commit, size_t cap, attnd_err *err) {
    char url[2048];
    snprintf(url, sizeof(url), "%s/api/models/%s/refs", c->endpoint, repo);
    json_t *j;
    attnd_status st = api_get(c, url, &j, err);
    if (st) return st;
    json_t *br = json_object_get(j, "branches"), *v;
    size_t i;
    const char *pick = NULL;
    json_array_foreach(br, i, v) {
        const char *name = json_string_value(json_object_get(v, "name"));
        const char *sha = json_string_value(json_object_get(v, "targetCommit"));
        bool ok = name && sha && strlen(sha) < cap && strlen(sha) >= 7;
        for (const char *p = sha; ok && *p; p++) ok = isxdigit((unsigned char)*p);
        if (ok && (!pick || !strcmp(name, "main"))) pick = sha;
        if (ok && !strcmp(name, "main")) break;
    }
    if (pick) strcpy(commit, pick);
    json_decref(j);
    return pick ? ATTND_OK : attnd_fail(err, ATTND_ERR_FORMAT, "%s: no branch with a commit", url);
}

static attnd_status add_file(hub_listing *l, json_t *item) {
    const char *type = json_string_value(json_object_get(item, "type"));
    const char *path = json_string_value(json_object_get(item, "path"));
    if (!type || strcmp(type, "file") || !path || !safe_repo_path(path) || l->n >= HUB_MAX_FILES) return ATTND_OK;
    hub_file *f = realloc(l->files, sizeof(*f) * (l->n + 1));
    if (!f) return ATTND_ERR_NOMEM;
    l->files = f;
    f = &l->files[l->n];
    memset(f, 0, sizeof(*f));
    if (!(f->path = strdup(path))) return ATTND_ERR_NOMEM;
    json_t *lfs = json_object_get(item, "lfs");
    json_int_t size = json_integer_value(json_object_get(lfs ? lfs : item, "size"));
    f->size = size > 0 ? (uint64_t)size : 0;
    const char *oid = json_string_value(json_object_get(lfs, "oid"));
    bool hex = oid && strlen(oid) == 64;
    for (const char *p = oid; hex && *p; p++) hex = isxdigit((unsigned char)*p);
    if (hex)
        for (int i = 0; i < 64; i++) f->sha[i] = (char)tolower((unsigned char)oid[i]);
    l->n++;
    return ATTND_OK;
}

static attnd_status list_repo(const hub_ctx *c, const char *repo, hub_listing *l, attnd_err *err) {
    memset(l, 0, sizeof(*l));
    attnd_status st = repo_commit(c, repo, l->commit, sizeof(l->commit), err);
    if (st) return st;
    char url[2048];
    snprintf(url, sizeof(url), "%s/api/models/%s/tree/%s?recursive=true", c->endpoint, repo, l->commit);
    json_t *j, *v;
    if ((st = api_get(c, url, &j, err))) return st;
    if (!json_is_array(j)) st = attnd_fail(err, ATTND_ERR_FORMAT, "%s: expected a list of files", url);
    size_t i;
    json_array_foreach(j, i, v) if (!st && add_file(l, v)) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    json_decref(j);
    if (st) listing_free(l);
    return st;
}

// ---- which file a tag names -------------------------------------------------------------------------

static bool ends_with(const char *s, const char *t) {
    size_t a = strlen(s), b = strlen(t);
    return a >= b && !strcmp(s + a - b, t);
}

/* A GGUF of model weights: not a projector, importance matrix or draft head. */
static bool is_model_file(const char *path) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    static const char *const NOT[] = {"mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"};
    if (!ends_with(path, ".gguf")) return false;
    for (size_t i = 0; i < sizeof(NOT) / sizeof(NOT[0]); i++)
        if (strstr(base, NOT[i])) return false;
    return true;
}

/* The split position of a file named ...-KKKKK-of-NNNNN.gguf (*k, *n 1-based), else 1 of 1. */
static void split_of(const char *path, int *k, int *n) {
    size_t l = strlen(path);
    *k = *n = 1;
    if (l < 20 || strcmp(path + l - 5, ".gguf")) return;
    const char *p = path + l - 20; /* "-00001-of-00003.gguf" */
    int a, b;
    if (p[0] == '-' && !strncmp(p + 6, "-of-", 4) && sscanf(p + 1, "%5d", &a) == 1 && sscanf(p + 10, "%5d", &b) == 1 &&
        a >= 1 && b >= a)
        *k = a, *n = b;
}

/* Whether path holds tag followed by '.' or '-', case-insensitive. */
static bool has_tag(const char *path, const char *tag) {
    size_t t = strlen(tag);
    for (const char *p = path; *p; p++)
        if (!strncasecmp(p, tag, t) && (p[t] == '.' || p[t] == '-')) return true;
    return false;
}

static const hub_file *pick_file(const hub_listing *l, const char *tag) {
    static const char *const DEFAULTS[] = {"Q4_K_M", "Q8_0"};
    const char *const *tags = *tag ? &tag : DEFAULTS;
    size_t n_tags = *tag ? 1 : 2;
    for (size_t t = 0; t <= n_tags; t++)
        for (size_t i = 0; i < l->n; i++) {
            int k, n;
            split_of(l->files[i].path, &k, &n);
            if (!is_model_file(l->files[i].path) || k != 1) continue;
            if (t < n_tags ? has_tag(l->files[i].path, tags[t]) : !*tag) return &l->files[i];
        }
    return NULL;
}

static attnd_status no_such_tag(const hub_listing *l, const hub_ref *r, attnd_err *err) {
    char names[1500] = "";
    size_t used = 0, shown = 0;
    for (size_t i = 0; i < l->n && used + 2 < sizeof(names); i++) {
        int k, n;
        split_of(l->files[i].path, &k, &n);
        if (!is_model_file(l->files[i].path) || k != 1) continue;
        int w = snprintf(names + used, sizeof(names) - used, "%s%s", shown++ ? ", " : "", l->files[i].path);
        if (w > 0) used += (size_t)w < sizeof(names) - used ? (size_t)w : sizeof(names) - used - 1;
    }
    return attnd_fail(err, ATTND_ERR_NOT_FOUND, "%s has no GGUF model file%s%s%s (its GGUF files: %s)", r->repo,
                      *r->tag ? " for tag '" : "", r->tag, *r->tag ? "'" : "", shown ? names : "none");
}

attnd_status hub_pick_from_tree(const char *json, size_t len, const char *tag, char *out, size_t cap, attnd_err *err) {
    hub_listing l = {0};
    json_error_t je;
    json_t *j = json_loadb(json, len, 0, &je), *v;
    if (!json_is_array(j)) {
        json_decref(j);
        return attnd_fail(err, ATTND_ERR_FORMAT, "expected a list of files");
    }
    attnd_status st = ATTND_OK;
    size_t i;
    json_array_foreach(j, i, v) if (!st && add_file(&l, v)) st = attnd_fail(err, ATTND_ERR_NOMEM, "out of memory");
    json_decref(j);
    hub_ref r = {.repo = "org/repo"};
    snprintf(r.tag, sizeof(r.tag), "%s", tag);
    const hub_file *f = st ? NULL : pick_file(&l, r.tag);
    if (!st && !f) st = no_such_tag(&l, &r, err);
    if (f && snprintf(out, cap, "%s", f->path) >= (int)cap) st = attnd_fail(err, ATTND_ERR_INVALID, "path too long");
    listing_free(&l);
    return st;
}

// ---- downloading ----------------------------------------------------------------------------------

typedef struct dl {
    FILE *fp;
    const hub_ctx *c;
    const char *name;
    uint64_t have, total;
    bool write_failed;
} dl;

static size_t to_file(char *p, size_t sz, size_t n, void *user) {
    dl *d = user;
    if (fwrite(p, sz, n, d->fp) != n) {
        d->write_failed = true;
        return 0;
    }
    return sz * n;
}

static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ut, curl_off_t un) {
    (void)ut, (void)un;
    dl *d = user;
    uint64_t total = d->total ? d->total : dltotal > 0 ? d->have + (uint64_t)dltotal : 0;
    if (d->c->o->progress) d->c->o->progress(d->c->o->user, d->name, d->have + (uint64_t)dlnow, total);
    return 0;
}

/* One attempt at the rest of `part` (resuming at its size); *again when a failure is one the next
 * attempt may get past (the transfer was cut or stalled, or the server would not resume). */
static attnd_status fetch_once(const hub_ctx *c, const char *url, const char *part, const hub_file *f, bool *again,
                               attnd_err *err) {
    *again = false;
    dl d = {.c = c, .name = f->path, .have = file_bytes(part), .total = f->size};
    if (!(d.fp = fopen(part, "ab"))) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", part, strerror(errno));
    struct curl_slist *hdr;
    CURL *h = curl_for(c, url, &hdr);
    if (!h) {
        fclose(d.fp);
        return attnd_fail(err, ATTND_ERR_NOMEM, "cannot start libcurl");
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, to_file);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &d);
    curl_easy_setopt(h, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)d.have);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &d);
    long status;
    CURLcode rc = perform_and_free(h, hdr, &status);
    bool closed = fclose(d.fp) == 0;
    if (d.write_failed || !closed) return attnd_fail(err, ATTND_ERR_IO, "%s: write failed", part);
    if (rc == CURLE_OK && (status == 200 || status == 206)) return ATTND_OK;
    if (rc == CURLE_RANGE_ERROR || status == 416) { /* the server will not resume: start again */
        if (truncate(part, 0) != 0) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", part, strerror(errno));
        *again = true;
        return attnd_fail(err, ATTND_ERR_IO, "%s: the server refused to resume", f->path);
    }
    *again = status < 400; /* cut or stalled: the next try resumes */
    return http_fail(err, url, rc, status);
}

/* Downloads f of the listing into the cache (skipped when it is there) and verifies it. */
static attnd_status fetch_file(const hub_ctx *c, const hub_ref *r, const hub_listing *l, const hub_file *f,
                               char *final, size_t cap, attnd_err *err) {
    if (snprintf(final, cap, "%s/%s/%s", c->cache, r->repo, f->path) >= (int)cap)
        return attnd_fail(err, ATTND_ERR_INVALID, "path too long");
    if (file_exists(final) && (!f->size || file_bytes(final) == f->size)) return ATTND_OK; /* verified before */
    char part[4200], url[4200];
    snprintf(part, sizeof(part), "%s.part", final);
    snprintf(url, sizeof(url), "%s/%s/resolve/%s/%s", c->endpoint, r->repo, l->commit, f->path);
    attnd_status st = make_parents(final, err);
    bool again = true;
    for (int t = 0; !st && again && t < HUB_TRIES && !(f->size && file_bytes(part) >= f->size); t++) {
        st = fetch_once(c, url, part, f, &again, err);
        if (st && again && t + 1 < HUB_TRIES) st = ATTND_OK; /* resume */
        else if (!st) again = false;
    }
    if (st && again)
        return attnd_fail(err, ATTND_ERR_IO, "%s: the download stopped %d times (%llu of %llu bytes kept in %s); "
                          "pull again to resume", f->path, HUB_TRIES, (unsigned long long)file_bytes(part),
                          (unsigned long long)f->size, part);
    if (st) return st;
    if (f->size && file_bytes(part) != f->size)
        return attnd_fail(err, ATTND_ERR_IO, "%s: %llu bytes arrived, the Hub lists %llu", f->path,
                          (unsigned long long)file_bytes(part), (unsigned long long)f->size);
    char got[65];
    if (*f->sha && (st = sha_file(part, got, err))) return st;
    if (*f->sha && strcmp(got, f->sha)) {
        char bad[4200];
        snprintf(bad, sizeof(bad), "%s.bad", final);
        if (rename(part, bad) != 0) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", bad, strerror(errno));
        return attnd_fail(err, ATTND_ERR_FORMAT, "%s: sha256 %s, but the Hub lists %s; the file is kept aside as %s",
                          f->path, got, f->sha, bad);
    }
    if (rename(part, final) != 0) return attnd_fail(err, ATTND_ERR_IO, "%s: %s", final, strerror(errno));
    return ATTND_OK;
}

/* The note that lets hub_cached find ref's file offline: .tags/<tag or "default"> -> path. */
static attnd_status tag_note_path(const hub_ctx *c, const hub_ref *r, char *out, size_t cap, attnd_err *err) {
    if (snprintf(out, cap, "%s/%s/.tags/%s", c->cache, r->repo, *r->tag ? r->tag : "default") >= (int)cap)
        return attnd_fail(err, ATTND_ERR_INVALID, "path too long");
    return ATTND_OK;
}

attnd_status hub_pull(const char *ref, const hub_opts *o, char *path, size_t cap, attnd_err *err) {
    hub_ref r;
    hub_ctx c;
    hub_listing l;
    attnd_status st;
    if ((st = hub_parse_ref(ref, &r, err)) || (st = ctx_init(&c, o, err)) || (st = list_repo(&c, r.repo, &l, err)))
        return st;
    const hub_file *first = pick_file(&l, r.tag);
    if (!first) {
        st = no_such_tag(&l, &r, err);
        listing_free(&l);
        return st;
    }
    int k, n;
    split_of(first->path, &k, &n);
    size_t stem = strlen(first->path) - (n > 1 ? strlen("-00001-of-00003.gguf") : 0);
    for (int part = 1; !st && part <= n; part++) { /* a split set: every file of it */
        char want[600], local[4096];
        snprintf(want, sizeof(want), "%.*s-%05d-of-%05d.gguf", (int)stem, first->path, part, n);
        const hub_file *f = n == 1 ? first : NULL;
        for (size_t i = 0; !f && i < l.n; i++)
            if (!strcmp(l.files[i].path, want)) f = &l.files[i];
        if (!f) st = attnd_fail(err, ATTND_ERR_NOT_FOUND, "%s: file %s of the split set is missing", r.repo, want);
        else st = fetch_file(&c, &r, &l, f, local, sizeof(local), err);
        if (!st && part == 1 && snprintf(path, cap, "%s", local) >= (int)cap)
            st = attnd_fail(err, ATTND_ERR_INVALID, "path too long");
    }
    listing_free(&l);
    char note[4200];
    if (st || (st = tag_note_path(&c, &r, note, sizeof(note), err)) || (st = make_parents(note, err))) return st;
    FILE *fp = fopen(note, "w");
    if (!fp || fprintf(fp, "%s\n", path) < 0 || fclose(fp) != 0)
        return attnd_fail(err, ATTND_ERR_IO, "%s: cannot write", note);
    return ATTND_OK;
}

attnd_status hub_cached(const char *ref, const hub_opts *o, char *path, size_t cap, attnd_err *err) {
    hub_ref r;
    hub_ctx c;
    attnd_status st;
    char note[4200];
    if ((st = hub_parse_ref(ref, &r, err)) || (st = ctx_init(&c, o, err)) ||
        (st = tag_note_path(&c, &r, note, sizeof(note), err)))
        return st;
    FILE *fp = fopen(note, "r");
    bool ok = fp && fgets(path, (int)cap, fp);
    if (fp) fclose(fp);
    if (ok) path[strcspn(path, "\n")] = '\0';
    if (!ok || !file_exists(path))
        return attnd_fail(err, ATTND_ERR_NOT_FOUND, "%s is not in the model cache %s: `attnd pull %s` first", ref,
                          c.cache, ref);
    return ATTND_OK;
}

/*
 * cmd_pull.c — the model cache: `attnd pull org/repo[:QUANT]` downloads a model from the
 * Hugging Face Hub (server/runtime/hub.c does the work), `attnd models` lists what is cached.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <stdlib.h>

#include "commands.h"
#include "http_client.h"
#include "../server/runtime/hub.h"

static const char *PULL_USAGE =
    "usage: attnd pull org/repo[:QUANT] [--cache-dir DIR] [--quiet]\n"
    "\n"
    "Downloads a GGUF model from the Hugging Face Hub into the model cache and prints its path.\n"
    "QUANT picks the file as llama-server's -hf does (Q4_K_M, IQ2_XXS, Q8_0...; none: Q4_K_M, then\n"
    "Q8_0, then the first model file); a split set comes whole. A cut download resumes where it\n"
    "stopped; every file is checked against the sha256 the Hub lists. Once pulled, the model\n"
    "loads offline as hf://org/repo:QUANT or by its path.\n"
    "  --cache-dir DIR   the cache (default $XDG_CACHE_HOME/attnd/models or ~/.cache/attnd/models)\n"
    "  --quiet           no progress line\n"
    "Environment: HF_TOKEN (gated and private repositories), HF_ENDPOINT (a mirror; default\n"
    "https://huggingface.co).\n";

typedef struct progress_line {
    bool on;
    double t0, last;
    char file[256];
} progress_line;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_progress(void *user, const char *file, uint64_t done, uint64_t total) {
    progress_line *p = user;
    double t = now_s();
    if (strcmp(p->file, file)) snprintf(p->file, sizeof(p->file), "%s", file), p->t0 = t, p->last = 0;
    if (!p->on || (t - p->last < 0.2 && done != total)) return;
    p->last = t;
    double mib = 1024.0 * 1024.0, rate = t > p->t0 ? (double)done / mib / (t - p->t0) : 0;
    if (total)
        fprintf(stderr, "\r%s  %3d%%  %.1f / %.1f MiB  %.1f MiB/s ", file, (int)(100.0 * (double)done / (double)total),
                (double)done / mib, (double)total / mib, rate);
    else
        fprintf(stderr, "\r%s  %.1f MiB  %.1f MiB/s ", file, (double)done / mib, rate);
}

int cmd_pull(int argc, char **argv) {
    const char *pos[1], *cache = NULL;
    bool quiet = false;
    cli_args args = {pos, 0, 1};
    const cli_opt opts[] = {CLI_OPT_STR("--cache-dir", &cache), CLI_OPT_SET("--quiet", &quiet), CLI_OPT_ARGS(&args)};
    if (!cli_parse_opts("pull", PULL_USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    if (args.n < 1) cli_usage_error("pull", "need a model reference, org/repo[:QUANT]");
    hub_ref ref;
    attnd_err err = {{0}};
    if (hub_parse_ref(pos[0], &ref, &err) != ATTND_OK) cli_usage_error("pull", "%s", err.msg);
    progress_line line = {.on = !quiet && isatty(2)};
    hub_opts o = {.cache_dir = cache, .progress = on_progress, .user = &line};
    char path[4096];
    attnd_status st = hub_pull(pos[0], &o, path, sizeof(path), &err);
    if (line.on && line.last > 0) fputc('\n', stderr);
    if (st != ATTND_OK) {
        fprintf(stderr, "attnd pull: %s\n", err.msg);
        return 1;
    }
    printf("%s\n", path);
    return 0;
}

// ---- attnd models ----------------------------------------------------------------------------------

static const char *MODELS_USAGE =
    "usage: attnd models [--cache-dir DIR] [--url http://HOST:PORT]\n"
    "\n"
    "Lists the models in the cache that `attnd pull` fills: one line per GGUF model (a split set\n"
    "once, by its first file), with its size and the hf:// reference that loads it.\n"
    "  --cache-dir DIR   the cache (default $XDG_CACHE_HOME/attnd/models or ~/.cache/attnd/models)\n"
    "  --url URL         instead, the models of a running `attnd serve` and their state (loaded,\n"
    "                    loading, unloaded, failed); $ATTND_API_KEY is sent when set\n";

/* GET /v1/models of the server at url, one line per model. */
static int list_served(const char *url) {
    char host[256], port[16] = "80";
    const char *h = !strncmp(url, "http://", 7) ? url + 7 : NULL;
    size_t hl = h ? strcspn(h, ":/") : 0;
    if (!h || hl == 0 || hl >= sizeof(host)) {
        fprintf(stderr, "attnd models: --url '%s' is not http://HOST:PORT\n", url);
        return 2;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    if (h[hl] == ':') snprintf(port, sizeof(port), "%.*s", (int)strcspn(h + hl + 1, "/"), h + hl + 1);
    char auth[600] = "";
    const char *key = getenv("ATTND_API_KEY");
    if (key && *key) snprintf(auth, sizeof(auth), "Authorization: Bearer %.500s\r\n", key);
    hclient c;
    attnd_err err = {{0}};
    buf all = {0}, line = {0};
    attnd_status st = hclient_request(&c, host, port, "GET", "/v1/models", auth, NULL, &err);
    while (st == ATTND_OK && hclient_line(&c, &line)) buf_append(&all, line.p ? line.p : "", line.len);
    int status = c.status;
    hclient_close(&c);
    json_t *root = all.p ? json_loads(all.p, 0, NULL) : NULL;
    json_t *data = json_object_get(root, "data");
    if (st != ATTND_OK || status != 200 || !json_is_array(data)) {
        fprintf(stderr, "attnd models: %s: %s\n", url, st != ATTND_OK ? err.msg : all.p ? all.p : "no answer");
        json_decref(root);
        buf_free(&all);
        buf_free(&line);
        return 1;
    }
    size_t i;
    json_t *m;
    json_array_foreach(data, i, m) {
        const char *state = json_string_value(json_object_get(json_object_get(m, "status"), "value"));
        json_int_t ctx = json_integer_value(json_object_get(m, "context_length"));
        printf("%-40s %-9s", json_string_value(json_object_get(m, "id")), state ? state : "loaded");
        if (json_object_get(m, "size")) printf(" %10.1f MiB", (double)json_integer_value(json_object_get(m, "size")) / 1048576.0);
        if (ctx) printf("  context %lld", (long long)ctx);
        printf("\n");
    }
    json_decref(root);
    buf_free(&all);
    buf_free(&line);
    return 0;
}

/* The bytes of a split set whose first file is path (NAME-00001-of-0000N.gguf), or path's. */
static uint64_t set_bytes(const char *path) {
    struct stat sb;
    uint64_t total = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    size_t l = strlen(path);
    int n;
    if (l > 20 && sscanf(path + l - 10, "%5d.gguf", &n) == 1 && !strncmp(path + l - 20, "-00001-of-", 10))
        for (int k = 2; k <= n; k++) {
            char p[4200];
            snprintf(p, sizeof(p), "%.*s-%05d-of-%05d.gguf", (int)(l - 20), path, k, n);
            if (stat(p, &sb) == 0) total += (uint64_t)sb.st_size;
        }
    return total;
}

/* Lists the model files under dir/rel (rel = "org/repo/..."). */
static int walk(const char *root, const char *rel, int depth) {
    char dir[4200];
    snprintf(dir, sizeof(dir), "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue; /* ., .., .tags */
        char sub[4200], path[8500];
        snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        snprintf(path, sizeof(path), "%s/%s", root, sub);
        struct stat sb;
        if (stat(path, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode) && depth < 8) {
            n += walk(root, sub, depth + 1);
            continue;
        }
        size_t l = strlen(sub);
        bool later_part = l > 20 && !strncmp(sub + l - 14, "-of-", 4) && strncmp(sub + l - 20, "-00001-of-", 10);
        if (!S_ISREG(sb.st_mode) || l < 6 || strcmp(sub + l - 5, ".gguf") || later_part) continue;
        const char *s1 = strchr(sub, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL; /* org/repo/file */
        printf("%-60s %10.1f MiB  hf://%.*s\n", sub, (double)set_bytes(path) / (1024.0 * 1024.0),
               s2 ? (int)(s2 - sub) : (int)l, sub);
        n++;
    }
    closedir(d);
    return n;
}

int cmd_models(int argc, char **argv) {
    const char *cache = NULL, *url = NULL;
    const cli_opt opts[] = {CLI_OPT_STR("--cache-dir", &cache), CLI_OPT_STR("--url", &url)};
    if (!cli_parse_opts("models", MODELS_USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    if (url) return list_served(url);
    char dir[4096];
    attnd_err err = {{0}};
    if (!cache) {
        if (hub_cache_dir(dir, sizeof(dir), &err) != ATTND_OK) {
            fprintf(stderr, "attnd models: %s\n", err.msg);
            return 1;
        }
        cache = dir;
    }
    if (walk(cache, "", 0) == 0) printf("no models in %s (attnd pull org/repo:QUANT adds one)\n", cache);
    return 0;
}

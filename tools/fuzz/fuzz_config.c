/*
 * fuzz_config.c — (fuzzing only) the config-file parser on arbitrary bytes.
 *
 * The input is the file (through a memfd path, as --config FILE); the environment is empty so
 * only the file and the defaults count. A file that loads is printed back with config_print,
 * and the printout must load again to the same settings (it is documented as a valid file).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_util.h"
#include "settings.h"

static attnd_status load(const char *path, server_settings *s, config **c, attnd_err *err) {
    char *argv[] = {"serve", "--config", (char *)path, NULL};
    char *envp[] = {NULL};
    return config_load(c, s, 3, argv, envp, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_memfd(data, size, path);
    if (fd < 0) return 0;
    server_settings s;
    config *c = NULL;
    attnd_err err;
    if (load(path, &s, &c, &err) == ATTND_OK) {
        char *out = NULL;
        size_t out_len = 0;
        FILE *f = open_memstream(&out, &out_len);
        config_print(c, &s, f);
        fclose(f);
        char path2[64];
        int fd2 = fuzz_memfd((const uint8_t *)out, out_len, path2);
        server_settings s2;
        config *c2 = NULL;
        attnd_status st = load(path2, &s2, &c2, &err);
        FUZZ_CHECK(st == ATTND_OK, "config_print output does not load again: %s\n%s", err.msg, out);
        FUZZ_CHECK(s2.port == s.port && s2.max_connections == s.max_connections && s2.body_limit == s.body_limit &&
                       s2.kv_budget_mb == s.kv_budget_mb && s2.log_level == s.log_level,
                   "settings differ after a print/load round trip:\n%s", out);
        FUZZ_CHECK(s2.n_presets == s.n_presets, "[model.NAME] sections differ after a round trip:\n%s", out);
        for (int i = 0; i < s.n_presets && i < s2.n_presets; i++)
            FUZZ_CHECK(!strcmp(s.presets[i].name, s2.presets[i].name) && !strcmp(s.presets[i].role, s2.presets[i].role) &&
                           s.presets[i].cfg.ctx_size == s2.presets[i].cfg.ctx_size,
                       "preset %d differs after a round trip:\n%s", i, out);
        /* a value no config line can hold is printed as a comment (and then not read back) */
        bool host_printed = !strstr(out, "# host ");
        FUZZ_CHECK(!host_printed || (!s.host && !s2.host) || (s.host && s2.host && !strcmp(s.host, s2.host)),
                   "host differs after a round trip:\n%s", out);
        config_destroy(c2);
        close(fd2);
        free(out);
    }
    config_destroy(c);
    close(fd);
    return 0;
}

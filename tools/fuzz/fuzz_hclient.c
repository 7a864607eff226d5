/*
 * fuzz_hclient.c — (fuzzing only) `attnd chat --url`'s HTTP client (cli/http_client.c) reading
 * an arbitrary answer: the status line and headers, then the body's lines through its framing
 * (chunked, Content-Length or to the end). The input is what the server sent, through a memfd.
 * A body line never holds a line end, and the lines never add up to more than the input.
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "http_client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = fuzz_memfd(data, size, path);
    if (fd < 0) return 0;
    lseek(fd, 0, SEEK_SET);
    hclient c;
    attnd_err err;
    if (hclient_read_head(&c, fd, &err) == ATTND_OK) {
        FUZZ_CHECK(c.status >= 100 && c.status <= 999, "status %d", c.status);
        buf line;
        buf_init(&line);
        size_t total = 0;
        while (hclient_line(&c, &line)) {
            FUZZ_CHECK(!line.p || !memchr(line.p, '\n', line.len), "a line end inside a line");
            total += line.len;
            FUZZ_CHECK(total <= size, "%zu bytes of lines from %zu of input", total, size);
        }
        buf_free(&line);
    }
    hclient_close(&c);
    return 0;
}

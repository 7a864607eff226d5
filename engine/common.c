/* common.c — status names and the error-message helper declared in attnd/common.h. */
#include "attnd/common.h"

#include <stdarg.h>

const char *attnd_status_str(attnd_status st) {
    switch (st) {
    case ATTND_OK: return "ok";
    case ATTND_ERR_IO: return "I/O error";
    case ATTND_ERR_FORMAT: return "format error";
    case ATTND_ERR_NOMEM: return "out of memory";
    case ATTND_ERR_UNSUPPORTED: return "unsupported";
    case ATTND_ERR_INVALID: return "invalid argument";
    case ATTND_ERR_NOT_FOUND: return "not found";
    case ATTND_ERR_BUSY: return "busy";
    }
    return "unknown status";
}

attnd_status attnd_fail(attnd_err *err, attnd_status st, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return st;
}

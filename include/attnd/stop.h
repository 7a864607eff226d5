/*
 * stop.h — stop strings (text that ends generation, cut before it, even when it spans tokens),
 * and why generation ended. Generation runs these through include/attnd/gen.h; the matcher is
 * public for tests and tools. A stop_matcher belongs to one request/thread.
 */
#ifndef ATTND_STOP_H
#define ATTND_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "attnd/common.h"

/* Why generation ended; STOP_NONE while it runs. */
typedef enum stop_reason {
    STOP_NONE = 0,
    STOP_EOG = 1,    /* the model produced an end-of-generation token (tok_is_eog) */
    STOP_STRING = 2, /* a stop string matched (stop_matcher_push returned true) */
    STOP_LENGTH = 3, /* max_tokens were generated (or the context is full) */
    STOP_GRAMMAR = 4, /* the grammar is complete and allows nothing more (or nothing at all) */
} stop_reason;
/* OpenAI's finish_reason for r: "stop" (EOG, stop string, grammar), "length", or NULL for
 * STOP_NONE. */
const char *stop_reason_finish(stop_reason r);

/*
 * Stop strings may span tokens. Feed each decoded text piece; the matcher says how many bytes are
 * safe to emit now (text that cannot be the start of a stop string) and whether a stop string was
 * completed, in which case the text before it has been released and nothing after.
 *
 * Matching is on bytes. Generation stops at the first point where some stop string is complete
 * (if two complete at the same byte, the longer one is cut): the result is the same however the
 * text is cut into pieces. Besides a possible stop-string prefix the
 * matcher also holds back an incomplete UTF-8 character at the end of the text, so what it
 * releases never splits a character; stop_matcher_flush releases everything left.
 * With n_stops 0 the matcher only does that UTF-8 hold-back.
 */
typedef struct stop_matcher stop_matcher;
/* Copies the strings. Errors: ATTND_ERR_INVALID for n_stops < 0, a NULL or empty string;
 * ATTND_ERR_NOMEM. */
attnd_status stop_matcher_create(stop_matcher **out, const char *const *stops, int n_stops, attnd_err *err);
void stop_matcher_destroy(stop_matcher *m); /* accepts NULL */
/* Appends piece; *emit points at bytes now safe to send (valid until the next call), *n_emit
 * their count. Returns true when a stop string matched (generation should end); afterwards
 * every push releases nothing and returns true. Allocates only when a piece is larger than
 * any seen before; if that allocation fails, releases what it safely can, returns true and
 * stop_matcher_status() says ATTND_ERR_NOMEM. */
bool stop_matcher_push(stop_matcher *m, const char *piece, size_t len, const char **emit, size_t *n_emit);
/* At the end of generation without a stop: releases the held-back tail (0 bytes after a stop). */
size_t stop_matcher_flush(stop_matcher *m, const char **emit);
/* ATTND_OK, or ATTND_ERR_NOMEM when a push could not grow its buffer. */
attnd_status stop_matcher_status(const stop_matcher *m);
/* The stop string that matched (borrowed, valid while m lives), or NULL. */
const char *stop_matcher_matched(const stop_matcher *m);

#endif /* ATTND_STOP_H */

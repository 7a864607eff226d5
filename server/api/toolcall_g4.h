/*
 * toolcall_g4.h — Gemma 4's tool-call syntax read as JSON, for the reply parser (toolcall_parse.c).
 *
 * Gemma 4's template writes a call as `call:NAME{key:value,...}` between <|tool_call> and
 * <tool_call|>: keys bare (or between <|"|> marks), strings between <|"|> marks with nothing
 * escaped inside, true, false, numbers as Python prints them, None, nested {...} and [...]. The
 * model answers in kind.
 */
#ifndef ATTND_TOOLCALL_G4_H
#define ATTND_TOOLCALL_G4_H

#include <stdbool.h>
#include <stddef.h>

#include "attnd/buf.h"

/* Reads the block s[0..n) (between the markers; blanks around it allowed): the function's name
 * into name (NUL-terminated, at most cap - 1 bytes) and its arguments as one compact JSON object
 * appended to args. False, with args and name unspecified, when the block is not exactly one call
 * in that syntax (a bad value, text after it, a string that is not UTF-8, nesting past 64). */
bool toolcall_g4_read(const char *s, size_t n, char *name, size_t cap, buf *args);

#endif

/*
 * reasoning.h — how many of a reply's generated tokens were reasoning, for usage's
 * completion_tokens_details.reasoning_tokens (chat) and output_tokens_details.reasoning_tokens
 * (Responses).
 *
 * A reasoning block is a "<think>" … "</think>" span, or a gpt-oss harmony analysis channel
 * ("<|channel|>analysis" … "<|end|>", "<|call|>" or "<|return|>"), the same markers the output
 * parser (toolcall.h) splits reasoning_content on; a block the reply never closes runs to its
 * end. A token counts when any of its bytes lies in a block, the markers included, so a token
 * that carries both "</think>" and the answer's first word counts once, as reasoning. Tokens
 * are read with their special-token text (harmony's markers are control tokens). A token without
 * bytes counts when it falls strictly inside a block. With to_call, a "<tool_call>" also ends a
 * think block, before the marker (toolcall_parser_end_think_at_call: Qwen3.5).
 *
 * Pure function of the ids and their bytes (no model, no HTTP).
 */
#ifndef ATTND_SERVER_REASONING_H
#define ATTND_SERVER_REASONING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Token id's bytes into *p, *n (borrowed); false: an id without bytes. */
typedef bool (*reasoning_bytes_fn)(void *user, int32_t id, const char **p, size_t *n);

/* The number of ids[n] that are reasoning. in_reasoning: the reply starts inside a block (the
 * prompt ended with an open "<think>"). Out of memory reads as 0. */
int reasoning_count_tokens(const int32_t *ids, int n, bool in_reasoning, bool to_call, reasoning_bytes_fn bytes,
                           void *user);

#endif

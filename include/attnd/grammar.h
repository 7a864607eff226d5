/*
 * grammar.h — grammar-constrained generation: GBNF grammars (the syntax of llama.cpp's `grammar`
 * field) compiled once, a per-sequence parse state, and the vocabulary index that turns a state
 * into the set of tokens allowed next.
 *
 *     grammar *g;  grammar_vocab *v;  grammar_state *st;
 *     grammar_compile(&g, "root ::= \"yes\" | \"no\"", len, &err);      // once per request
 *     grammar_vocab_from_tokenizer(&v, tok, &err);                       // once per model
 *     grammar_state_create(&st, g, &err);                                // once per sequence
 *     if (!grammar_state_accept(st, bytes, n)) ... the token is not allowed here ...
 *     grammar_state_mask(st, v, allowed);                                // every allowed token
 *     grammar_state_complete(st);                                        // a whole sentence?
 *
 * Syntax: `name ::= alternatives` rules (names [A-Za-z0-9_-]+; `root` is the start), `|`
 * alternation, sequences, `( … )` groups, `"literal"` strings, `[a-z0-9_]` / `[^"\\]` character
 * classes with ranges and negation, `.` (any character), `*` `+` `?` `{m}` `{m,}` `{m,n}` `{,n}`
 * repetition, `#` comments, and the escapes \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH
 * \UHHHHHHHH. A rule continues over newlines after `::=`, after `|` and inside parentheses;
 * elsewhere a newline ends it. Left recursion is refused (it could never consume input).
 *
 * Token terminals (llama.cpp's syntax): `<[200012]>` is the token with that id, `<|call|>` (any
 * `<…>` up to the first `>`) the token whose vocabulary string is exactly that text. One matches
 * exactly that token, never bytes: a special token the grammar does not name where it stands is
 * refused as before, and the same text spelled out in other tokens is refused where a token
 * terminal is required. When a token could be read both ways at one point (a token with bytes
 * that a terminal names), the terminal reading wins. Names are resolved in the vocabulary a state
 * is first stepped with; grammar_vocab_check says whether they all exist. (llama.cpp's negated
 * `!<…>` is not supported.)
 *
 * Matching is on Unicode code points of UTF-8 text; a token may end inside a character (the
 * state remembers the partial character). Invalid UTF-8 is never accepted.
 *
 * Cost: the state is a set of parse stacks (the grammar's ambiguity at this point; one or a few
 * for JSON). Checking a token is a walk over its bytes. grammar_state_mask walks a trie of the
 * vocabulary once, pruning every subtree whose prefix the grammar rejects. Pathologically
 * ambiguous grammars are cut at GRAMMAR_MAX_STACKS stacks per state, a step's work is bounded,
 * and so is a whole mask's: a mask that reaches its bound stops walking and allows only the
 * tokens it reached (a subset of what the grammar allows; grammar_state_mask_was_cut says so).
 *
 * Thread-safety: a compiled grammar and a grammar_vocab are immutable (share them between
 * threads and sequences); a grammar_state belongs to one sequence and one thread.
 */
#ifndef ATTND_GRAMMAR_H
#define ATTND_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"
#include "attnd/tokenizer.h"

/* Limits on what a grammar may compile into (requests are untrusted). */
#define GRAMMAR_MAX_RULES 8192     /* rules, counting the ones groups and repetition create */
#define GRAMMAR_MAX_ELEMENTS 262144
#define GRAMMAR_MAX_REPEAT 4096    /* m and n of {m,n} */
#define GRAMMAR_MAX_STACKS 256     /* parse stacks kept per state */

typedef struct grammar grammar;

/*
 * Compiles the GBNF text src[len] (not NUL-terminated needed). *out has one reference.
 * Errors: ATTND_ERR_INVALID with a message naming the line and column (syntax, an undefined
 * rule, no `root`, left recursion, a limit above), ATTND_ERR_NOMEM.
 */
attnd_status grammar_compile(grammar **out, const char *src, size_t len, attnd_err *err);
/* Takes another reference (returns g); unref drops one and frees the last. Thread-safe. */
grammar *grammar_ref(grammar *g);
void grammar_unref(grammar *g); /* accepts NULL */
int grammar_n_rules(const grammar *g);

/*
 * The lazy start: where in the output the grammar begins (gen.h applies it, one state per
 * sequence). skip_open / skip_close: a block the output opens with (its very first bytes, e.g. a
 * reasoning block "<think>" … "</think>") runs free, and the grammar begins after the token
 * that closes it; an output that does not open with skip_open is constrained from its start.
 * trigger: the text runs free until trigger appears in it (outside the skipped block), and the
 * grammar then constrains from the trigger's first byte, so its sentences must start with the
 * trigger (tool_choice auto: "<tool_call>"). skip_inside: the output starts inside the skipped
 * block (the prompt opened it, as DeepSeek-R1 style templates end with "<think>\n"): free until
 * skip_close. skip_break: a text that also ends the skipped block, the grammar beginning at its
 * first byte as at a trigger (Qwen3.5 may open its call, "<tool_call>", inside an unclosed
 * <think>: the call is then constrained all the same). NULL fields: no such part. Strings are
 * copied, each 1..GRAMMAR_MAX_MARKER bytes. Set before the grammar is shared (not safe against
 * readers).
 * Errors: ATTND_ERR_INVALID, ATTND_ERR_NOMEM (g unchanged).
 */
#define GRAMMAR_MAX_MARKER 48
typedef struct grammar_lazy {
    const char *trigger;
    const char *skip_open, *skip_close;
    bool skip_inside;
    const char *skip_break;
} grammar_lazy;
attnd_status grammar_set_lazy(grammar *g, const grammar_lazy *lz, attnd_err *err);
/* The lazy start (borrowed from g); all NULL for a grammar that constrains from the first byte. */
grammar_lazy grammar_get_lazy(const grammar *g);

/* ---- the vocabulary index ---- */
typedef struct grammar_vocab grammar_vocab;
/* Token id i decodes to bytes[i][0..lens[i]) (0 bytes: a control token, never allowed by a
 * grammar). Copies everything. Errors: ATTND_ERR_INVALID, ATTND_ERR_NOMEM. */
attnd_status grammar_vocab_create(grammar_vocab **out, int n_vocab, const char *const *bytes, const size_t *lens,
                                  attnd_err *err);
/* Each id's bytes as tok_token_bytes gives them (control tokens: none). Borrows nothing. */
attnd_status grammar_vocab_from_tokenizer(grammar_vocab **out, const tokenizer *tok, attnd_err *err);
void grammar_vocab_destroy(grammar_vocab *v); /* accepts NULL */
int grammar_vocab_size(const grammar_vocab *v);
/* The bytes of id (borrowed while v lives); false for an id outside the vocabulary. */
bool grammar_vocab_token(const grammar_vocab *v, int32_t id, const char **bytes, size_t *len);
/* Each id's vocabulary string names[i][0..lens[i]) (0: none), which `<text>` terminals look up
 * (grammar_vocab_from_tokenizer sets the GGUF's strings). Copied. Errors: ATTND_ERR_NOMEM. */
attnd_status grammar_vocab_set_names(grammar_vocab *v, const char *const *names, const size_t *lens, attnd_err *err);
/* ATTND_ERR_INVALID naming the first token terminal of g that v does not have (an id out of
 * range, a text no token is named), else ATTND_OK. _tokenizer: the same against tok's
 * vocabulary (before a request is queued, when its vocabulary index may not exist yet). */
attnd_status grammar_vocab_check(const grammar *g, const grammar_vocab *v, attnd_err *err);
attnd_status grammar_check_tokenizer(const grammar *g, const tokenizer *tok, attnd_err *err);

/* ---- the per-sequence state ---- */
typedef struct grammar_state grammar_state;
/* At the start of the grammar. Borrows g, which must outlive the state. Errors: NOMEM. */
attnd_status grammar_state_create(grammar_state **out, const grammar *g, attnd_err *err);
void grammar_state_destroy(grammar_state *s); /* accepts NULL */
/* Back to the start of the grammar. */
void grammar_state_reset(grammar_state *s);
/* Whether bytes[n] may come next (the state is left as it was). n = 0 is always true. */
bool grammar_state_try(grammar_state *s, const char *bytes, size_t n);
/* Consumes bytes[n] when they may come next and returns true; otherwise returns false and the
 * state is left as it was. */
bool grammar_state_accept(grammar_state *s, const char *bytes, size_t n);
/* Token id as the next step: through a token terminal that names it (see above), else by its
 * bytes in v (none: false). _try leaves the state as it was; _accept consumes it when it may
 * come next. Use these, not the byte forms, for a grammar with token terminals. */
bool grammar_state_try_token(grammar_state *s, const grammar_vocab *v, int32_t id);
bool grammar_state_accept_token(grammar_state *s, const grammar_vocab *v, int32_t id);
/* The text so far is a whole sentence of the grammar (no partial character pending). */
bool grammar_state_complete(const grammar_state *s);
/* More text may follow (false for a complete sentence the grammar cannot extend). */
bool grammar_state_can_continue(const grammar_state *s);

/* The shortest completion: how many characters (a token terminal counts one) the state must
 * still take, at least, before its sentence is complete (0: it is complete now); GRAMMAR_FAR when
 * no completion was found. For a budget that closes the sentence in time (gen.h's
 * grammar_close). */
#define GRAMMAR_FAR (UINT32_MAX / 2)
uint32_t grammar_state_distance(const grammar_state *s);
/* The same after bytes[n], which the state is not moved by: false when it rejects them. */
bool grammar_state_try_distance(grammar_state *s, const char *bytes, size_t n, uint32_t *dist);
/* allowed[grammar_vocab_size(v)] := 1 for every token whose bytes may come next or that a token
 * terminal names here, else 0 (other tokens without bytes are 0: end-of-generation is the
 * caller's decision, see complete). Returns the number allowed. One walk of the vocabulary trie,
 * plus one look at the stacks for token terminals. */
int grammar_state_mask(grammar_state *s, const grammar_vocab *v, unsigned char *allowed);
/* The same mask in parts, for a caller that bounds the time of each (a server's step): _begin
 * starts it, each _more walks on until deadline (attnd_now_s seconds; 0 = no limit; it always
 * makes some progress) and returns true once the mask is complete, its count in *count. The
 * result is grammar_state_mask's, however it was cut. Between the parts allowed and the state
 * must not be used otherwise. */
void grammar_state_mask_begin(grammar_state *s, const grammar_vocab *v, unsigned char *allowed);
bool grammar_state_mask_more(grammar_state *s, const grammar_vocab *v, unsigned char *allowed, double deadline,
                             int *count);
/* Whether the last grammar_state_mask reached its work bound (then it allowed a subset). */
bool grammar_state_mask_was_cut(const grammar_state *s);
/* ATTND_OK, or ATTND_ERR_NOMEM once a step could not grow its buffers (then nothing is accepted). */
attnd_status grammar_state_status(const grammar_state *s);

#endif /* ATTND_GRAMMAR_H */

/*
 * json_schema.h — JSON Schema to GBNF (attnd/grammar.h), for structured output: the grammar
 * whose sentences are exactly the compact-ish JSON texts the schema describes, as far as a
 * context-free grammar can say it.
 *
 * Covered: type (one or a list), properties in their order with required and optional ones,
 * additionalProperties (false / true / a schema; absent means none beyond the properties when
 * properties are given), nested objects, items / prefixItems with minItems / maxItems, enum,
 * const, anyOf / oneOf (oneOf's exclusivity is not enforced), allOf with one member, $ref to
 * "#", "#/$defs/…" and "#/definitions/…" (recursion allowed), nullable, string minLength /
 * maxLength / format (date, time, date-time, uuid, email, uri) / pattern (literals, classes,
 * \d \w \s, ., groups, |, * + ? {m,n}, ^ $), integer and number minimum / maximum / exclusive
 * bounds (exactly: a bounded number has no exponent, and every text it allows, read as a double,
 * keeps the bounds), multipleOf a power of ten (fraction digits), any step when both bounds
 * leave at most 256 multiples (listed), or an integer step up to 100 (digit by digit, up to 15
 * digits). Annotations (title, description, default,
 * examples, $schema, $id, $comment, deprecated, readOnly, writeOnly, x-…) are ignored. Anything
 * else — another multipleOf, uniqueItems, patternProperties, not, if/then/else, an unknown
 * keyword — is refused, naming it: never silently dropped.
 *
 * Whitespace is the server's choice: none, or one space after ':' and ',' , or a newline with
 * up to 16 spaces of indentation before a member, so pretty-printed output is allowed but
 * endless whitespace is not. Numbers have at most 16 integer and 16 fraction digits.
 *
 * Pure functions of JSON in, text out (no model, no HTTP).
 */
#ifndef ATTND_SERVER_JSON_SCHEMA_H
#define ATTND_SERVER_JSON_SCHEMA_H

#include <jansson.h>

#include "attnd/buf.h"
#include "attnd/common.h"

/*
 * Appends the grammar for schema (borrowed) to out. Errors: ATTND_ERR_UNSUPPORTED for a keyword
 * or value this conversion does not cover, ATTND_ERR_INVALID for a malformed schema (err->msg
 * names the keyword and where it is, as a JSON pointer), ATTND_ERR_NOMEM.
 */
attnd_status json_schema_to_gbnf(const json_t *schema, buf *out, attnd_err *err);

/* Several schemas in one grammar (tool calling): appends "sK ::= <schema K>" for each, with
 * the rules they need (no root rule; the caller writes one that refers to s0, s1, ...). Errors
 * as json_schema_to_gbnf. */
attnd_status json_schema_rules(const json_t *const *schemas, size_t n, buf *out, attnd_err *err);

/* json_schema_rules in Gemma 4's call syntax (toolcall_g4.h, the template's format_argument):
 * a string between <|"|> marks with its text as it is (holding no mark, and not ending inside
 * one; with minLength / maxLength, no '<' at all), object keys bare (between marks when not a
 * plain name), null as None, no whitespace, an object's properties in the order the template
 * writes them (sorted by name, case folded, as Jinja's dictsort). The value of a const or enum
 * is written the same way (a string holding a mark: ATTND_ERR_UNSUPPORTED). */
attnd_status json_schema_rules_gemma4(const json_t *const *schemas, size_t n, buf *out, attnd_err *err);

/* The grammar of any JSON object (response_format json_object). Static text. */
const char *json_schema_any_object_gbnf(void);

#endif

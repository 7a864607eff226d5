/*
 * test_server_json_schema.c — JSON Schema to GBNF (server/api/json_schema.c): for every
 * keyword, the grammar compiles and accepts the JSON texts the schema allows and rejects the
 * ones it does not; unsupported keywords are refused by name.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <string.h>

#include "attnd/grammar.h"
#include "grammar_sentence.h"
#include "json_schema.h"

static grammar *schema_grammar(const char *schema_text) {
    json_error_t je;
    json_t *schema = json_loads(schema_text, JSON_DECODE_ANY, &je);
    cr_assert(schema, "bad test schema %s: %s", schema_text, je.text);
    buf out = {0};
    attnd_err err;
    cr_assert_eq(json_schema_to_gbnf(schema, &out, &err), ATTND_OK, "%s: %s", schema_text, err.msg);
    grammar *g;
    cr_assert_eq(grammar_compile(&g, out.p, out.len, &err), ATTND_OK, "%s\n%s\n%s", schema_text, out.p, err.msg);
    json_decref(schema);
    buf_free(&out);
    return g;
}

/* Every text in yes is accepted, every one in no rejected. */
static void check(const char *schema, const char *const *yes, const char *const *no) {
    grammar *g = schema_grammar(schema);
    for (; yes && *yes; yes++) cr_assert(grammar_sentence(g, *yes), "%s should accept %s", schema, *yes);
    for (; no && *no; no++) cr_assert(!grammar_sentence(g, *no), "%s should reject %s", schema, *no);
    grammar_unref(g);
}

#define L(...) (const char *const[]){__VA_ARGS__, NULL}

static void refused(const char *schema_text, attnd_status st, const char *needle) {
    json_t *schema = json_loads(schema_text, JSON_DECODE_ANY, NULL);
    cr_assert(schema);
    buf out = {0};
    attnd_err err = {{0}};
    cr_assert_eq(json_schema_to_gbnf(schema, &out, &err), st, "%s", schema_text);
    cr_assert(strstr(err.msg, needle), "'%s' should mention '%s'", err.msg, needle);
    json_decref(schema);
    buf_free(&out);
}

Test(json_schema, primitive_types) {
    check("{\"type\":\"string\"}", L("\"\"", "\"a\\\"b\\u00e9\"", " \"x\""), L("\"a", "a", "\"\n\"", "1"));
    check("{\"type\":\"integer\"}", L("0", "-12", "1234567890"), L("01", "1.5", "-", "\"1\""));
    check("{\"type\":\"number\"}", L("0", "-1.25", "3e10", "2.5E-3"), L("1.", ".5", "+1", "NaN"));
    check("{\"type\":\"boolean\"}", L("true", "false"), L("null", "True"));
    check("{\"type\":\"null\"}", L("null"), L("nul", "0"));
    check("{\"type\":[\"string\",\"null\"]}", L("null", "\"s\""), L("1"));
    check("{}", L("{\"a\":[1,{}]}", "\"s\"", "null"), L("{a:1}"));
    check("true", L("[]", "1"), L("[,]"));
}

Test(json_schema, object_properties_keep_their_order_required_and_optional) {
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
                    "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}";
    check(s, L("{\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\"}", "{\"a\": 1, \"b\": \"x\", \"c\": true}",
               "{\"b\":\"x\",\"c\":false}", "{\n  \"a\": 1,\n  \"b\": \"\"\n}"),
          L("{}", "{\"a\":1}", "{\"b\":\"x\",\"a\":1}", "{\"b\":\"x\",\"d\":1}", "{\"b\":\"x\",}", "{,\"b\":\"x\"}"));
    check("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}}}", L("{}", "{\"a\":1}", "{\"b\":2}", "{\"a\":1,\"b\":2}"),
          L("{\"b\":2,\"a\":1}", "{,}"));
}

Test(json_schema, additional_properties) {
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}",
          L("{\"a\":1,\"x\":\"y\"}", "{\"x\":\"y\",\"z\":\"w\"}", "{}"), L("{\"a\":1,\"x\":2}"));
    check("{\"type\":\"object\",\"additionalProperties\":false}", L("{}"), L("{\"a\":1}"));
    check("{\"type\":\"object\"}", L("{}", "{\"k\":[true]}"), L("[]"));
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"],\"additionalProperties\":true}",
          L("{\"a\":1,\"b\":null}"), L("{\"b\":null}"));
}

Test(json_schema, nested_objects_and_arrays) {
    const char *s = "{\"type\":\"object\",\"properties\":{\"people\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
                    "\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
                    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false},\"minItems\":1,\"maxItems\":2}},"
                    "\"required\":[\"people\"]}";
    check(s, L("{\"people\":[{\"name\":\"A\",\"age\":3}]}", "{\"people\": [{\"name\": \"A\", \"age\": 3}, {\"name\": \"B\", \"age\": -1}]}"),
          L("{\"people\":[]}", "{\"people\":[{\"name\":\"A\"}]}", "{\"people\":[{\"name\":\"A\",\"age\":1},{\"name\":\"A\",\"age\":1},{\"name\":\"A\",\"age\":1}]}"));
}

Test(json_schema, array_bounds_and_tuples) {
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", L("[1,2]", "[1, 2, 3]"),
          L("[1]", "[1,2,3,4]", "[1,\"a\"]"));
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", L("[]", "[1]", "[ 1, 2 ]"), L("[1,]"));
    check("{\"type\":\"array\",\"maxItems\":0}", L("[]"), L("[1]"));
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", L("[\"a\",1]"),
          L("[\"a\"]", "[1,\"a\"]", "[\"a\",1,2]"));
}

Test(json_schema, enum_and_const) {
    check("{\"enum\":[\"red\",\"green\",1,null,{\"a\":[1]}]}", L("\"red\"", "\"green\"", "1", "null", "{\"a\":[1]}"),
          L("\"blue\"", "2", "\"Red\""));
    check("{\"const\":\"fixed\"}", L("\"fixed\""), L("\"other\""));
    check("{\"type\":\"string\",\"enum\":[\"a\\\"b\"]}", L("\"a\\\"b\""), L("\"ab\""));
}

Test(json_schema, any_of_one_of_all_of) {
    check("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}", L("5", "\"x\""), L("\"xy\"", "true"));
    check("{\"oneOf\":[{\"const\":1},{\"const\":2}]}", L("1", "2"), L("3"));
    check("{\"allOf\":[{\"type\":\"boolean\"}]}", L("true"), L("1"));
    check("{\"type\":\"integer\",\"nullable\":true}", L("1", "null"), L("\"1\""));
}

Test(json_schema, refs_to_defs_including_recursion) {
    const char *s = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                    "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
                    "\"$ref\":\"#/$defs/node\"}";
    check(s, L("{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3}]}"), L("{\"v\":1,\"kids\":[{}]}"));
    check("{\"definitions\":{\"a\":{\"type\":\"string\"}},\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/definitions/a\"}},"
          "\"required\":[\"x\"]}", L("{\"x\":\"s\"}"), L("{\"x\":1}"));
    check("{\"type\":\"object\",\"properties\":{\"self\":{\"$ref\":\"#\"}}}", L("{}", "{\"self\":{\"self\":{}}}"), L("{\"self\":1}"));
}

Test(json_schema, string_lengths) {
    check("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", L("\"ab\"", "\"abc\"", "\"\\n\\t\""), L("\"a\"", "\"abcd\""));
    check("{\"type\":\"string\",\"minLength\":1}", L("\"a\"", "\"abcdefgh\""), L("\"\""));
}

Test(json_schema, string_formats) {
    check("{\"type\":\"string\",\"format\":\"date\"}", L("\"2024-02-29\""), L("\"2024-13-01\"", "\"24-01-01\"", "\"2024-1-01\""));
    check("{\"type\":\"string\",\"format\":\"date-time\"}", L("\"2024-02-29T23:59:59Z\"", "\"2024-02-29T00:00:00.123+05:30\""),
          L("\"2024-02-29 23:59:59Z\"", "\"2024-02-29T24:00:00Z\""));
    check("{\"type\":\"string\",\"format\":\"time\"}", L("\"12:30:00Z\""), L("\"12:30\""));
    check("{\"type\":\"string\",\"format\":\"uuid\"}", L("\"123e4567-e89b-12d3-a456-426614174000\""),
          L("\"123e4567e89b12d3a456426614174000\"", "\"123E4567-E89B-12D3-A456-42661417400\""));
    check("{\"type\":\"string\",\"format\":\"email\"}", L("\"a.b@example.com\""), L("\"a@b\"", "\"@x.com\""));
}

Test(json_schema, string_patterns) {
    check("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"}", L("\"AB-123\""), L("\"AB-12\"", "\"ab-123\"", "\"xAB-123\""));
    check("{\"type\":\"string\",\"pattern\":\"^(cat|dog)s?$\"}", L("\"cat\"", "\"dogs\""), L("\"cow\"", "\"catss\""));
    check("{\"type\":\"string\",\"pattern\":\"ab\"}", L("\"xxabyy\"", "\"ab\""), L("\"a b\""));
    check("{\"type\":\"string\",\"pattern\":\"^[^,]+\\\\.txt$\"}", L("\"a b.txt\""), L("\"a,b.txt\"", "\"a\\\"b.txt\"", "\".txt\""));
    check("{\"type\":\"string\",\"pattern\":\"^a.c$\"}", L("\"abc\"", "\"a\\\"c\""), L("\"ac\""));
    check("{\"type\":\"string\",\"pattern\":\"^\\\"q\\\"$\"}", L("\"\\\"q\\\"\""), L("\"q\""));
}

/* Every integer from `from` to `to` (by step) is accepted exactly when want_lo <= v <= want_hi. */
static void check_range(const char *schema, int from, int to, int step, int want_lo, int want_hi) {
    grammar *g = schema_grammar(schema);
    for (int v = from; v <= to; v += step) {
        char t[16];
        snprintf(t, sizeof(t), "%d", v);
        cr_assert_eq(grammar_sentence(g, t), v >= want_lo && v <= want_hi, "%s: %d", schema, v);
    }
    grammar_unref(g);
}

Test(json_schema, integer_bounds_are_exact) {
    check_range("{\"type\":\"integer\",\"minimum\":-15,\"maximum\":207}", -40, 400, 1, -15, 207);
    check("{\"type\":\"integer\",\"exclusiveMinimum\":0}", L("1", "98765"), L("0", "-3"));
    check_range("{\"type\":\"integer\",\"minimum\":95}", 0, 1999, 7, 95, INT_MAX);
    check("{\"type\":\"integer\",\"maximum\":-3}", L("-3", "-1000"), L("-2", "0"));
    check("{\"type\":\"integer\",\"maximum\":12}", L("12", "-1000", "0"), L("13"));
}

/* zod's .int() (LangChain's withStructuredOutput) bounds every integer by +-(2^53 - 1): no bound. A
 * 16-digit bound below that is exact; one beyond it on the other side leaves no value. */
Test(json_schema, integer_bounds_at_2_53_mean_none_and_16_digits_are_exact) {
    check("{\"type\":\"integer\",\"minimum\":-9007199254740991,\"maximum\":9007199254740991}",
          L("0", "-42", "9007199254740991", "123456789012345"), L("1.5", "", "-"));
    check("{\"type\":\"integer\",\"minimum\":-1e300}", L("-5", "7"), L("x"));
    check("{\"type\":\"integer\",\"minimum\":1000000000000000,\"maximum\":1000000000000002}",
          L("1000000000000000", "1000000000000002"), L("999999999999999", "1000000000000003", "7"));
    refused("{\"type\":\"integer\",\"minimum\":9007199254740992}", ATTND_ERR_INVALID, "leaves no value");
    refused("{\"type\":\"integer\",\"maximum\":-1e300}", ATTND_ERR_INVALID, "leaves no value");
}

Test(json_schema, number_lower_bounds_zero) {
    check("{\"type\":\"number\",\"minimum\":0}", L("0", "2.5", "1e3"), L("-1", "-0.5"));
    check("{\"type\":\"number\",\"exclusiveMinimum\":0}", L("0.001", "3", "1.5e-3"), L("0", "0.0", "-2"));
}

Test(json_schema, unsupported_keywords_are_named) {
    refused("{\"type\":\"number\",\"multipleOf\":2}", ATTND_ERR_UNSUPPORTED, "'multipleOf'");
    refused("{\"type\":\"array\",\"uniqueItems\":true}", ATTND_ERR_UNSUPPORTED, "'uniqueItems'");
    refused("{\"type\":\"object\",\"patternProperties\":{}}", ATTND_ERR_UNSUPPORTED, "'patternProperties'");
    refused("{\"not\":{}}", ATTND_ERR_UNSUPPORTED, "'not'");
    refused("{\"if\":{},\"then\":{}}", ATTND_ERR_UNSUPPORTED, "'if'");
    refused("{\"type\":\"number\",\"maximum\":3}", ATTND_ERR_UNSUPPORTED, "'maximum'");
    refused("{\"type\":\"string\",\"format\":\"hostname\"}", ATTND_ERR_UNSUPPORTED, "'hostname'");
    refused("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", ATTND_ERR_UNSUPPORTED, "lookaround");
    refused("{\"allOf\":[{},{}]}", ATTND_ERR_UNSUPPORTED, "'allOf'");
    refused("{\"$ref\":\"http://x/y\"}", ATTND_ERR_UNSUPPORTED, "'$ref'");
    refused("{\"type\":\"object\",\"properties\":{\"a\":{\"frobnicate\":1}}}", ATTND_ERR_UNSUPPORTED, "/properties/a");
}

Test(json_schema, malformed_schemas_are_invalid) {
    refused("{\"type\":\"strnig\"}", ATTND_ERR_INVALID, "'strnig'");
    refused("{\"$ref\":\"#/$defs/missing\"}", ATTND_ERR_INVALID, "points at nothing");
    refused("{\"type\":\"string\",\"minLength\":-1}", ATTND_ERR_INVALID, "'minLength'");
    refused("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", ATTND_ERR_INVALID, "'maxItems'");
    refused("{\"enum\":[]}", ATTND_ERR_INVALID, "'enum'");
    refused("7", ATTND_ERR_INVALID, "must be an object");
    /* a bad additionalProperties with properties beside it (the fuzzer's UBSan find) */
    refused("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"additionalProperties\":7}",
            ATTND_ERR_INVALID, "additionalProperties");
}

Test(json_schema, annotations_are_ignored) {
    check("{\"title\":\"T\",\"description\":\"d\",\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"object\","
          "\"properties\":{\"a\":{\"type\":\"string\",\"description\":\"x\",\"default\":\"q\",\"x-extra\":1}},\"required\":[\"a\"],"
          "\"additionalProperties\":false}", L("{\"a\":\"v\"}"), L("{}"));
}

Test(json_schema, the_any_object_grammar) {
    grammar *g;
    attnd_err err;
    const char *t = json_schema_any_object_gbnf();
    cr_assert_eq(grammar_compile(&g, t, strlen(t), &err), ATTND_OK, "%s", err.msg);
    cr_assert(grammar_sentence(g, "{\"a\": [1, {\"b\": null}], \"c\": \"x\"}"));
    cr_assert(grammar_sentence(g, "{}"));
    cr_assert(!grammar_sentence(g, "[]"));
    cr_assert(!grammar_sentence(g, "{\"a\"}"));
    grammar_unref(g);
}

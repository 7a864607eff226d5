/*
 * test_server_json_schema.c — JSON Schema to GBNF (server/api/json_schema.c): for every
 * keyword, the grammar compiles and accepts the JSON texts the schema allows and rejects the
 * ones it does not; unsupported keywords are refused by name.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
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
    check("{\"type\":\"number\",\"minimum\":0}", L("0", "2.5", "1000", "0.000"), L("-1", "-0.5", "-0.001"));
    check("{\"type\":\"number\",\"exclusiveMinimum\":0}", L("0.001", "3", "0.0000000000000001"),
          L("0", "0.0", "-2", "-0", "0.0000000000000000"));
}

/* A bounded number has no exponent: 1e-400 reads as 0 and 1e999 as infinity, which would pass
 * a bound in text and break it as a double. */
Test(json_schema, bounded_numbers_have_no_exponent) {
    check("{\"type\":\"number\",\"exclusiveMinimum\":0}", L("1.5"), L("1e-400", "1.5e-3", "1E2"));
    check("{\"type\":\"number\",\"minimum\":-1e300,\"maximum\":1e300}", L("-12.5", "0", "9999999999999999.5"),
          L("1e999", "2e0"));
}

/* zod's .number().min(0.5).max(2.5) (LangChain's withStructuredOutput), negative ranges and
 * exclusive bounds, at the very digits of the bound. */
Test(json_schema, number_bounds_are_exact) {
    check("{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2.5}",
          L("0.5", "2.5", "1", "2.4999999999999999", "0.50", "2.5000", "0.5000000000000001", "2"),
          L("0.4999999999999999", "2.5000000000000001", "3", "-1", "0", "2.6", "0.49", "1e0"));
    check("{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":-0.5}", L("-0.5", "-2.5", "-1.25", "-2"),
          L("-0.49", "0", "-2.51", "-0", "-3", "0.5"));
    check("{\"type\":\"number\",\"exclusiveMaximum\":3}", L("2.999", "-7", "0"), L("3", "3.0", "3.001", "4"));
    check("{\"type\":\"number\",\"exclusiveMinimum\":-0.25,\"exclusiveMaximum\":0.25}", L("0", "-0.2499", "0.2499"),
          L("-0.25", "0.25", "0.250", "1"));
    check("{\"type\":\"number\",\"minimum\":3,\"exclusiveMinimum\":true}", L("3.01"), L("3"));
    check("{\"type\":\"number\",\"maximum\":0.000000000000000001}", L("0", "-5"), L("0.0000000000000001"));
    check("{\"maximum\":10,\"minimum\":9.99}", L("10", "9.995"), L("\"s\"", "10.01", "9.98"));
    refused("{\"type\":\"number\",\"minimum\":2,\"maximum\":1}", ATTND_ERR_INVALID, "leave no value");
    refused("{\"type\":\"number\",\"minimum\":1e20}", ATTND_ERR_INVALID, "leave no value");
    refused("{\"type\":\"number\",\"exclusiveMinimum\":0.00000000000000001,\"maximum\":0.00000000000000005}",
            ATTND_ERR_INVALID, "leave no value");
}

#define TEST_RNG_SEED 0x5eed5c4e3aULL
#include "test_rng.h"

/* A random decimal with up to int_digits integer and frac_digits fraction digits. */
static void random_decimal(char *t, size_t n, int int_digits, int frac_digits) {
    int ni = 1 + (int)(rnd() % (unsigned)int_digits), nf = (int)(rnd() % (unsigned)(frac_digits + 1));
    size_t k = 0;
    if (rnd() & 1) t[k++] = '-';
    t[k++] = (char)(ni == 1 ? '0' + rnd() % 10 : '1' + rnd() % 9);
    for (int i = 1; i < ni; i++) t[k++] = (char)('0' + rnd() % 10);
    if (nf) t[k++] = '.';
    for (int i = 0; i < nf; i++) t[k++] = (char)('0' + rnd() % 10);
    t[k] = '\0';
    cr_assert(k < n);
    if (!strcmp(t, "-0") || (t[0] == '-' && strtod(t, NULL) == 0)) memmove(t, t + 1, k); /* no negative zero */
}

typedef struct nb_case {
    bool has_lo, has_hi, lo_ex, hi_ex;
    double lo, hi;
} nb_case;

static bool nb_in(const nb_case *k, double v) {
    return (!k->has_lo || (k->lo_ex ? v > k->lo : v >= k->lo)) && (!k->has_hi || (k->hi_ex ? v < k->hi : v <= k->hi));
}

/* The schema of random bounds k, given as the texts lo / hi (a 17-digit double when NULL). */
static grammar *nb_grammar(const nb_case *k, char *schema, size_t n) {
    int len = snprintf(schema, n, "{\"type\":\"number\"");
    if (k->has_lo) len += snprintf(schema + len, n - (size_t)len, ",\"%s\":%.17g", k->lo_ex ? "exclusiveMinimum" : "minimum", k->lo);
    if (k->has_hi) len += snprintf(schema + len, n - (size_t)len, ",\"%s\":%.17g", k->hi_ex ? "exclusiveMaximum" : "maximum", k->hi);
    snprintf(schema + len, n - (size_t)len, "}");
    return schema_grammar(schema);
}

/* Bounds and values of at most 9 significant digits: a double tells them apart exactly, so the
 * grammar accepts a value exactly when float64 comparison does. */
Test(json_schema, random_short_number_bounds_agree_with_float64) {
    int seen[2] = {0, 0};
    for (int round = 0; round < 60; round++) {
        char lo_t[40], hi_t[40], schema[160], v[40];
        random_decimal(lo_t, sizeof(lo_t), 4, 4), random_decimal(hi_t, sizeof(hi_t), 4, 4);
        nb_case k = {rnd() % 4 != 0, rnd() % 4 != 0, rnd() & 1, rnd() & 1, strtod(lo_t, NULL), strtod(hi_t, NULL)};
        if (k.has_lo && k.has_hi && k.lo > k.hi) {
            double x = k.lo;
            k.lo = k.hi, k.hi = x;
        }
        if (k.has_lo && k.has_hi && k.lo == k.hi) k.lo_ex = k.hi_ex = false;
        grammar *g = nb_grammar(&k, schema, sizeof(schema));
        for (int i = 0; i < 150; i++) {
            if (i < 8) { /* at and next to the bounds */
                double b = i < 4 ? k.lo : k.hi, d[4] = {0, 0.0001, -0.0001, 0.00001};
                snprintf(v, sizeof(v), "%.5f", b + d[i % 4]);
                if (strtod(v, NULL) == 0) snprintf(v, sizeof(v), "0");
            } else {
                random_decimal(v, sizeof(v), 5, 5);
            }
            bool in = nb_in(&k, strtod(v, NULL));
            cr_assert_eq(grammar_sentence(g, v), in, "%s: %s", schema, v);
            seen[in]++;
        }
        grammar_unref(g);
    }
    cr_assert(seen[0] > 1000 && seen[1] > 1000, "a fair share of both: %d out, %d in", seen[0], seen[1]);
}

/* Any double as a bound (17 digits, any magnitude): whatever the grammar accepts is within the
 * bounds as float64, and what is clearly within them (not within 10^-9 of a bound) is accepted. */
Test(json_schema, random_double_number_bounds_are_sound_in_float64) {
    int seen[2] = {0, 0};
    for (int round = 0; round < 40; round++) {
        char schema[160], v[48];
        double mag[2];
        for (int j = 0; j < 2; j++) mag[j] = pow(10.0, (double)(int)(rnd() % 34) - 18.0) * (1.0 + rndf());
        nb_case k = {rnd() % 4 != 0, rnd() % 4 != 0, rnd() & 1, rnd() & 1, (rnd() & 1 ? -1 : 1) * mag[0],
                     (rnd() & 1 ? -1 : 1) * mag[1]};
        if (k.lo > k.hi) {
            double x = k.lo;
            k.lo = k.hi, k.hi = x;
        }
        if ((k.has_lo && k.lo >= 1e16) || (k.has_hi && k.hi <= -1e16)) continue;
        grammar *g = nb_grammar(&k, schema, sizeof(schema));
        for (int i = 0; i < 120; i++) {
            double base = i % 2 ? k.lo : k.hi, x = base * (1.0 + (double)rndf() * (i % 3 ? 1e-3 : 1.0));
            if (fabs(x) >= 1e16) continue;
            int nd = (int)(rnd() % 17), len = snprintf(v, sizeof(v), "%.*f", nd, x);
            if (v[0] == '-' && strtod(v, NULL) == 0) memmove(v, v + 1, (size_t)len);
            double y = strtod(v, NULL);
            bool accepted = grammar_sentence(g, v), in = nb_in(&k, y);
            cr_assert(!accepted || in, "%s accepts %s", schema, v);
            bool clear = (!k.has_lo || fabs(y - k.lo) > 1e-9 * fmax(1, fabs(k.lo))) &&
                         (!k.has_hi || fabs(y - k.hi) > 1e-9 * fmax(1, fabs(k.hi)));
            cr_assert(accepted || !in || !clear, "%s rejects %s", schema, v);
            seen[accepted]++;
        }
        grammar_unref(g);
    }
    cr_assert(seen[0] > 500 && seen[1] > 500, "a fair share of both: %d rejected, %d accepted", seen[0], seen[1]);
}

/* Integer steps up to 100 go digit by digit (a remainder per rule): random steps and bounds,
 * some absent, agree with plain arithmetic. */
Test(json_schema, random_integer_steps_are_exact) {
    for (int round = 0; round < 12; round++) {
        int m = 2 + (int)(rnd() % 99), lo = (int)(rnd() % 3000) - 1500, hi = lo + (int)(rnd() % 3000);
        bool has_lo = rnd() % 3 != 0, has_hi = rnd() % 3 != 0;
        char schema[160];
        int len = snprintf(schema, sizeof(schema), "{\"type\":\"integer\",\"multipleOf\":%d", m);
        if (has_lo) len += snprintf(schema + len, sizeof(schema) - (size_t)len, ",\"minimum\":%d", lo);
        if (has_hi) len += snprintf(schema + len, sizeof(schema) - (size_t)len, ",\"maximum\":%d", hi);
        snprintf(schema + len, sizeof(schema) - (size_t)len, "}");
        grammar *g = schema_grammar(schema);
        for (int v = -4000; v <= 4000; v += 1 + (int)(rnd() % 23)) {
            char t[16];
            snprintf(t, sizeof(t), "%d", v);
            bool in = v % m == 0 && (!has_lo || v >= lo) && (!has_hi || v <= hi);
            cr_assert_eq(grammar_sentence(g, t), in, "%s: %d", schema, v);
        }
        grammar_unref(g);
    }
}

/* multipleOf: a power of ten limits the fraction digits (also with bounds); another step is
 * listed when both bounds leave at most 256 multiples; anything else is refused by name. */
Test(json_schema, multiple_of) {
    check("{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0,\"maximum\":100}", L("12.34", "100", "0.1", "0", "99.99"),
          L("12.345", "100.01", "-0.01", "0.001"));
    check("{\"type\":\"number\",\"multipleOf\":1}", L("3", "-4", "0"), L("3.5", "3.0"));
    check("{\"type\":\"number\",\"multipleOf\":0.5,\"minimum\":-1,\"maximum\":1.7}", L("-1", "-0.5", "0", "0.5", "1", "1.5"),
          L("0.25", "2", "-1.5", "1.7"));
    check("{\"type\":\"number\",\"multipleOf\":0.1,\"minimum\":0.1,\"maximum\":0.3}", L("0.1", "0.2", "0.3"), L("0.4", "0"));
    check("{\"type\":\"integer\",\"multipleOf\":1}", L("3", "-4"), L("3.5"));
    grammar *g = schema_grammar("{\"type\":\"integer\",\"multipleOf\":5,\"minimum\":-12,\"exclusiveMaximum\":20}");
    for (int v = -30; v <= 30; v++) {
        char t[16];
        snprintf(t, sizeof(t), "%d", v);
        cr_assert_eq(grammar_sentence(g, t), v % 5 == 0 && v >= -12 && v < 20, "%d", v);
    }
    grammar_unref(g);
    check("{\"type\":\"integer\",\"multipleOf\":2.5,\"minimum\":0,\"maximum\":10}", L("0", "5", "10"), L("2.5", "7.5", "3"));
    refused("{\"type\":\"number\",\"multipleOf\":0.3}", ATTND_ERR_UNSUPPORTED, "'multipleOf'");
    refused("{\"type\":\"integer\",\"multipleOf\":1000,\"minimum\":0}", ATTND_ERR_UNSUPPORTED, "'multipleOf'");
    refused("{\"type\":\"number\",\"multipleOf\":1e300}", ATTND_ERR_UNSUPPORTED, "'multipleOf'");
    refused("{\"type\":\"number\",\"multipleOf\":0}", ATTND_ERR_INVALID, "'multipleOf'");
    /* zod's .int().multipleOf(7): the bounds +-(2^53 - 1) are none, the step goes digit by digit */
    check("{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":-9007199254740991,\"maximum\":9007199254740991}",
          L("0", "7", "-14", "700000000000007", "999999999999994"), L("1", "-15", "8", "700000000000008", "07", "9999999999999996"));
    check("{\"type\":\"number\",\"multipleOf\":5,\"minimum\":0.5,\"maximum\":1e6}", L("5", "10", "1000000"),
          L("0", "3", "1000005", "-5"));
    refused("{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":1,\"maximum\":6}", ATTND_ERR_INVALID, "no multiple");
}

Test(json_schema, unsupported_keywords_are_named) {
    refused("{\"type\":\"number\",\"multipleOf\":0.3}", ATTND_ERR_UNSUPPORTED, "'multipleOf'");
    refused("{\"type\":\"array\",\"uniqueItems\":true}", ATTND_ERR_UNSUPPORTED, "'uniqueItems'");
    refused("{\"type\":\"object\",\"patternProperties\":{}}", ATTND_ERR_UNSUPPORTED, "'patternProperties'");
    refused("{\"not\":{}}", ATTND_ERR_UNSUPPORTED, "'not'");
    refused("{\"if\":{},\"then\":{}}", ATTND_ERR_UNSUPPORTED, "'if'");
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

/*
 * test_jinja.c — the Jinja engine (server/jinja/): renderings of real chat templates
 * byte-identical to jinja2 as Hugging Face configures it (tests/data/templates, made by
 * render_reference.py), the same error where a template raises, provenance marks that keep a
 * client's text plain, whitespace control, Python value semantics, and the sandbox's bounds.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"
#include "jinja_json.h"
#include "test_files.h"

#define TDIR ATTND_DATA_DIR "/templates/"

static json_t *load_json(const char *path) {
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    cr_assert(j, "%s: %s (line %d)", path, e.text, e.line);
    return j;
}

static const struct tm NOW = {.tm_year = 125, .tm_mon = 2, .tm_mday = 14, .tm_hour = 9, .tm_min = 26, .tm_sec = 53,
                              .tm_wday = 5, .tm_yday = 72};

/* Renders src with vars (strings as data; bos/eos as literal when given). *err_out gets the
 * error message on failure; returns the text (malloc'd) or NULL. */
static char *render_full(const char *src, size_t len, const json_t *vars, const char *bos, const char *eos,
                         jinja_output *keep, char *err_out, size_t err_n) {
    jinja_template *t = NULL;
    attnd_err err = {{0}};
    char *text = NULL;
    if (jinja_parse(src, len, &t, &err) != ATTND_OK) {
        snprintf(err_out, err_n, "%s", err.msg);
        return NULL;
    }
    /* production's limits, but for the wall clock: a loaded test machine must not turn a step
     * budget's error into a time cap's (a_render_stops_at_its_wall_clock_cap tests that one) */
    jinja_ctx *c = jinja_ctx_create(&(jinja_limits){.max_time_ms = 60000});
    cr_assert(c);
    jinja_set_json_vars(c, vars, JINJA_DATA);
    if (bos) jinja_ctx_set(c, "bos_token", jinja_str(c, bos, strlen(bos), JINJA_LITERAL));
    if (eos) jinja_ctx_set(c, "eos_token", jinja_str(c, eos, strlen(eos), JINJA_LITERAL));
    jinja_ctx_set_now(c, &NOW);
    jinja_output out;
    if (jinja_render(c, t, &out, &err) == ATTND_OK) {
        text = strdup(out.text);
        if (keep) *keep = out;
        else jinja_output_free(&out);
    } else {
        snprintf(err_out, err_n, "%s", err.msg);
    }
    jinja_ctx_destroy(c);
    jinja_template_destroy(t);
    return text;
}

static char *render_str(const char *src, const char *vars_json, char *err, size_t n) {
    json_t *v = json_loads(vars_json ? vars_json : "{}", 0, NULL);
    cr_assert(v, "bad vars in test: %s", vars_json);
    char *r = render_full(src, strlen(src), v, NULL, NULL, NULL, err, n);
    json_decref(v);
    return r;
}

static void expect(const char *src, const char *vars, const char *want) {
    char err[600] = "";
    char *got = render_str(src, vars, err, sizeof(err));
    cr_assert(got, "%s: %s", src, err);
    cr_expect_str_eq(got, want, "template %s", src);
    free(got);
}

static void expect_error(const char *src, const char *vars, const char *want_substr) {
    char err[600] = "";
    char *got = render_str(src, vars, err, sizeof(err));
    cr_assert_null(got, "%s rendered '%s', wanted an error", src, got ? got : "");
    cr_expect(strstr(err, want_substr), "%s: error '%s' lacks '%s'", src, err, want_substr);
}

// ---- the reference renderings -------------------------------------------------------------------

Test(jinja, real_templates_render_byte_identical_to_jinja2) {
    json_t *meta = load_json(TDIR "templates.json"), *cases = load_json(TDIR "cases.json");
    json_t *expected = load_json(TDIR "expected.json");
    const char *name, *cname;
    json_t *m, *vars;
    size_t n_text = 0, n_err = 0, bad = 0, n_templates = 0;
    json_object_foreach(meta, name, m) {
        char path[512];
        snprintf(path, sizeof(path), TDIR "%s.jinja", name);
        size_t len;
        char *src = test_read_file(path, &len);
        n_templates++;
        json_object_foreach(cases, cname, vars) {
            json_t *want = json_object_get(json_object_get(expected, name), cname);
            cr_assert(want, "expected.json lacks %s/%s: run render_reference.py", name, cname);
            char err[600] = "";
            char *got = render_full(src, len, vars, json_string_value(json_object_get(m, "bos_token")),
                                    json_string_value(json_object_get(m, "eos_token")), NULL, err, sizeof(err));
            const char *wtext = json_string_value(json_object_get(want, "text"));
            const char *werr = json_string_value(json_object_get(want, "error"));
            bool ok;
            if (wtext) ok = got && !strcmp(got, wtext), n_text++;
            else if (werr) ok = !got && strlen(err) >= strlen(werr) && !strcmp(err + strlen(err) - strlen(werr), werr), n_err++;
            else ok = !got, n_err++; /* jinja2 failed (undefined, type error): so must we */
            if (!ok && bad++ < 8)
                cr_log_error("%s / %s:\n  got:  %s\n  want: %s", name, cname, got ? got : err,
                             wtext ? wtext : werr ? werr : json_string_value(json_object_get(want, "detail")));
            free(got);
        }
        free(src);
    }
    cr_log_info("%zu templates: %zu renderings, %zu errors compared, %zu differ", n_templates, n_text, n_err, bad);
    cr_expect_geq(n_templates, 12);
    cr_expect_geq(n_text, 300, "only %zu renderings compared", n_text);
    cr_expect_eq(bad, 0, "%zu of %zu cases differ from jinja2", bad, n_text + n_err);
    json_decref(meta);
    json_decref(cases);
    json_decref(expected);
}

// ---- whitespace control and syntax ----------------------------------------------------------------

Test(jinja, trim_and_lstrip_blocks_as_hf_sets_them) {
    expect("{% if true %}\nyes\n{% endif %}\n", NULL, "yes\n");
    expect("  {% if true %}\n  x\n  {% endif %}\n", NULL, "  x\n");
    expect("a  {%- if true -%}  b  {%- endif %}", NULL, "ab");
    expect("a {{- ' b ' -}} c", NULL, "a b c");
    expect("  {%+ if true %}x{% endif %}", NULL, "  x");
    expect("line\n    {# note #}\nnext", NULL, "line\nnext");
    expect("{% raw %}{{ not }}{% endraw %}", NULL, "{{ not }}");
    expect("keep\n\n", NULL, "keep\n");
    expect("crlf\r\nline", NULL, "crlf\nline");
}

Test(jinja, loops_scopes_and_namespaces) {
    expect("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", NULL,
           "1TrueFalse3;2FalseFalse3;3FalseTrue3;");
    expect("{% for x in [] %}a{% else %}empty{% endfor %}", NULL, "empty");
    expect("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
           NULL, "0134");
    expect("{% set x = 5 %}{% for i in [1,2] %}[{{ x }}]{% set x = i %}{% endfor %}{{ x }}", NULL, "[5][5]5");
    expect("{% set ns = namespace(n=0) %}{% for i in [1,2,3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", NULL, "6");
    expect("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}", NULL, "a=1,b=2,");
    expect("{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}", NULL, "2242");
    expect("{% macro greet(name, p='Hi') %}{{ p }} {{ name }}{% endmacro %}{{ greet('a') }}|{{ greet('b', p='Yo') }}",
           NULL, "Hi a|Yo b");
    expect("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}", NULL, "[in]");
    expect("{% set s %}  body {{ 1 }}  {% endset %}({{ s | trim }})", NULL, "(body 1)");
    expect("{% filter upper %}abc{% endfilter %}", NULL, "ABC");
}

Test(jinja, python_value_semantics) {
    expect("{{ none }}|{{ true }}|{{ 1.0 }}|{{ 7 / 2 }}|{{ 7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}",
           NULL, "None|True|1.0|3.5|3|2|1024|1e+20|0.30000000000000004");
    expect("{{ [1, 'a', none, true, 1.5] }}|{{ {'a': \"it's\"} }}|{{ (1,) }}", NULL,
           "[1, 'a', None, True, 1.5]|{'a': \"it's\"}|(1,)");
    expect("{{ 'abc'[::-1] }} {{ [1,2,3][1:] }} {{ 'héllo' | length }} {{ 'héllo'[1] }} {{ 'a,b'.split(',') }}", NULL,
           "cba [2, 3] 5 é ['a', 'b']");
    expect("{{ x is defined }}{{ x }}{% if x %}y{% endif %}{{ x | length }}{{ x | default('d') }}", NULL, "False0d");
    expect("{{ ' x '.strip() }}|{{ 'hello world'.title() }}|{{ 'ab' | upper }}|{{ 'a-b' | replace('-', '+') }}", NULL,
           "x|Hello World|AB|a+b");
    expect("{{ 3.7 | round }} {{ 2.5 | round }} {{ 3 | round }} {{ '12' | int + 1 }} {{ 'x' | int }}", NULL, "4.0 2.0 3 13 0");
    expect("{{ 'b' in 'abc' }}{{ 2 in [1,2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1] }}", NULL, "TrueTrueTrueTrue");
    expect("{{ 1 if false }}|{{ 'a' ~ 1 ~ none }}|{{ 1 == 1.0 }}|{{ [1] == [1] }}", NULL, "|a1None|True|True");
}

Test(jinja, tojson_is_hf_json_dumps) {
    expect("{{ x | tojson }}", "{\"x\": {\"b\": [1, 2.5, null, true], \"a\": \"é\\\"\\n\"}}",
           "{\"b\": [1, 2.5, null, true], \"a\": \"é\\\"\\n\"}");
    expect("{{ x | tojson(indent=2) }}", "{\"x\": {\"a\": [1, {}], \"b\": []}}",
           "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
}

Test(jinja, filters_over_message_lists) {
    const char *v = "{\"m\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}]}";
    expect("{{ m | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}", v, "u");
    expect("{{ m | rejectattr('role', 'equalto', 'user') | list | length }}", v, "1");
    expect("{{ (m | first).role }} {{ (m | last)['content'] }}", v, "system u");
    expect("{{ m[0].get('missing', 'dflt') }} {{ m[0].keys() | list }}", v, "dflt ['role', 'content']");
}

// ---- errors, the sandbox and bounds --------------------------------------------------------------

Test(jinja, errors_name_the_line) {
    expect_error("line one\n{{ raise_exception('Conversation roles must alternate') }}", NULL,
                 "template line 2: Conversation roles must alternate");
    expect_error("a\nb\n{% if %}", NULL, "template line 3:");
    expect_error("{% for x in y %}", NULL, "template line 1: missing {% endfor %}");
    expect_error("\n{{ x.y.z }}", NULL, "template line 2: 'x' is undefined");
    expect_error("{{ 1 + 'a' }}", NULL, "unsupported operand");
    expect_error("{% include 'x' %}", NULL, "unknown tag 'include'");
    expect_error("{{ 'a' | nosuch }}", NULL, "no filter named 'nosuch'");
}

Test(jinja, sandbox_refuses_mutation_and_bounds_work) {
    expect_error("{% set l = [1] %}{{ l.append(2) }}", NULL, "unsafe");
    expect_error("{% for i in range(100000000) %}{% endfor %}", NULL, "steps");
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "nested deeper");
    expect_error("{{ 'x' * 100000000 }}", NULL, "size limit");
    expect_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 NULL, "limit");
    char deep[2000] = "{{ ";
    memset(deep + 3, '(', sizeof(deep) - 4);
    deep[sizeof(deep) - 1] = '\0';
    char err[600];
    cr_assert_null(render_str(deep, NULL, err, sizeof(err)));
}

// ---- hostile templates: each ends at once with an error (the audit of 644b6ea) -----------------

/* The audit's five hostile templates, shared with the fuzz corpus (tools/fuzz/corpus/fuzz_jinja/
 * hostile_*) and with test_template_hostile.sh. */
static const struct { const char *src, *error; } HOSTILE[] = {
    {"{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
     "nested deeper than 64 levels"},
    {"{{ \"\" * 9000000000000000000 }}", "exceeds the template's size limit"},
    {"{{ (\"abcd\" * 4611686018427387904)|length }}", "exceeds the template's size limit"},
    {"{{ range(60000)|unique|length }}", "steps"},
    {"{% set s = \"a\" * 3000000 %}{% for i in range(100000) %}{% if \"b\" in s %}x{% endif %}{% endfor %}", "steps"},
};

/* Seconds since an arbitrary origin. */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

Test(jinja, the_audits_hostile_templates_end_at_once_with_a_clear_error) {
    for (size_t i = 0; i < sizeof(HOSTILE) / sizeof(HOSTILE[0]); i++) {
        double t0 = now_s();
        expect_error(HOSTILE[i].src, NULL, HOSTILE[i].error);
        /* a guard against a hang, far above the budget's time: not a speed claim */
        cr_expect_lt(now_s() - t0, 10.0, "%s took %.1f s", HOSTILE[i].src, now_s() - t0);
    }
}

/* A namespace's list wrapped in another list `wraps` times, then `tail`. */
static char *nested(int wraps, const char *tail) {
    static char src[400];
    snprintf(src, sizeof(src), "{%% set ns = namespace(l=[]) %%}{%% for i in range(%d) %%}{%% set ns.l = [ns.l] %%}"
             "{%% endfor %%}%s", wraps, tail);
    return src;
}

Test(jinja, printing_and_tojson_share_the_depth_bound) {
    /* 63 wrappings of [] are 64 levels: printed and dumped whole */
    expect(nested(63, "{{ ns.l|tojson|length }} {{ ns.l|string|length }}"), NULL, "128 128");
    expect_error(nested(64, "{{ ns.l|tojson }}"), NULL, "nested deeper than 64 levels");
    expect_error(nested(64, "{{ ns.l }}"), NULL, "nested deeper than 64 levels");
    /* a dict made through namespace's mapping form counts as deep as what it holds */
    expect_error(nested(63, "{{ dict(x=ns.l) }}"), NULL, "nested deeper than 64 levels");
}

Test(jinja, sizes_are_checked_before_the_work) {
    expect_error("{{ 'ab' * 9223372036854775807 }}", NULL, "size limit");
    expect_error("{{ [1, 2] * 4611686018427387904 }}", NULL, "size limit");
    expect_error("{% set s = 'x' * 5000000 %}{{ s ~ s }}", NULL, "size limit");
    expect_error("{% set s = 'x' * 5000000 %}{{ s + s }}", NULL, "size limit");
    expect("{{ 'ab' * 3 }}|{{ '' * 2 }}|{{ [1] * 2 }}|{{ 'x' * -1 }}", NULL, "ababab||[1, 1]|");
}

Test(jinja, work_on_long_strings_is_charged_by_the_bytes_it_touches) {
    /* each search of 3 MB costs ~375k steps: a hundred thousand cannot fit in the budget */
    const char *s3 = "{% set s = 'a' * 3000000 %}{% for i in range(100000) %}";
    const char *scans[] = {"{{ s.replace('b', 'c')|length }}", "{{ s.find('b') }}", "{{ s.count('b') }}",
                           "{{ s.split('b')|length }}", "{{ s[1:2] }}", "{{ s[5] }}", "{{ s|length }}",
                           "{% if s is in s %}{% endif %}", "{% if 'b' in s %}{% endif %}",
                           "{{ s.startswith(s) }}", "{{ s.strip()|length }}", "{{ s.isdigit() }}"};
    for (size_t i = 0; i < sizeof(scans) / sizeof(scans[0]); i++) {
        char src[400];
        snprintf(src, sizeof(src), "%s%s{%% endfor %%}", s3, scans[i]);
        expect_error(src, NULL, "steps");
    }
    /* copies are charged too (a step per 64 bytes); the memory limit may end them first */
    const char *copies[] = {"{% set t = s ~ '' %}", "{{ [s, s]|join('')|length }}", "{% set t %}{{ s }}{% endset %}",
                            "{{ s.upper()|length }}"};
    for (size_t i = 0; i < sizeof(copies) / sizeof(copies[0]); i++) {
        char src[400], err[600] = "";
        snprintf(src, sizeof(src), "%s%s{%% endfor %%}", s3, copies[i]);
        char *got = render_str(src, NULL, err, sizeof(err));
        cr_expect_null(got, "%s rendered", src);
        cr_expect(strstr(err, "steps") || strstr(err, "memory limit"), "%s: %s", src, err);
        free(got);
    }
}

Test(jinja, a_wide_json_object_becomes_a_dict_in_linear_time) {
    /* JSON's keys are distinct: each is appended, not looked up among the others (100k keys
     * took ~5e9 comparisons before) */
    json_t *wide = json_object();
    char key[32];
    for (int i = 0; i < 100000; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        json_object_set_new(wide, key, json_integer(i));
    }
    json_t *vars = json_pack("{s:o}", "d", wide);
    const char *src = "{{ d|length }} {{ d['k99999'] }}";
    char err[600] = "";
    double t0 = now_s();
    char *got = render_full(src, strlen(src), vars, NULL, NULL, NULL, err, sizeof(err));
    cr_assert(got, "%s", err);
    cr_expect_str_eq(got, "100000 99999");
    cr_expect_lt(now_s() - t0, 10.0, "a guard against quadratic work, not a speed claim");
    free(got);
    json_decref(vars);
}

Test(jinja, slicing_a_long_string_copies_only_the_slice) {
    /* a slice of a 3 MB string is one copy, not a value per character (which would pass the
     * memory limit) */
    expect("{% set s = 'ab' * 1500000 %}{{ s[2:6] }}|{{ s[-3:] }}|{{ s[:0] }}|{{ s[5:2] }}", NULL, "abab|bab||");
    expect("{{ 'héllo'[1:4] }}|{{ 'héllo'[::2] }}|{{ 'héllo'[::-1] }}|{{ [1, 2, 3, 4][::-2] }}", NULL,
           "éll|hlo|olléh|[4, 2]");
}

Test(jinja, string_search_finds_what_python_finds) {
    expect("{{ 'abcabc'.replace('bc', 'X') }}|{{ 'abcabc'.replace('bc', 'X', 1) }}|{{ 'aaa'.replace('aa', 'b') }}",
           NULL, "aXaX|aXabc|ba");
    expect("{{ 'abcabc'.find('ca') }}|{{ 'abcabc'.find('z') }}|{{ 'aaaa'.count('aa') }}|{{ 'abc'.count('') }}",
           NULL, "2|-1|2|4");
    expect("{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'x' in 'axb' }}|{{ 'ab' is in 'xaby' }}", NULL,
           "['a', 'b', '', 'c']|['a', 'b,c']|True|True");
}

static double fake_ms(void *user) {
    double *t = user;
    return *t += 100; /* every reading is 100 ms later */
}

Test(jinja, a_render_stops_at_its_wall_clock_cap) {
    const char *src = "{% for i in range(100000) %}{{ i }}{% endfor %}";
    jinja_template *t = NULL;
    attnd_err err = {{0}};
    cr_assert_eq(jinja_parse(src, strlen(src), &t, &err), ATTND_OK);
    double clock = 0;
    jinja_ctx *c = jinja_ctx_create(&(jinja_limits){.max_time_ms = 1000});
    jinja_ctx_set_clock(c, fake_ms, &clock);
    jinja_output out;
    cr_expect_eq(jinja_render(c, t, &out, &err), ATTND_ERR_NOMEM);
    cr_expect(strstr(err.msg, "template line 1: the template ran longer than 1000 ms"), "%s", err.msg);
    cr_expect_lt(clock, 3000, "the clock was read %g times", clock / 100);
    jinja_ctx_destroy(c);
    /* the same render with a clock that stands still finishes */
    c = jinja_ctx_create(&(jinja_limits){.max_time_ms = 1000});
    cr_assert_eq(jinja_render(c, t, &out, &err), ATTND_OK, "%s", err.msg);
    jinja_output_free(&out);
    jinja_ctx_destroy(c);
    jinja_template_destroy(t);
}

Test(jinja, running_out_of_a_bound_is_nomem_and_raising_is_format) {
    const char *srcs[] = {"{{ range(100000000)|length }}", "{{ raise_exception('no') }}"};
    attnd_status want[] = {ATTND_ERR_NOMEM, ATTND_ERR_FORMAT};
    for (size_t i = 0; i < 2; i++) {
        jinja_template *t = NULL;
        attnd_err err = {{0}};
        cr_assert_eq(jinja_parse(srcs[i], strlen(srcs[i]), &t, &err), ATTND_OK);
        jinja_ctx *c = jinja_ctx_create(NULL);
        jinja_output out;
        cr_expect_eq(jinja_render(c, t, &out, &err), want[i], "%s: %s", srcs[i], err.msg);
        jinja_ctx_destroy(c);
        jinja_template_destroy(t);
    }
}

Test(jinja, strftime_now_reads_the_fixed_clock) {
    expect("{{ strftime_now('%d %b %Y') }}", NULL, "14 Mar 2025");
}

// ---- provenance ---------------------------------------------------------------------------------

/* The text of segments marked from_data, concatenated with '|' between segments. */
static char *data_text(const jinja_output *o) {
    char *s = calloc(o->len * 2 + 2, 1);
    for (size_t i = 0; i < o->n_segs; i++) {
        if (!o->segs[i].from_data) continue;
        if (*s) strcat(s, "|");
        strncat(s, o->text + o->segs[i].off, o->segs[i].len);
    }
    return s;
}

Test(jinja, client_text_stays_data_through_concatenation_and_filters) {
    const char *src = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content | trim + '<|im_end|>' }}"
                      "{% endfor %}{{ bos_token }}{{ messages[0].content[2:6] | upper }}";
    json_t *v = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \" <|im_end|>x \"}]}", 0, NULL);
    jinja_output out = {0};
    char err[600];
    char *text = render_full(src, strlen(src), v, "<s>", NULL, &out, err, sizeof(err));
    cr_assert(text, "%s", err);
    cr_expect_str_eq(text, "<|im_start|>user\n<|im_end|>x<|im_end|><s>|IM_");
    char *d = data_text(&out);
    cr_expect_str_eq(d, "user|<|im_end|>x||IM_", "data segments: %s", d);
    /* the template's own markers are literal */
    cr_expect_not(out.segs[0].from_data);
    cr_expect_eq(out.segs[0].len, strlen("<|im_start|>"));
    free(d);
    free(text);
    jinja_output_free(&out);
    json_decref(v);
}

Test(jinja, one_line_templates_render_as_jinja2_renders_them) {
    json_t *sem = load_json(TDIR "semantics.json");
    size_t i, bad = 0;
    json_t *c;
    json_array_foreach(sem, i, c) {
        const char *src = json_string_value(json_object_get(c, "template"));
        const char *want = json_string_value(json_object_get(c, "text"));
        char err[600] = "";
        char *got = render_str(src, NULL, err, sizeof(err));
        bool ok = want ? got && !strcmp(got, want) : !got;
        if (!ok && bad++ < 8) cr_log_error("%s\n  got:  %s\n  want: %s", src, got ? got : err, want ? want : "an error");
        free(got);
    }
    cr_expect_eq(bad, 0, "%zu of %zu one-line templates differ from jinja2", bad, json_array_size(sem));
    cr_expect_geq(json_array_size(sem), 30);
    json_decref(sem);
}

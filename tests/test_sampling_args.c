/*
 * test_sampling_args.c — the sampling flags of `attnd generate` (cli/sampling_args.c), end to end
 * through the executable: bad values exit 2 naming the flag, a seed reproduces the same tokens
 * at 1 and 2 threads, --stop cuts the text, --top-logprobs and --logit-bias do what they say.
 * Tests that run a model use tests/data/models/stories260K.gguf; the bad-value
 * tests fail before any model is opened, so they always run.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MODEL ATTND_DATA_DIR "/models/stories260K.gguf"
#define PROMPT_IDS "1,415,461,419,311,325,431,266,261,259,328,416" /* "Once upon a time" */

/* Runs `attnd generate ARGS` (stderr into the output), returns the exit status; *out receives
 * the output (malloc'd, NUL-terminated). */
static int run_generate(const char *args, char **out) {
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "'%s' generate %s 2>&1", ATTND_BINARY, args);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen failed");
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024) buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    int status = pclose(p);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static bool have_model(void) { return access(MODEL, R_OK) == 0; }

/* Runs a generation with --json and returns the parsed output (exit status must be 0). */
static json_t *generate_json(const char *args) {
    char full[2048], *out;
    snprintf(full, sizeof(full), "--model '%s' --json %s", MODEL, args);
    int rc = run_generate(full, &out);
    cr_assert_eq(rc, 0, "attnd generate %s: exit %d: %s", full, rc, out);
    json_error_t je;
    /* generated text may contain U+0000 (the tiny fixture models emit any byte), which --json
     * correctly writes as \u0000 */
    json_t *j = json_loads(out, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, &je);
    if (!j) cr_log_error("not JSON (%s): %s", je.text, out);
    free(out);
    cr_assert(j, "attnd generate --json did not print JSON");
    return j;
}

Test(sampling_args, bad_values_exit_2_naming_the_flag) {
    const struct {
        const char *args, *flag;
    } cases[] = {
        {"--temp nan", "--temp"},
        {"--temp -0.5", "--temp"},
        {"--top-k -1", "--top-k"},
        {"--top-k 1.5", "--top-k"},
        {"--top-p 1.01", "--top-p"},
        {"--top-p 0", "--top-p"},
        {"--min-p -0.1", "--min-p"},
        {"--typical-p 2", "--typical-p"},
        {"--repeat-penalty 0", "--repeat-penalty"},
        {"--repeat-last-n -2", "--repeat-last-n"},
        {"--presence-penalty nan", "--presence-penalty"},
        {"--frequency-penalty x", "--frequency-penalty"},
        {"--logit-bias 5", "--logit-bias"},
        {"--logit-bias 5=inf", "--logit-bias"},
        {"--logit-bias -3=1", "--logit-bias"},
        {"--logit-bias 3=1,,4=2", "--logit-bias"},
        {"--seed -1", "--seed"},
        {"--seed 99999999999999999999", "--seed"},
        {"--stop ''", "--stop"},
        {"--top-logprobs 21 --json", "--top-logprobs"},
        {"--top-logprobs 3", "--top-logprobs"},
        {"--temp", "--temp"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char args[512], *out;
        snprintf(args, sizeof(args), "--model /nonexistent.gguf --tokens 1,2 --n 2 %s", cases[i].args);
        int rc = run_generate(args, &out);
        cr_assert_eq(rc, 2, "'%s': exit %d, want 2: %s", cases[i].args, rc, out);
        cr_assert(strstr(out, cases[i].flag), "'%s': message does not name %s: %s", cases[i].args, cases[i].flag, out);
        free(out);
    }
}

Test(sampling_args, good_values_are_accepted) {
    cr_assert(have_model(), "no %s", MODEL);
    json_t *j = generate_json("--tokens " PROMPT_IDS " --n 4 --temp 0.7 --top-k 0 --top-p 1 --min-p 0 "
                              "--typical-p 0.95 --repeat-penalty 1.1 --repeat-last-n -1 --presence-penalty 0.5 "
                              "--frequency-penalty=-0.5 --logit-bias 3=-inf,4=false,5=2.5 --logit-bias 6=-1 "
                              "--seed 18446744073709551615 --stop zz --stop yy");
    cr_assert_eq(json_array_size(json_object_get(j, "tokens")), 4);
    json_decref(j);
}

Test(sampling_args, logit_bias_outside_the_vocabulary_exits_2) {
    cr_assert(have_model(), "no %s", MODEL);
    char *out;
    int rc = run_generate("--model '" MODEL "' --tokens 1,2 --n 2 --logit-bias 512=1", &out);
    cr_assert_eq(rc, 2, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "--logit-bias") && strstr(out, "512"), "%s", out);
    free(out);
}

static char *tokens_string(json_t *j) { return json_dumps(json_object_get(j, "tokens"), JSON_COMPACT); }

Test(sampling_args, same_seed_same_tokens_at_one_and_two_threads) {
    cr_assert(have_model(), "no %s", MODEL);
    char *runs[4];
    for (int r = 0; r < 4; r++) {
        json_t *j = generate_json(r % 2 ? "--tokens " PROMPT_IDS " --n 48 --temp 0.8 --seed 7 --threads 2"
                                        : "--tokens " PROMPT_IDS " --n 48 --temp 0.8 --seed 7 --threads 1");
        runs[r] = tokens_string(j);
        json_decref(j);
    }
    for (int r = 1; r < 4; r++) cr_assert_str_eq(runs[r], runs[0], "run %d differs", r);
    json_t *j = generate_json("--tokens " PROMPT_IDS " --n 48 --temp 0.8 --seed 8 --threads 1");
    char *other = tokens_string(j);
    cr_assert_str_neq(other, runs[0], "seeds 7 and 8 gave the same 48 tokens");
    json_t *g = generate_json("--tokens " PROMPT_IDS " --n 48 --temp 0 --threads 1");
    char *greedy = tokens_string(g);
    cr_assert_str_neq(greedy, runs[0], "--temp 0.8 sampled exactly the greedy tokens");
    free(greedy);
    free(other);
    json_decref(g);
    json_decref(j);
    for (int r = 0; r < 4; r++) free(runs[r]);
}

Test(sampling_args, stop_cuts_the_text_before_the_stop_string) {
    cr_assert(have_model(), "no %s", MODEL);
    json_t *full = generate_json("--prompt 'Once upon a time' --n 60");
    const char *text = json_string_value(json_object_get(full, "text"));
    size_t n_tokens = json_array_size(json_object_get(full, "tokens"));
    cr_assert_gt(strlen(text), 20, "greedy text too short to test: '%s'", text);
    /* A stop string taken from the middle of the text; the output must end right before its
     * first occurrence. */
    char stop[4];
    memcpy(stop, text + 15, 3);
    stop[3] = '\0';
    cr_assert(strchr(stop, '\'') == NULL && strchr(stop, '\\') == NULL);
    size_t cut = (size_t)(strstr(text, stop) - text);
    char args[256];
    snprintf(args, sizeof(args), "--prompt 'Once upon a time' --n 60 --stop 'never-there' --stop '%s'", stop);
    json_t *j = generate_json(args);
    const char *got = json_string_value(json_object_get(j, "text"));
    cr_assert_eq(strlen(got), cut, "stop '%s': got '%s', full '%s'", stop, got, text);
    cr_assert_eq(strncmp(got, text, cut), 0);
    cr_assert_lt(json_array_size(json_object_get(j, "tokens")), n_tokens, "generation did not end at the stop");
    json_decref(j);
    json_decref(full);
}

Test(sampling_args, top_logprobs_list_each_token_best_first) {
    cr_assert(have_model(), "no %s", MODEL);
    json_t *j = generate_json("--tokens " PROMPT_IDS " --n 6 --top-logprobs 5");
    json_t *toks = json_object_get(j, "tokens"), *lps = json_object_get(j, "logprobs");
    cr_assert_eq(json_array_size(lps), json_array_size(toks));
    for (size_t i = 0; i < json_array_size(lps); i++) {
        json_t *e = json_array_get(lps, i), *top = json_object_get(e, "top_logprobs");
        cr_assert_eq(json_integer_value(json_object_get(e, "id")), json_integer_value(json_array_get(toks, i)));
        cr_assert_eq(json_array_size(top), 5);
        /* Greedy: the chosen token is the most likely one. */
        cr_assert_eq(json_integer_value(json_object_get(json_array_get(top, 0), "id")),
                     json_integer_value(json_object_get(e, "id")));
        double lp = json_real_value(json_object_get(e, "logprob"));
        cr_assert(lp <= 0 && lp > -50, "logprob %g", lp);
        for (size_t k = 1; k < 5; k++)
            cr_assert_geq(json_real_value(json_object_get(json_array_get(top, k - 1), "logprob")),
                          json_real_value(json_object_get(json_array_get(top, k), "logprob")));
    }
    json_decref(j);
}

Test(sampling_args, logit_bias_bans_and_forces_tokens) {
    cr_assert(have_model(), "no %s", MODEL);
    json_t *g = generate_json("--tokens " PROMPT_IDS " --n 1");
    json_int_t first = json_integer_value(json_array_get(json_object_get(g, "tokens"), 0));
    char args[256];
    snprintf(args, sizeof(args), "--tokens " PROMPT_IDS " --n 8 --logit-bias %lld=false", (long long)first);
    json_t *b = generate_json(args);
    json_t *toks = json_object_get(b, "tokens");
    for (size_t i = 0; i < json_array_size(toks); i++)
        cr_assert_neq(json_integer_value(json_array_get(toks, i)), first, "banned token %lld generated",
                      (long long)first);
    json_t *f = generate_json("--tokens " PROMPT_IDS " --n 3 --logit-bias 300=100 --temp 1 --seed 3");
    toks = json_object_get(f, "tokens");
    for (size_t i = 0; i < json_array_size(toks); i++) cr_assert_eq(json_integer_value(json_array_get(toks, i)), 300);
    json_decref(f);
    json_decref(b);
    json_decref(g);
}

Test(sampling_args, generation_ends_at_eos_unless_ignore_eos) {
    cr_assert(have_model(), "no %s", MODEL);
    /* a huge bias makes EOS (id 2 in the llama vocabulary) the only likely token */
    json_t *e = generate_json("--tokens " PROMPT_IDS " --n 5 --logit-bias 2=100");
    json_t *toks = json_object_get(e, "tokens");
    cr_assert_eq(json_array_size(toks), 1, "generation must end at the end-of-sequence token");
    cr_assert_eq(json_integer_value(json_array_get(toks, 0)), 2);
    cr_assert_str_eq(json_string_value(json_object_get(e, "text")), "", "EOS adds no text");
    json_t *i = generate_json("--tokens " PROMPT_IDS " --n 5 --logit-bias 2=100 --ignore-eos");
    cr_assert_eq(json_array_size(json_object_get(i, "tokens")), 5);
    json_decref(i);
    json_decref(e);
}

Test(sampling_args, help_lists_every_sampling_flag) {
    char *out;
    cr_assert_eq(run_generate("--help", &out), 0);
    const char *flags[] = {"--temp", "--top-k", "--top-p", "--min-p", "--typical-p", "--repeat-penalty",
                           "--repeat-last-n", "--presence-penalty", "--frequency-penalty", "--logit-bias",
                           "--seed", "--stop", "--top-logprobs", "--ignore-eos"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        cr_assert(strstr(out, flags[i]), "--help does not mention %s", flags[i]);
    free(out);
}

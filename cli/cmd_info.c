/*
 * cmd_info.c — `attnd info --model PATH [--json]`: what a GGUF file holds, without computing.
 * Reads only metadata and tensor infos, so it works on any well-formed GGUF, including ones
 * whose architecture or tensor types the engine cannot run; the exit status says whether it
 * runs (0) or not (1), so scripts can ask.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "attnd/cpuinfo.h"
#include "attnd/embed.h"
#include "attnd/gguf.h"
#include "attnd/kv.h"
#include "attnd/model.h"
#include "attnd/tokenizer.h"
#include "commands.h"
#include "../server/api/chat.h"

static const char *USAGE =
    "usage: attnd info [--model PATH] [--ctx-size N] [--json]\n"
    "\n"
    "Prints the architecture, hyper-parameters, vocabulary size and tokenizer kind, tensor\n"
    "count by type, file size and parameter count of a GGUF model file; then whether attnd can\n"
    "run it (or why not), the chat template `attnd serve` would use, and the KV cache size per\n"
    "token and per full context.\n"
    "  -m, --model PATH  the GGUF file (default: the shipped default model)\n"
    "  -c, --ctx-size N  as if served with ctx_size N (0, the default: the file's context): which\n"
    "                    LongRoPE factors apply\n"
    "  --json            print one JSON object instead of text\n"
    "Exits 0 when attnd runs the file, 1 when it does not (\"runs: no\" says why) or cannot read it.\n";

/* Hyper-parameters printed when present, as "<arch>.<suffix>". */
static const char *HPARAMS[] = {
    "context_length",          "embedding_length",       "block_count",
    "feed_forward_length",     "attention.head_count",   "attention.head_count_kv",
    "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count",
    "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
    "rope.scaling.attn_factor", "vocab_size", "attention.layer_norm_epsilon", "pooling_type",
};

/* A scalar metadata value as JSON (new reference), or NULL for arrays. */
static json_t *scalar_json(const gguf_value *v) {
    switch (v->type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        return json_integer((json_int_t)v->v.u64);
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64:
        return json_integer((json_int_t)v->v.i64);
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: return json_real(v->v.f64);
    case GGUF_VT_BOOL: return json_boolean(v->v.b);
    case GGUF_VT_STRING: return json_stringn_nocheck(v->v.str.str, v->v.str.len);
    default: return NULL;
    }
}

static const char *str_or(const gguf_file *f, const char *key, const char *dflt) {
    const char *s;
    return gguf_get_str(f, key, &s, NULL) == ATTND_OK ? s : dflt;
}

/* Per token, f16: the global layers' KV bytes, the sliding-window (local) layers' and their window
 * (a local layer keeps only its window's positions), each kind's head size and KV heads; the
 * layers that read an earlier layer's cache (shared: no bytes of their own). */
static void add_layer_kv(json_t *root, const model *m) {
    const model_info *mi = model_info_get(m);
    int shared_global = mi->n_shared_kv_layers - mi->n_shared_local;
    json_t *kl = json_pack("{s:i, s:i, s:i, s:I, s:I, s:i, s:I}", "global",
                           mi->n_layer - mi->n_local_layers - mi->n_recurrent_layers - shared_global, "local",
                           mi->n_local_layers - mi->n_shared_local, "window", mi->window, "global_bytes_per_token_f16",
                           (json_int_t)kv_layer_bytes_per_token(m, KV_F16, false), "local_bytes_per_token_f16",
                           (json_int_t)kv_layer_bytes_per_token(m, KV_F16, true), "recurrent", mi->n_recurrent_layers,
                           "state_bytes_per_sequence", (json_int_t)kv_state_bytes(m));
    json_object_set_new(kl, "shared", json_integer(mi->n_shared_kv_layers));
    json_object_set_new(kl, "global_head", json_pack("{s:i, s:i}", "head_dim", mi->head_dim, "kv_heads", mi->n_head_kv));
    if (mi->n_local_layers)
        json_object_set_new(kl, "local_head",
                            json_pack("{s:i, s:i}", "head_dim", mi->head_dim_swa, "kv_heads", mi->n_head_kv_swa));
    if (mi->kv_latent) /* one row per token and layer for every head; what per-head K and V would take */
        json_object_set_new(kl, "latent",
                            json_pack("{s:i, s:I, s:I}", "values_per_token_per_layer", mi->kv_latent,
                                      "bytes_per_token_f16", (json_int_t)kv_bytes_per_token(m, KV_F16),
                                      "per_head_bytes_per_token_f16",
                                      (json_int_t)((size_t)2 * mi->kv_per_head * (size_t)mi->n_layer)));
    json_object_set_new(root, "kv_layers", kl);
    /* multi-token prediction: the file's nextn blocks, and whether one drafts (attnd/spec.h) */
    json_object_set_new(root, "mtp", json_pack("{s:i, s:b}", "layers", mi->n_mtp_layers, "drafts", mi->mtp));
    if (mi->n_expert)
        json_object_set_new(root, "experts", json_pack("{s:i, s:i, s:i}", "count", mi->n_expert, "used",
                                                       mi->n_expert_used, "feed_forward_length", mi->n_ff_exp));
}

/* What the model is for (attnd/embed.h): "roles" (generate, embed, rank), the pooling and the
 * floats per pooled vector, the classifier's outputs. */
static void add_roles(json_t *root, const model *m) {
    static const char *const names[] = {"generate", "embed", "rank"};
    json_t *roles = json_array();
    for (int i = 0; i < 3; i++)
        if (model_roles(m) & (1u << i)) json_array_append_new(roles, json_string(names[i]));
    json_object_set_new(root, "roles", roles);
    json_object_set_new(root, "encoder", json_boolean(model_is_encoder(m)));
    json_object_set_new(root, "pooling", json_string(model_pooling_name(model_pooling_type(m))));
    json_object_set_new(root, "embedding_dim", json_integer(model_embed_dim(m)));
    json_object_set_new(root, "classifier_outputs", json_integer(model_n_cls_out(m)));
}

static void print_roles(const json_t *root) {
    printf("roles:        ");
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(root, "roles"), i, r) printf("%s %s", i ? "," : "", json_string_value(r));
    json_int_t dim = json_integer_value(json_object_get(root, "embedding_dim"));
    json_int_t cls = json_integer_value(json_object_get(root, "classifier_outputs"));
    printf(" (%s; pooling %s, %" JSON_INTEGER_FORMAT " float%s per input",
           json_is_true(json_object_get(root, "encoder")) ? "an encoder: attention both ways" : "a decoder",
           json_string_value(json_object_get(root, "pooling")), dim, dim == 1 ? "" : "s");
    if (cls) printf("; a classification head of %" JSON_INTEGER_FORMAT " output%s", cls, cls == 1 ? "" : "s");
    printf(")\n");
}

/* The serve default of kv_budget_mb: the budget "kv_contexts_in_default_budget" counts in. */
#define INFO_KV_BUDGET ((size_t)1024 << 20)

/* KV bytes per token and per full context of every cache type the model can use (the quantized
 * ones need head_dim a multiple of 32), and how many full contexts the default budget holds. */
static void add_kv_sizes(json_t *root, const model *m) {
    json_t *tok = json_object(), *ctx = json_object(), *fit = json_object();
    int n_ctx = model_info_get(m)->n_ctx;
    const kv_type types[] = {KV_F16, KV_F32, KV_Q8_0, KV_Q4_0};
    for (size_t i = 0; i < ATTND_ARRAY_LEN(types); i++) {
        if (kv_type_unsupported(m, types[i])) continue;
        const char *name = kv_type_name(types[i]);
        size_t per_ctx = kv_context_bytes(m, n_ctx, types[i]);
        json_object_set_new(tok, name, json_integer((json_int_t)kv_bytes_per_token(m, types[i])));
        json_object_set_new(ctx, name, json_integer((json_int_t)per_ctx));
        json_object_set_new(fit, name, json_integer((json_int_t)(per_ctx ? INFO_KV_BUDGET / per_ctx : 0)));
    }
    json_object_set_new(root, "kv_bytes_per_token", tok);
    json_object_set_new(root, "kv_bytes_per_context", ctx);
    json_object_set_new(root, "kv_contexts_in_default_budget", fit);
}

/* What running the file would mean: "runs" (and "refused" with the reason when not), the chat
 * template serve would pick, KV bytes per token and per full context. Adds them to root. */
static void add_run_facts(json_t *root, const char *path, int ctx_size) {
    model *m = NULL;
    tokenizer *t = NULL;
    attnd_err err = {{0}};
    int n_ctx;
    bool runs = model_load(&m, path, &err) == ATTND_OK && cli_model_context(m, "info", ctx_size, &n_ctx, &err) == ATTND_OK &&
                tok_load(&t, model_gguf(m), &err) == ATTND_OK;
    json_object_set_new(root, "runs", json_boolean(runs));
    if (!runs) {
        json_object_set_new(root, "refused", json_string(err.msg));
    } else {
        const char *tmpl = NULL;
        chat_family fam;
        gguf_get_str(model_gguf(m), "tokenizer.chat_template", &tmpl, NULL);
        bool found = chat_detect(tmpl, &fam);
        json_object_set_new(root, "chat_template", json_string(chat_family_name(fam)));
        json_object_set_new(root, "chat_template_source",
                            json_string(found ? "detected from tokenizer.chat_template"
                                              : tmpl && *tmpl ? "fallback: the model's template is not recognised"
                                                              : "fallback: the model has no template"));
        chat_template ct;
        attnd_err terr;
        if (chat_template_load(&ct, tmpl, NULL, NULL, t, &terr) == ATTND_OK)
            json_object_set_new(root, "chat_template_rendering", json_string(chat_source_str(&ct)));
        chat_template_free(&ct);
        add_kv_sizes(root, m);
        add_roles(root, m);
        json_object_set_new(root, "kernels", json_string(cpuinfo_kernels()));
        add_layer_kv(root, m);
        if (gguf_find_tensor(model_gguf(m), "rope_factors_long.weight")) {
            json_object_set_new(root, "longrope", json_string(model_info_get(m)->rope_long ? "long" : "short"));
            json_object_set_new(root, "longrope_context", json_integer(model_run_context(m)));
        }
    }
    tok_destroy(t);
    model_destroy(m);
}

/* One line: bytes per token and full contexts in the default budget, per cache type. */
static void print_kv_fit(const json_t *root) {
    json_t *kt = json_object_get(root, "kv_bytes_per_token"), *fit = json_object_get(root, "kv_contexts_in_default_budget");
    printf("KV types:     ");
    const char *key;
    json_t *v;
    json_object_foreach(kt, key, v) {
        printf(" %s %" JSON_INTEGER_FORMAT " bytes/token = %" JSON_INTEGER_FORMAT " contexts;", key, json_integer_value(v),
               json_integer_value(json_object_get(fit, key)));
    }
    printf(" (full contexts in a %zu MiB kv_budget_mb)\n", INFO_KV_BUDGET >> 20);
}

static void print_run_facts(const json_t *root) {
    if (!json_is_true(json_object_get(root, "runs"))) {
        printf("runs:          no: %s\n", json_string_value(json_object_get(root, "refused")));
        return;
    }
    json_t *kt = json_object_get(root, "kv_bytes_per_token"), *kc = json_object_get(root, "kv_bytes_per_context");
    printf("runs:          yes\n");
    print_roles(root);
    printf("kernels:       %s\n", json_string_value(json_object_get(root, "kernels")));
    if (json_is_true(json_object_get(root, "encoder"))) { /* no chat, no KV: it embeds and ranks only */
        printf("KV cache:      none (an encoder keeps nothing between requests)\n");
        return;
    }
    printf("chat template: %s (%s)\n", json_string_value(json_object_get(root, "chat_template")),
           json_string_value(json_object_get(root, "chat_template_source")));
    if (json_object_get(root, "chat_template_rendering"))
        printf("chat template rendering: %s\n", json_string_value(json_object_get(root, "chat_template_rendering")));
    printf("KV cache:      %" JSON_INTEGER_FORMAT " bytes/token f16 (%" JSON_INTEGER_FORMAT " f32); a full context: "
           "%.1f MiB f16\n",
           json_integer_value(json_object_get(kt, "f16")), json_integer_value(json_object_get(kt, "f32")),
           json_integer_value(json_object_get(kc, "f16")) / 1048576.0);
    print_kv_fit(root);
    json_t *mtp = json_object_get(root, "mtp");
    if (json_integer_value(json_object_get(mtp, "layers")))
        printf("MTP:           %" JSON_INTEGER_FORMAT " nextn block(s); %s\n", json_integer_value(json_object_get(mtp, "layers")),
               json_is_true(json_object_get(mtp, "drafts"))
                   ? "present: the model drafts its own next tokens by default (setting mtp, --no-mtp)"
                   : "not run (attnd drafts with a single Qwen3.5 nextn block only)");
    json_t *kl = json_object_get(root, "kv_layers");
    printf("KV per layer:  %" JSON_INTEGER_FORMAT " global layers: %" JSON_INTEGER_FORMAT " bytes/token f16",
           json_integer_value(json_object_get(kl, "global")),
           json_integer_value(json_object_get(kl, "global_bytes_per_token_f16")));
    if (json_integer_value(json_object_get(kl, "local")))
        printf("; %" JSON_INTEGER_FORMAT " local layers (window %" JSON_INTEGER_FORMAT "): %" JSON_INTEGER_FORMAT
               " bytes/token f16, held for the window only",
               json_integer_value(json_object_get(kl, "local")), json_integer_value(json_object_get(kl, "window")),
               json_integer_value(json_object_get(kl, "local_bytes_per_token_f16")));
    if (json_integer_value(json_object_get(kl, "shared")))
        printf("; %" JSON_INTEGER_FORMAT " shared layers: none, they read earlier layers' caches",
               json_integer_value(json_object_get(kl, "shared")));
    if (json_integer_value(json_object_get(kl, "recurrent")))
        printf("; %" JSON_INTEGER_FORMAT " recurrent layers (Gated DeltaNet): %" JSON_INTEGER_FORMAT
               " bytes/sequence f32, whatever its length",
               json_integer_value(json_object_get(kl, "recurrent")),
               json_integer_value(json_object_get(kl, "state_bytes_per_sequence")));
    json_t *lat = json_object_get(kl, "latent");
    if (lat)
        printf("; latent attention: %" JSON_INTEGER_FORMAT " values per token and layer for every head, %"
               JSON_INTEGER_FORMAT " bytes/token f16 (per-head K and V: %" JSON_INTEGER_FORMAT ")",
               json_integer_value(json_object_get(lat, "values_per_token_per_layer")),
               json_integer_value(json_object_get(lat, "bytes_per_token_f16")),
               json_integer_value(json_object_get(lat, "per_head_bytes_per_token_f16")));
    printf("\n");
    json_t *gh = json_object_get(kl, "global_head"), *lh = json_object_get(kl, "local_head");
    if (lh && !json_equal(gh, lh)) /* Gemma 4: each kind its own geometry */
        printf("KV heads:      global layers %" JSON_INTEGER_FORMAT " x %" JSON_INTEGER_FORMAT ", local layers %" JSON_INTEGER_FORMAT
               " x %" JSON_INTEGER_FORMAT " (KV heads x head size)\n",
               json_integer_value(json_object_get(gh, "kv_heads")), json_integer_value(json_object_get(gh, "head_dim")),
               json_integer_value(json_object_get(lh, "kv_heads")), json_integer_value(json_object_get(lh, "head_dim")));
    const char *lr = json_string_value(json_object_get(root, "longrope"));
    if (lr)
        printf("LongRoPE:      %s factors (a context of %" JSON_INTEGER_FORMAT " %s rope.scaling.original_context_length)\n",
               lr, json_integer_value(json_object_get(root, "longrope_context")), !strcmp(lr, "long") ? "beyond" : "within");
    json_t *ex = json_object_get(root, "experts");
    if (ex)
        printf("experts:       %" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT " per token, width %" JSON_INTEGER_FORMAT
               "\n",
               json_integer_value(json_object_get(ex, "used")), json_integer_value(json_object_get(ex, "count")),
               json_integer_value(json_object_get(ex, "feed_forward_length")));
}

/* Tensor counts by type and the parameter count into root; the first few tensors of types the
 * engine does not compute into unsupported. Returns the parameter count. */
static uint64_t add_tensor_summary(const gguf_file *f, json_t *root, json_t *unsupported) {
    json_t *by_type = json_object();
    uint64_t params = 0;
    for (uint64_t i = 0; i < gguf_tensor_count(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        const char *tn = gguf_type_name(t->type);
        json_t *c = json_object_get(by_type, tn);
        json_object_set_new(by_type, tn, json_integer(c ? json_integer_value(c) + 1 : 1));
        params += t->n_elems;
        if (!gguf_type_computable(t->type) && json_array_size(unsupported) < 8)
            json_array_append_new(unsupported, json_string(t->name));
    }
    json_object_set_new(root, "tensor_count", json_integer((json_int_t)gguf_tensor_count(f)));
    json_object_set_new(root, "tensors_by_type", by_type);
    json_object_set_new(root, "parameters", json_integer((json_int_t)params));
    json_object_set_new(root, "metadata_count", json_integer((json_int_t)gguf_kv_count(f)));
    return params;
}

/* The first tensor of a type the engine does not compute, and what to do about it. */
static void print_unsupported_note(const gguf_file *f, const json_t *unsupported) {
    if (!json_array_size(unsupported)) return;
    const gguf_tensor *ut = gguf_find_tensor(f, json_string_value(json_array_get(unsupported, 0)));
    printf("note:          some tensors use types the engine does not compute (e.g. %s, %s); re-quantize\n"
           "               from the F16/BF16 model with `attnd quantize` (e.g. to Q4_K_M or IQ4_XS)\n",
           ut->name, gguf_type_name(ut->type));
}

/* The human-readable form of what root holds (the JSON form is root itself). */
static void print_text(const gguf_file *f, const char *model, const json_t *root, const json_t *unsupported,
                       uint64_t params) {
    const char *arch = json_string_value(json_object_get(root, "architecture"));
    json_t *hp = json_object_get(root, "hyperparameters"), *by_type = json_object_get(root, "tensors_by_type");
    uint64_t vocab = (uint64_t)json_integer_value(json_object_get(root, "vocab_size"));
    if (gguf_file_count(f) > 1)
        printf("file:          %s (%" PRIu64 " bytes in a split set of %d files, GGUF v%u)\n", model, gguf_file_size(f),
               gguf_file_count(f), gguf_version(f));
    else
        printf("file:          %s (%" PRIu64 " bytes, GGUF v%u)\n", model, gguf_file_size(f), gguf_version(f));
    printf("name:          %s\n", str_or(f, "general.name", "(none)"));
    printf("architecture:  %s\n", arch);
    const char *k;
    json_t *v;
    json_object_foreach(hp, k, v) {
        if (json_is_real(v)) printf("  %-32s %g\n", k, json_real_value(v));
        else printf("  %-32s %" JSON_INTEGER_FORMAT "\n", k, json_integer_value(v));
    }
    printf("tokenizer:     %s%s%s, vocab %" PRIu64 "\n", str_or(f, "tokenizer.ggml.model", "(none)"),
           *str_or(f, "tokenizer.ggml.pre", "") ? " / pre " : "", str_or(f, "tokenizer.ggml.pre", ""), vocab);
    printf("tensors:       %" PRIu64 " (", gguf_tensor_count(f));
    bool first = true;
    json_object_foreach(by_type, k, v) {
        printf("%s%s: %" JSON_INTEGER_FORMAT, first ? "" : ", ", k, json_integer_value(v));
        first = false;
    }
    printf(")\nparameters:    %" PRIu64 " (%.2f M)\n", params, params / 1e6);
    print_unsupported_note(f, unsupported);
    print_run_facts(root);
}

int cmd_info(int argc, char **argv) {
    const char *model = NULL;
    bool as_json = false;
    int ctx_size = 0;
    const cli_opt opts[] = {CLI_OPT_STR("--model", &model), CLI_OPT_INT("--ctx-size", &ctx_size, 0, 1 << 24),
                            CLI_OPT_SET("--json", &as_json)};
    if (!cli_parse_opts("info", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) return 0;
    char *dflt;
    model = cli_resolve_model("info", model, &dflt);

    gguf_file *f;
    attnd_err err;
    if (gguf_open(&f, model, &err) != ATTND_OK) {
        fprintf(stderr, "attnd info: %s\n", err.msg);
        free(dflt);
        return 1;
    }

    const char *arch = str_or(f, "general.architecture", "(unknown)");
    const gguf_array *tokens = NULL;
    uint64_t vocab = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_VT_STRING, &tokens, NULL) == ATTND_OK
                         ? tokens->n : 0;

    json_t *root = json_object();
    json_object_set_new(root, "file", json_string(model));
    json_object_set_new(root, "file_size", json_integer((json_int_t)gguf_file_size(f)));
    json_object_set_new(root, "gguf_version", json_integer(gguf_version(f)));
    json_object_set_new(root, "architecture", json_string(arch));
    json_object_set_new(root, "name", json_string(str_or(f, "general.name", "")));
    json_t *hp = json_object();
    for (size_t i = 0; i < ATTND_ARRAY_LEN(HPARAMS); i++) {
        char key[256];
        snprintf(key, sizeof(key), "%s.%s", arch, HPARAMS[i]);
        const gguf_kv *kv = gguf_find_kv(f, key);
        json_t *j = kv ? scalar_json(&kv->value) : NULL;
        if (j) json_object_set_new(hp, HPARAMS[i], j);
    }
    json_object_set_new(root, "hyperparameters", hp);
    json_object_set_new(root, "vocab_size", json_integer((json_int_t)vocab));
    json_object_set_new(root, "tokenizer", json_string(str_or(f, "tokenizer.ggml.model", "(none)")));
    json_object_set_new(root, "tokenizer_pre", json_string(str_or(f, "tokenizer.ggml.pre", "")));

    json_t *unsupported = json_array();
    uint64_t params = add_tensor_summary(f, root, unsupported);
    add_run_facts(root, model, ctx_size);

    if (as_json) {
        json_dumpf(root, stdout, JSON_COMPACT);
        putchar('\n');
    } else {
        print_text(f, model, root, unsupported, params);
    }
    int rc = json_is_true(json_object_get(root, "runs")) ? 0 : 1;
    json_decref(unsupported);
    json_decref(root);
    gguf_close(f);
    free(dflt);
    return rc;
}

/*
 * tiny_model.c — writes one of the generated models of tests/family_specs.h, for
 * tests/data/regenerate.sh (llama.cpp's references are made from exactly the files the suite
 * generates).
 *
 *   tiny_model FAMILY OUT.gguf [--chat-template FILE]   FAMILY: see tiny_model --list (the small
 *                                  model); FILE's text becomes tokenizer.chat_template
 *   tiny_model --list              the families, one a line
 *   tiny_model --list-hybrid       the hybrid (Gated DeltaNet) families, one a line
 *   tiny_model --list-gemma4       the Gemma 4 variants, one a line
 *   tiny_model --hybrid-prompt     the hybrid comparison's prompt ids, comma-separated
 *   tiny_model --hybrid-prompt     the hybrid comparison's prompt ids, comma-separated (also the
 *                                  latent-attention comparison's)
 *   tiny_model --list-mla          the latent-attention (deepseek2) models, one a line
 *   tiny_model --list-encoders     the encoders (encoder_fixture.h), one a line
 *   tiny_model --encoder-inputs    their comparison's inputs: one line of comma-separated ids each
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family_specs.h"

/* The text of path, malloc'd and NUL-terminated; NULL when it cannot be read. */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    char *s = NULL;
    long n = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
    if (n >= 0 && !fseek(f, 0, SEEK_SET) && (s = malloc((size_t)n + 1)) && fread(s, 1, (size_t)n, f) == (size_t)n) {
        s[n] = '\0';
    } else {
        free(s);
        s = NULL;
    }
    if (f) fclose(f);
    return s;
}

#include "encoder_fixture.h"

/* The encoder options: 0 when argv was one of them (done), -1 when not. */
static int encoder_main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--list-encoders")) {
        for (size_t i = 0; i < N_ENC; i++) printf("%s\n", ENC_NAMES[i]);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--encoder-inputs")) {
        int32_t ids[ENC_N_INPUTS][ENC_MAX_LEN];
        int len[ENC_N_INPUTS];
        enc_inputs(ids, len);
        for (int i = 0; i < ENC_N_INPUTS; i++)
            for (int t = 0; t < len[i]; t++) printf("%d%s", ids[i][t], t + 1 < len[i] ? "," : "\n");
        return 0;
    }
    for (size_t i = 0; argc == 3 && i < N_ENC; i++) {
        if (strcmp(argv[1], ENC_NAMES[i])) continue;
        tiny_spec sp = enc_named(ENC_NAMES[i]);
        if (enc_write(argv[2], &sp)) {
            fprintf(stderr, "tiny_model: cannot write %s\n", argv[2]);
            return 1;
        }
        return 0;
    }
    return -1;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (size_t i = 0; i < N_FAMILIES; i++) printf("%s\n", FAMILY_NAMES[i]);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--hybrid-prompt")) { /* the ids of hybrid_prompt, comma-separated */
        int32_t ids[HYBRID_N_PROMPT];
        hybrid_prompt(ids);
        for (int i = 0; i < HYBRID_N_PROMPT; i++) printf("%s%d", i ? "," : "", ids[i]);
        printf("\n");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--list-gemma4")) {
        for (size_t i = 0; i < N_GEMMA4; i++) printf("%s\n", GEMMA4_NAMES[i]);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--list-mla")) {
        for (size_t i = 0; i < N_MLA; i++) printf("%s\n", MLA_NAMES[i]);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--list-hybrid")) {
        for (size_t i = 0; i < N_HYBRID; i++) printf("%s\n", HYBRID_NAMES[i]);
        return 0;
    }
    int enc = encoder_main(argc, argv);
    if (enc >= 0) return enc;
    bool tmpl = argc == 5 && !strcmp(argv[3], "--chat-template");
    if (argc != 3 && !tmpl) {
        fprintf(stderr, "usage: tiny_model FAMILY OUT.gguf [--chat-template FILE] | tiny_model --list | --list-hybrid "
                        "| --list-mla | --list-gemma4 | --hybrid-prompt\n");
        return 2;
    }
    for (size_t i = 0; i < N_FAMILIES; i++) {
        if (strcmp(argv[1], FAMILY_NAMES[i])) continue;
        tiny_spec sp = family_small(FAMILY_NAMES[i]);
        char *text = tmpl ? read_text(argv[4]) : NULL;
        if (tmpl && !text) {
            fprintf(stderr, "tiny_model: cannot read %s\n", argv[4]);
            return 1;
        }
        sp.chat_template = text;
        int rc = tiny_write(argv[2], &sp);
        free(text);
        if (rc) {
            fprintf(stderr, "tiny_model: cannot write %s\n", argv[2]);
            return 1;
        }
        return 0;
    }
    for (size_t i = 0; i < N_HYBRID; i++) {
        if (strcmp(argv[1], HYBRID_NAMES[i])) continue;
        hy_spec hs = hybrid_small(HYBRID_NAMES[i]);
        if (hy_write(argv[2], &hs)) {
            fprintf(stderr, "tiny_model: cannot write %s\n", argv[2]);
            return 1;
        }
        return 0;
    }
    for (size_t i = 0; i < N_GEMMA4; i++) {
        if (strcmp(argv[1], GEMMA4_NAMES[i])) continue;
        g4_spec gs = gemma4_small(GEMMA4_NAMES[i]);
        char *text = tmpl ? read_text(argv[4]) : NULL;
        gs.base.chat_template = text;
        int rc = g4_write(argv[2], &gs);
        free(text);
        if (rc) {
            fprintf(stderr, "tiny_model: cannot write %s\n", argv[2]);
            return 1;
        }
        return 0;
    }
    for (size_t i = 0; i < N_MLA; i++) {
        if (strcmp(argv[1], MLA_NAMES[i])) continue;
        ml_spec ms = mla_small(MLA_NAMES[i]);
        if (ml_write(argv[2], &ms)) {
            fprintf(stderr, "tiny_model: cannot write %s\n", argv[2]);
            return 1;
        }
        return 0;
    }
    fprintf(stderr, "tiny_model: unknown family '%s'\n", argv[1]);
    return 2;
}

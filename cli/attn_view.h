/*
 * attn_view.h — (cli-private) ways to look at a filled attn_capture for `attnd attention`: an SVG
 * heatmap a person can open in a browser, and a short text summary for the terminal.
 */
#ifndef ATTND_CLI_ATTN_VIEW_H
#define ATTND_CLI_ATTN_VIEW_H

#include <stdio.h>

#include "attnd/attn_capture.h"

typedef struct attn_view {
    const attn_capture *c;
    char **labels;      /* (n_tokens) display text of each position, borrowed */
    int n_tokens;       /* positions with a label: prompt + generated */
    int n_prompt;
    const char *model;  /* model name for the title, borrowed */
} attn_view;

/* Row pos of the li-th captured layer: head hi (index among the captured heads), or the mean
 * over every captured head when hi < 0, as dense weights out[0..end) by position, returning end:
 * the row's keys are [first, end) (attn_capture_keys: 0..pos, or an encoder's whole input),
 * top_k rows scattered, the rest 0. */
int attn_view_row(const attn_capture *c, int li, int hi, int pos, float *out);

/*
 * Writes an SVG document: the heatmap of layer li (head hi, or the mean over the captured heads
 * when hi < 0) with the tokens on both axes (rows: the attending position, columns: the
 * positions it attends to; hovering a cell shows both tokens and the weight), a colour scale,
 * and a thumbnail per captured head of that layer. Returns false on a write error.
 */
bool attn_view_svg(FILE *f, const attn_view *v, int li, int hi);

/* For each captured layer: each row's three heaviest positions (head hi or the mean). */
void attn_view_text(FILE *f, const attn_view *v, int hi);

#endif

/*
 * attn_view.c — SVG heatmap and text summary of captured attention (see attn_view.h).
 *
 * The SVG is plain and self-contained (no script, no external font): a square of
 * positions × positions where the causal area is white and the masked upper triangle grey (an
 * encoder's: its input's square white), one
 * rect per visible weight coloured on a square-root scale (rows sum to 1, so most weights are
 * small; the root keeps them visible), a <title> on each main cell for hovering, and a thumbnail
 * per head. Token labels are XML-escaped and shortened; newlines and tabs are shown as ↵ and ⇥.
 * A Gated DeltaNet layer's rows are signed effective weights (attnd/attn_capture.h): a diverging
 * scale, blue for positive and red for negative, on the square root of |w| over the map's largest.
 */
#include "attn_view.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define LABEL_MAX 14          /* characters of a token label before it is shortened */
#define FONT "DejaVu Sans, Helvetica, Arial, sans-serif"
#define NOTE "Attention weights show where a head looks, not why the model answered."

int attn_view_row(const attn_capture *c, int li, int hi, int pos, float *out) {
    int first, end = attn_capture_keys(c, pos, &first);
    end += first;
    memset(out, 0, sizeof(float) * (size_t)end);
    int h0 = hi < 0 ? 0 : hi, h1 = hi < 0 ? attn_capture_layer_heads(c, li) : hi + 1;
    float scale = 1.0f / (float)(h1 - h0);
    for (int h = h0; h < h1; h++) {
        const float *w;
        const int32_t *ix;
        int n = attn_capture_row(c, li, h, pos, &w, &ix);
        for (int j = 0; j < n; j++) out[ix ? ix[j] : first + j] += w[j] * scale;
    }
    return end;
}

// ---- colours and text -------------------------------------------------------------------------

/* A white-to-deep-blue scale, linear in sqrt(weight) between these stops. */
static const unsigned char STOPS[5][3] = {{255, 255, 255}, {198, 219, 239}, {107, 174, 214}, {33, 113, 181}, {8, 48, 107}};

static void colour(char out[8], float w) {
    double t = sqrt(w < 0 ? 0 : w > 1 ? 1 : w) * 4;
    int i = t >= 4 ? 3 : (int)t;
    double f = t - i;
    int rgb[3];
    for (int k = 0; k < 3; k++) rgb[k] = (int)lround(STOPS[i][k] + (STOPS[i + 1][k] - STOPS[i][k]) * f);
    snprintf(out, 8, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

/* The same scale for a signed weight w of a map whose largest |w| is top: blue above 0, red below. */
static const unsigned char NEG[5][3] = {{255, 255, 255}, {252, 187, 161}, {251, 106, 74}, {203, 24, 29}, {103, 0, 13}};

static void colour_signed(char out[8], float w, float top) {
    if (w >= 0) {
        colour(out, top > 0 ? w / top : 0);
        return;
    }
    double t = sqrt(fmin(1, -w / top)) * 4;
    int i = t >= 4 ? 3 : (int)t;
    double f = t - i;
    int rgb[3];
    for (int k = 0; k < 3; k++) rgb[k] = (int)lround(NEG[i][k] + (NEG[i + 1][k] - NEG[i][k]) * f);
    snprintf(out, 8, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

/* The largest |w| of the li-th layer's map (hi < 0: the mean of its heads). */
static float map_top(const attn_view *v, int li, int hi, float *buf) {
    int first, n_rows = attn_capture_rows(v->c, &first);
    float top = 0;
    for (int p = first; p < first + n_rows; p++)
        for (int j = 0, end = attn_view_row(v->c, li, hi, p, buf); j < end; j++) top = fmaxf(top, fabsf(buf[j]));
    return top;
}

/* Writes s as XML character data, at most LABEL_MAX characters (then "…"). */
static void put_label(FILE *f, const char *s) {
    int chars = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p & 0xC0) != 0x80 && ++chars > LABEL_MAX) {
            fputs("…", f);
            return;
        }
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\n': fputs("↵", f); break;
        case '\t': fputs("⇥", f); break;
        default:
            if (*p < 0x20) fputc('?', f);
            else fputc(*p, f);
        }
    }
}

static int label_chars(const char *s) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += (*p & 0xC0) != 0x80;
    return n < LABEL_MAX ? n : LABEL_MAX + 1;
}

// ---- SVG pieces ---------------------------------------------------------------------------------

typedef struct grid {
    double x, y, cell; /* top-left corner and cell size in px */
    int rows;          /* positions 0..rows-1 on both axes */
} grid;

/* The causal area white (a staircase below and on the diagonal), the masked rest grey. */
/* The grey of masked cells, and white where rows have keys: the causal triangle, or an
 * encoder's square per input. */
static void draw_frame(FILE *f, const grid *g, const attn_capture *c) {
    double side = g->rows * g->cell;
    fprintf(f, "<rect x='%.2f' y='%.2f' width='%.2f' height='%.2f' fill='#ececec'/>\n", g->x, g->y, side, side);
    for (int i = 0; i < attn_capture_n_inputs(c); i++) {
        int first, n = attn_capture_input(c, i, &first);
        fprintf(f, "<rect x='%.2f' y='%.2f' width='%.2f' height='%.2f' fill='#fff'/>\n", g->x + first * g->cell,
                g->y + first * g->cell, n * g->cell, n * g->cell);
    }
    if (attn_capture_n_inputs(c)) return;
    fprintf(f, "<path fill='#fff' d='M%.2f,%.2f", g->x, g->y);
    for (int i = 0; i < g->rows; i++) fprintf(f, "h%.3fv%.3f", g->cell, g->cell);
    fprintf(f, "H%.2fZ'/>\n", g->x);
}

/* Cells of one map; with titles (hover text) when labels are given. buf: (rows) scratch. */
static void draw_cells(FILE *f, const attn_view *v, const grid *g, int li, int hi, float *buf, bool titles) {
    int first, n_rows = attn_capture_rows(v->c, &first);
    float min_w = titles ? 0.002f : 0.01f; /* lighter cells are indistinguishable from white */
    bool dn = attn_capture_layer_deltanet(v->c, li);
    float top = dn ? map_top(v, li, hi, buf) : 1;
    char col[8];
    for (int p = first; p < first + n_rows; p++) {
        int end = attn_view_row(v->c, li, hi, p, buf);
        for (int j = 0; j < end; j++) {
            if ((dn ? fabsf(buf[j]) / top : buf[j]) < min_w || !(top > 0)) continue;
            if (dn) colour_signed(col, buf[j], top);
            else colour(col, buf[j]);
            fprintf(f, "<rect x='%.2f' y='%.2f' width='%.3f' height='%.3f' fill='%s'>", g->x + j * g->cell,
                    g->y + p * g->cell, g->cell, g->cell, col);
            if (titles) { /* as the playground's tooltip words it */
                fputs("<title>token \u2018", f);
                put_label(f, v->labels[p]);
                fputs("\u2019 \u2192 token \u2018", f);
                put_label(f, v->labels[j]);
                fprintf(f, dn ? "\u2019: effective weight %.3g (layer %d, " : "\u2019: weight %.3f (layer %d, ", buf[j],
                        attn_capture_layer(v->c, li));
                if (hi < 0) fputs("mean of heads)</title>", f);
                else fprintf(f, "head %d)</title>", attn_capture_head(v->c, hi));
            }
            fputs("</rect>\n", f);
        }
    }
}

static void draw_labels(FILE *f, const attn_view *v, const grid *g, double font) {
    fprintf(f, "<g font-size='%.1f' fill='#333' style='white-space:pre'>\n", font);
    for (int i = 0; i < g->rows; i++) {
        double mid = (i + 0.5) * g->cell;
        const char *gen = i >= v->n_prompt ? " fill='#b3421a'" : ""; /* generated tokens in another colour */
        fprintf(f, "<text x='%.2f' y='%.2f' text-anchor='end' dominant-baseline='central'%s>", g->x - 6, g->y + mid,
                gen);
        put_label(f, v->labels[i]);
        fprintf(f, "</text>\n<text transform='translate(%.2f,%.2f) rotate(-60)' dominant-baseline='central'%s>",
                g->x + mid, g->y - 6, gen);
        put_label(f, v->labels[i]);
        fputs("</text>\n", f);
    }
    fputs("</g>\n", f);
}

/* A DeltaNet map's bar: -top at the bottom, 0 in the middle, +top at the top, each half on the
 * square-root scale of |w| / top. */
static void draw_signed_scale(FILE *f, double x, double y, double h, float top) {
    fputs("<defs><linearGradient id='sscale' x1='0' y1='1' x2='0' y2='0'>", f);
    for (int i = 4; i >= 0; i--)
        fprintf(f, "<stop offset='%.3f' stop-color='#%02x%02x%02x'/>", (4 - i) / 8.0, NEG[i][0], NEG[i][1], NEG[i][2]);
    for (int i = 1; i < 5; i++)
        fprintf(f, "<stop offset='%.3f' stop-color='#%02x%02x%02x'/>", 0.5 + i / 8.0, STOPS[i][0], STOPS[i][1],
                STOPS[i][2]);
    fputs("</linearGradient></defs>\n", f);
    fprintf(f, "<rect x='%.2f' y='%.2f' width='14' height='%.2f' fill='url(#sscale)' stroke='#999' "
               "stroke-width='0.5'/>\n", x, y, h);
    static const double ticks[] = {-1, -0.25, 0, 0.25, 1};
    for (size_t i = 0; i < ATTND_ARRAY_LEN(ticks); i++) {
        double ty = y + h / 2 - (ticks[i] < 0 ? -1 : 1) * sqrt(fabs(ticks[i])) * h / 2;
        fprintf(f, "<line x1='%.2f' x2='%.2f' y1='%.2f' y2='%.2f' stroke='#666'/>", x + 14, x + 18, ty, ty);
        fprintf(f, "<text x='%.2f' y='%.2f' font-size='11' fill='#333' dominant-baseline='central'>%.3g</text>\n",
                x + 21, ty, ticks[i] * top);
    }
    fprintf(f, "<text x='%.2f' y='%.2f' font-size='11' fill='#333'>effective weight</text>\n", x - 4, y - 10);
}

/* A vertical colour bar of height h at (x, y), ticked on the square-root scale. */
static void draw_scale(FILE *f, double x, double y, double h) {
    fputs("<defs><linearGradient id='scale' x1='0' y1='1' x2='0' y2='0'>", f);
    for (int i = 0; i < 5; i++)
        fprintf(f, "<stop offset='%.2f' stop-color='#%02x%02x%02x'/>", i / 4.0, STOPS[i][0], STOPS[i][1], STOPS[i][2]);
    fputs("</linearGradient></defs>\n", f);
    fprintf(f, "<rect x='%.2f' y='%.2f' width='14' height='%.2f' fill='url(#scale)' stroke='#999' stroke-width='0.5'/>\n",
            x, y, h);
    static const double ticks[] = {0, 0.02, 0.1, 0.25, 0.5, 1};
    for (size_t i = 0; i < ATTND_ARRAY_LEN(ticks); i++) {
        double ty = y + h - sqrt(ticks[i]) * h;
        fprintf(f, "<line x1='%.2f' x2='%.2f' y1='%.2f' y2='%.2f' stroke='#666'/>", x + 14, x + 18, ty, ty);
        fprintf(f, "<text x='%.2f' y='%.2f' font-size='11' fill='#333' dominant-baseline='central'>%g</text>\n",
                x + 21, ty, ticks[i]);
    }
    fprintf(f, "<text x='%.2f' y='%.2f' font-size='11' fill='#333'>weight</text>\n", x - 4, y - 10);
}

bool attn_view_svg(FILE *f, const attn_view *v, int li, int hi) {
    int first, n_rows = attn_capture_rows(v->c, &first);
    int R = first + n_rows, n_heads = attn_capture_layer_heads(v->c, li);
    bool dn = attn_capture_layer_deltanet(v->c, li);
    if (R < 1) return false;
    float *buf = malloc(sizeof(float) * (size_t)R);
    if (!buf) return false;
    double cell = fmin(28, fmax(11, 620.0 / R)), font = fmin(13, cell * 0.8);
    int chars = 1;
    for (int i = 0; i < R; i++) chars = label_chars(v->labels[i]) > chars ? label_chars(v->labels[i]) : chars;
    double label_w = chars * font * 0.62 + 12, side = R * cell;
    grid g = {.x = 24 + label_w, .y = 84 + label_w * 0.87, .cell = cell, .rows = R};
    int per_line = n_heads < 6 ? n_heads : 6, thumb = 130;
    bool generated = v->n_prompt < R;
    const char *about = dn ? "Each row is a token; its cells are the signed effective weights of the earlier tokens' "
                             "values in its Gated DeltaNet output (not a softmax)."
                        : attn_capture_n_inputs(v->c)
                            ? "Each row is a token; its cells are the tokens it attends to, before and after it "
                              "(an encoder)."
                        : generated ? "Each row is a token; its cells are the earlier tokens it attends to (generated "
                                      "tokens in orange)."
                                    : "Each row is a token; its cells are the earlier tokens it attends to.";
    /* as wide as the content: the map with its scale (bar, ticks, labels: ~70 px), the thumbnails,
     * and the two lines of text (12 px DejaVu Sans: ~6.4 px a character) */
    double text_w = 24 + 6.4 * (double)(strlen(about) > strlen(NOTE) ? strlen(about) : strlen(NOTE)) + 16;
    double thumbs_y = g.y + side + 40, W = fmax(fmax(g.x + side + 24 + 70, 24 + per_line * (thumb + 20) + 4), text_w);
    double H = thumbs_y + ((n_heads + per_line - 1) / per_line) * (thumb + 34) + 16;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' viewBox='0 0 %.0f %.0f' "
               "font-family='" FONT "'>\n<rect width='100%%' height='100%%' fill='#fff'/>\n", W, H, W, H);
    fprintf(f, "<text x='24' y='30' font-size='18' font-weight='bold' fill='#111'>");
    put_label(f, v->model);
    if (hi < 0) fprintf(f, " · layer %d · mean of %d heads</text>\n", attn_capture_layer(v->c, li), n_heads);
    else fprintf(f, " · layer %d · head %d</text>\n", attn_capture_layer(v->c, li), attn_capture_head(v->c, hi));
    fprintf(f, "<text x='24' y='50' font-size='12' fill='#555'>%s</text>\n<text x='24' y='66' font-size='12' "
               "fill='#555'>" NOTE "</text>\n", about);
    draw_frame(f, &g, v->c);
    draw_cells(f, v, &g, li, hi, buf, true);
    draw_labels(f, v, &g, font);
    if (dn) draw_signed_scale(f, g.x + side + 24, g.y, fmin(side, 240), map_top(v, li, hi, buf));
    else draw_scale(f, g.x + side + 24, g.y, fmin(side, 240));
    for (int h = 0; h < n_heads; h++) {
        grid t = {.x = 24 + (h % per_line) * (thumb + 20), .y = thumbs_y + (h / per_line) * (thumb + 34) + 18,
                  .cell = (double)thumb / R, .rows = R};
        fprintf(f, "<text x='%.2f' y='%.2f' font-size='12' fill='#333'>head %d</text>\n", t.x, t.y - 6,
                attn_capture_head(v->c, h));
        draw_frame(f, &t, v->c);
        draw_cells(f, v, &t, li, h, buf, false);
    }
    fputs("</svg>\n", f);
    free(buf);
    return !ferror(f);
}

// ---- text -------------------------------------------------------------------------------------------

void attn_view_text(FILE *f, const attn_view *v, int hi) {
    int first, n_rows = attn_capture_rows(v->c, &first);
    float *buf = malloc(sizeof(float) * (size_t)(first + n_rows + 1));
    if (!buf) return;
    for (int li = 0; li < attn_capture_n_layers(v->c); li++) {
        bool dn = attn_capture_layer_deltanet(v->c, li);
        if (hi >= attn_capture_layer_heads(v->c, li)) continue;
        fprintf(f, "layer %d%s, ", attn_capture_layer(v->c, li),
                dn ? " (Gated DeltaNet: signed effective weights)" : "");
        if (hi < 0) fprintf(f, "mean of %d %sheads:\n", attn_capture_layer_heads(v->c, li), dn ? "value " : "");
        else fprintf(f, "%shead %d:\n", dn ? "value " : "", attn_capture_head(v->c, hi));
        for (int p = first; p < first + n_rows; p++) {
            int end = attn_view_row(v->c, li, hi, p, buf);
            fprintf(f, "%5d %-16s ->", p, v->labels[p]);
            for (int k = 0; k < 3 && k < end; k++) { /* the largest weights (DeltaNet: |w|), each once */
                int best = -1;
                for (int j = 0; j < end; j++)
                    if (!isnan(buf[j]) && (best < 0 || (dn ? fabsf(buf[j]) > fabsf(buf[best]) : buf[j] > buf[best])))
                        best = j;
                if (best < 0) break;
                fprintf(f, dn ? "  %d '%s' %+.3g" : "  %d '%s' %.3f", best, v->labels[best], buf[best]);
                buf[best] = NAN;
            }
            fputc('\n', f);
        }
    }
    free(buf);
}

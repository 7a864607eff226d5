/*
 * grammar_match.c — running a compiled grammar (see attnd/grammar.h): the per-sequence parse
 * state, and the vocabulary trie that gives the full set of allowed tokens in one walk.
 *
 * A state is a set of parse stacks. A stack is a chain of nodes {position, parent} in a node
 * pool: the top's position is the next element to match (always a character set once
 * expanded), the parents are where each enclosing rule continues. Chains share their tails, so
 * expanding a rule reference or consuming a character adds a node or two and copies nothing;
 * the empty chain (-1) is a finished sentence. Stacks are compared by walking their chains.
 *
 * Trial steps (a token check, the trie walk) append nodes and stacks past the committed ones
 * and are undone by truncation; accepting a token keeps its result and then copies the live
 * chains into a fresh pool (so the pool does not grow with the length of the output). Buffers
 * grow to a high-water mark and are then reused: steady-state steps allocate nothing.
 */
#include "grammar_internal.h"

#include <stdlib.h>
#include <string.h>

#include "block.h"

// ---- the vocabulary trie --------------------------------------------------------------------

/* Trie nodes in depth-first pre-order; a node's subtree is [i, skip). */
typedef struct vnode {
    uint32_t depth;    /* 1 = a first byte */
    uint32_t skip;     /* the first node after this subtree */
    uint32_t tok_first, tok_n; /* the tokens spelled exactly by the path: sorted[tok_first ..) */
    unsigned char byte;
} vnode;

struct grammar_vocab {
    int n;
    char *bytes;          /* every token's bytes, concatenated */
    size_t *off;          /* (n + 1) token i is bytes[off[i] .. off[i + 1]) */
    int32_t *sorted;      /* ids with bytes, in byte order */
    char *mem;            /* the block of bytes, off and sorted (layout_tokens) */
    vnode *nodes;
    size_t n_nodes;
    uint32_t max_depth;
    char *names;          /* every token's vocabulary string, concatenated (for <text> terminals) */
    size_t *name_off;     /* (n + 1) */
    int32_t *by_name;     /* (n_named) ids with a name, in name order */
    char *names_mem;      /* the block of names, name_off and by_name (layout_names) */
    int n_named;
};

/* Where bytes (total, at least 1), off and sorted go in v->mem, for n tokens (block.h). */
static size_t layout_tokens(grammar_vocab *v, char *mem, int n, size_t total) {
    block b = {.mem = mem};
    v->bytes = block_take(&b, total ? total : 1, sizeof(*v->bytes));
    v->off = block_take(&b, (size_t)n + 1, sizeof(*v->off));
    v->sorted = block_take(&b, (size_t)n, sizeof(*v->sorted));
    return block_size(&b);
}

/* Where names (total, at least 1), name_off and by_name go in v->names_mem (block.h). */
static size_t layout_names(grammar_vocab *v, char *mem, size_t total) {
    block b = {.mem = mem};
    v->names = block_take(&b, total ? total : 1, sizeof(*v->names));
    v->name_off = block_take(&b, (size_t)v->n + 1, sizeof(*v->name_off));
    v->by_name = block_take(&b, (size_t)v->n, sizeof(*v->by_name));
    return block_size(&b);
}

static const grammar_vocab *g_sort_vocab; /* qsort has no context argument: set for the sort only */

static int cmp_token_bytes(const void *a, const void *b) {
    const grammar_vocab *v = g_sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Builds the pre-order trie from the sorted ids (shared prefixes share nodes). */
static attnd_status build_trie(grammar_vocab *v, size_t n_sorted, attnd_err *err) {
    size_t total = v->off[v->n];
    uint32_t *open = calloc((size_t)v->max_depth + 1, sizeof(*open)); /* the node at each depth of the path */
    if (!open || !(v->nodes = malloc((total ? total : 1) * sizeof(*v->nodes)))) {
        free(open);
        return attnd_fail(err, ATTND_ERR_NOMEM, "grammar: out of memory indexing the vocabulary");
    }
    size_t path_len = 0, n = 0;
    const char *prev = NULL;
    size_t prev_len = 0;
    for (size_t k = 0; k < n_sorted; k++) {
        int32_t id = v->sorted[k];
        const char *s = v->bytes + v->off[id];
        size_t len = v->off[id + 1] - v->off[id], common = 0;
        while (prev && common < len && common < prev_len && s[common] == prev[common]) common++;
        if (!(prev && common == len && len == prev_len)) { /* not the same bytes as the previous id */
            for (size_t d = common; d < path_len; d++) v->nodes[open[d + 1]].skip = (uint32_t)n;
            for (size_t d = common; d < len; d++) {
                open[d + 1] = (uint32_t)n;
                v->nodes[n++] = (vnode){.depth = (uint32_t)d + 1, .tok_first = (uint32_t)k, .byte = (unsigned char)s[d]};
            }
            path_len = len;
            v->nodes[open[len]].tok_first = (uint32_t)k;
        }
        v->nodes[open[len]].tok_n++;
        prev = s, prev_len = len;
    }
    for (size_t d = 0; d < path_len; d++) v->nodes[open[d + 1]].skip = (uint32_t)n;
    v->n_nodes = n;
    free(open);
    return ATTND_OK;
}

attnd_status grammar_vocab_create(grammar_vocab **out, int n_vocab, const char *const *bytes, const size_t *lens,
                                  attnd_err *err) {
    *out = NULL;
    if (n_vocab <= 0) return attnd_fail(err, ATTND_ERR_INVALID, "grammar: the vocabulary is empty");
    grammar_vocab *v = calloc(1, sizeof(*v));
    size_t total = 0;
    for (int i = 0; i < n_vocab; i++) total += lens[i];
    if (!v || !(v->mem = block_alloc(layout_tokens(v, NULL, n_vocab, total)))) {
        grammar_vocab_destroy(v);
        return attnd_fail(err, ATTND_ERR_NOMEM, "grammar: out of memory indexing the vocabulary");
    }
    layout_tokens(v, v->mem, n_vocab, total);
    v->n = n_vocab;
    size_t o = 0, n_sorted = 0;
    for (int i = 0; i < n_vocab; i++) {
        v->off[i] = o;
        if (lens[i]) memcpy(v->bytes + o, bytes[i], lens[i]);
        o += lens[i];
        if (lens[i] > v->max_depth) v->max_depth = (uint32_t)lens[i];
        if (lens[i]) v->sorted[n_sorted++] = i;
    }
    v->off[n_vocab] = o;
    g_sort_vocab = v;
    qsort(v->sorted, n_sorted, sizeof(*v->sorted), cmp_token_bytes);
    g_sort_vocab = NULL;
    attnd_status st = build_trie(v, n_sorted, err);
    if (st != ATTND_OK) {
        grammar_vocab_destroy(v);
        return st;
    }
    *out = v;
    return ATTND_OK;
}

static int cmp_names(const grammar_vocab *v, int32_t id, const char *s, size_t n) {
    size_t l = v->name_off[id + 1] - v->name_off[id];
    int c = memcmp(v->names + v->name_off[id], s, l < n ? l : n);
    return c ? c : l < n ? -1 : l > n;
}

static int cmp_by_name(const void *a, const void *b) {
    const grammar_vocab *v = g_sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int c = cmp_names(v, x, v->names + v->name_off[y], v->name_off[y + 1] - v->name_off[y]);
    return c ? c : x < y ? -1 : x > y;
}

attnd_status grammar_vocab_set_names(grammar_vocab *v, const char *const *names, const size_t *lens, attnd_err *err) {
    size_t total = 0;
    for (int i = 0; i < v->n; i++) total += lens[i];
    grammar_vocab probe = {.n = v->n}; /* measured aside: v keeps the names it has if this fails */
    char *mem = block_alloc(layout_names(&probe, NULL, total));
    if (!mem) return attnd_fail(err, ATTND_ERR_NOMEM, "grammar: out of memory indexing the vocabulary");
    free(v->names_mem); /* the names set before, if any */
    v->names_mem = mem;
    layout_names(v, mem, total);
    char *nm = v->names;
    size_t *off = v->name_off;
    int32_t *by = v->by_name;
    v->n_named = 0;
    size_t o = 0;
    for (int i = 0; i < v->n; i++) {
        off[i] = o;
        if (lens[i]) memcpy(nm + o, names[i], lens[i]), by[v->n_named++] = i;
        o += lens[i];
    }
    off[v->n] = o;
    g_sort_vocab = v;
    qsort(by, (size_t)v->n_named, sizeof(*by), cmp_by_name);
    g_sort_vocab = NULL;
    return ATTND_OK;
}

/* The id whose name is s[n] (the lowest when several), or -1. */
static int32_t find_name(const grammar_vocab *v, const char *s, size_t n) {
    int lo = 0, hi = v->n_named;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (cmp_names(v, v->by_name[mid], s, n) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < v->n_named && cmp_names(v, v->by_name[lo], s, n) == 0 ? v->by_name[lo] : -1;
}

attnd_status grammar_vocab_from_tokenizer(grammar_vocab **out, const tokenizer *tok, attnd_err *err) {
    int n = tok_n_vocab(tok);
    const char **bytes = calloc(n > 0 ? (size_t)n : 1, sizeof(*bytes)), **names = calloc(n > 0 ? (size_t)n : 1, sizeof(*names));
    size_t *lens = calloc(n > 0 ? (size_t)n : 1, sizeof(*lens)), *nlens = calloc(n > 0 ? (size_t)n : 1, sizeof(*nlens));
    attnd_status st = ATTND_ERR_NOMEM;
    if (!bytes || !lens || !names || !nlens) {
        attnd_fail(err, st, "grammar: out of memory indexing the vocabulary");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        if (!tok_token_bytes(tok, i, false, &bytes[i], &lens[i])) lens[i] = 0;
        names[i] = tok_piece(tok, i);
        nlens[i] = names[i] ? strlen(names[i]) : 0;
    }
    st = grammar_vocab_create(out, n, bytes, lens, err);
    if (st == ATTND_OK && (st = grammar_vocab_set_names(*out, names, nlens, err)) != ATTND_OK) {
        grammar_vocab_destroy(*out);
        *out = NULL;
    }
done:
    free(bytes), free(lens), free(names), free(nlens);
    return st;
}

attnd_status grammar_vocab_check(const grammar *g, const grammar_vocab *v, attnd_err *err) {
    for (size_t i = 0; i < g->n_toks; i++) {
        const gtoken *t = &g->toks[i];
        if (t->id >= v->n)
            return attnd_fail(err, ATTND_ERR_INVALID, "grammar: token <[%d]> is outside the %d-token vocabulary", (int)t->id,
                              v->n);
        if (t->id < 0 && (!v->names || find_name(v, t->text, t->len) < 0))
            return attnd_fail(err, ATTND_ERR_INVALID, "grammar: %.*s is not a token of the vocabulary", (int)t->len,
                              t->text);
    }
    return ATTND_OK;
}

void grammar_vocab_destroy(grammar_vocab *v) {
    if (!v) return;
    free(v->mem);       /* bytes, off, sorted */
    free(v->nodes);
    free(v->names_mem); /* names, name_off, by_name */
    free(v);
}

int grammar_vocab_size(const grammar_vocab *v) { return v->n; }

bool grammar_vocab_token(const grammar_vocab *v, int32_t id, const char **bytes, size_t *len) {
    if (id < 0 || id >= v->n) return false;
    *bytes = v->bytes + v->off[id];
    *len = v->off[id + 1] - v->off[id];
    return true;
}

// ---- the state ------------------------------------------------------------------------------

typedef struct gnode {
    int32_t pos, parent;
} gnode;

typedef struct gpool {
    gnode *n;
    size_t len, cap;
} gpool;

/* One step's input and output: stacks tb[a..b), a partial UTF-8 character (need bytes to go). */
typedef struct glevel {
    size_t a, b;
    uint32_t cp;
    int need, total;         /* bytes still to come, and the whole character's length */
    size_t pool_end, tb_end; /* what the level's stacks use; deeper levels start from here */
} glevel;

struct grammar_state {
    const grammar *g;
    gpool pool, spare;     /* nodes [0, committed) belong to the committed state */
    size_t committed;
    int32_t *tops;         /* (n_tops) the committed stacks */
    size_t n_tops, cap_tops;
    uint32_t cp;           /* the committed partial character */
    int need, total;
    int32_t *tb;           /* stacks of trial steps */
    size_t tb_len, tb_cap;
    int32_t *work;         /* expansion worklist */
    size_t cap_work;
    int32_t *remap;        /* (cap_remap) pool compaction */
    size_t cap_remap;
    size_t budget;         /* expansion work left in this step */
    bool mask_cut;         /* the last mask stopped at MAX_MASK_WORK */
    size_t mask_i;         /* a mask in parts (grammar_state_mask_more): the next trie node, */
    size_t mask_work;      /* the work it took so far, */
    int mask_count;        /* the tokens it allowed so far */
    glevel *levels;        /* (cap_levels) the trie walk's path */
    size_t cap_levels;
    const grammar_vocab *tv; /* the vocabulary tok_id was resolved in (NULL: not yet) */
    int32_t *tok_id;       /* (g->n_toks) each token terminal's id; -1: none */
    attnd_status st;
};

static int32_t node_new(grammar_state *s, int32_t pos, int32_t parent) {
    if (s->pool.len >= INT32_MAX || !attnd_grow(&s->pool.n, &s->pool.cap, s->pool.len + 1, sizeof(gnode), 64)) {
        s->st = ATTND_ERR_NOMEM;
        return -2;
    }
    s->pool.n[s->pool.len] = (gnode){pos, parent};
    return (int32_t)s->pool.len++;
}

/* Whether stacks x and y hold the same positions. Each node compared counts as work: a deeply
 * recursive ambiguous grammar makes long equal chains, and a step's cost stays bounded. */
static bool same_stack(grammar_state *s, int32_t x, int32_t y) {
    while (x != y) {
        if (x < 0 || y < 0 || s->pool.n[x].pos != s->pool.n[y].pos) return false;
        if (s->budget) s->budget--;
        x = s->pool.n[x].parent, y = s->pool.n[y].parent;
    }
    return true;
}

/* Appends stack x to tb[from..) unless it is there already or the state is full. */
static void add_stack(grammar_state *s, size_t from, int32_t x) {
    for (size_t i = from; i < s->tb_len; i++) {
        if (s->budget) s->budget--; /* comparisons count as work: a step's cost stays bounded */
        if (same_stack(s, s->tb[i], x)) return;
    }
    if (s->tb_len - from >= GRAMMAR_MAX_STACKS) return;
    if (!attnd_grow(&s->tb, &s->tb_cap, s->tb_len + 1, sizeof(*s->tb), 64)) {
        s->st = ATTND_ERR_NOMEM;
        return;
    }
    s->tb[s->tb_len++] = x;
}

static bool push_work(grammar_state *s, size_t *n, int32_t x) {
    if (!attnd_grow(&s->work, &s->cap_work, *n + 1, sizeof(*s->work), 64)) {
        s->st = ATTND_ERR_NOMEM;
        return false;
    }
    s->work[(*n)++] = x;
    return true;
}

/* Expansion work one step (one character, all stacks) may take: beyond it, a pathologically
 * ambiguous grammar's further stacks are dropped rather than letting a step take seconds. */
/* Work bounds, in expansions and stack-node comparisons: one step, and one whole mask (the trie
 * walk's steps together). A mask of a JSON grammar over a 152k vocabulary stays far below the
 * second; a pathologically ambiguous grammar spends the first at every trie node and is cut. */
enum { MAX_STEP_WORK = 1 << 14, MAX_MASK_WORK = 1 << 26 };

/* Expands stack x until every resulting top is a character set (or the stack is empty), and
 * adds the results to tb[from..). */
static void expand(grammar_state *s, size_t from, int32_t x) {
    const grammar *g = s->g;
    size_t n = 0;
    if (!push_work(s, &n, x)) return;
    while (n && s->budget && s->st == ATTND_OK) {
        s->budget--;
        x = s->work[--n];
        for (;;) {
            if (x == -1) { add_stack(s, from, -1); break; }
            gnode nd = s->pool.n[x];
            gelem e = g->el[nd.pos];
            if (gelem_done(e.type)) { x = nd.parent; continue; }
            if (gelem_terminal(e.type)) { add_stack(s, from, x); break; }
            /* a reference: the rule's alternatives on top of where this sequence continues */
            int32_t base = gelem_done(g->el[nd.pos + 1].type) ? nd.parent : node_new(s, nd.pos + 1, nd.parent);
            if (base == -2) return;
            for (uint32_t k = g->alt_first[e.v + 1]; k-- > g->alt_first[e.v];) {
                uint32_t a = g->alts[k];
                int32_t y = gelem_done(g->el[a].type) ? base : node_new(s, (int32_t)a, base);
                if (y == -2 || !push_work(s, &n, y)) return;
            }
            break;
        }
    }
}

static bool set_has(const grammar *g, const gset *set, uint32_t c) {
    for (uint32_t i = 0; i < set->n; i++) {
        const grange *r = &g->ranges[set->first + i];
        if (c >= r->lo && c <= r->hi) return !set->neg;
    }
    return set->neg;
}

/* Whether the set holds some code point in [lo, hi]. */
static bool set_meets(const grammar *g, const gset *set, uint32_t lo, uint32_t hi) {
    if (set->neg) { /* misses the range only when the ranges cover all of it */
        for (uint32_t c = lo;;) {
            uint32_t next = c;
            for (uint32_t i = 0; i < set->n; i++) {
                const grange *r = &g->ranges[set->first + i];
                if (r->lo <= c && r->hi >= c && r->hi + 1 > next) next = r->hi + 1;
            }
            if (next == c) return true;
            if (next > hi || next == 0) return false;
            c = next;
        }
    }
    for (uint32_t i = 0; i < set->n; i++) {
        const grange *r = &g->ranges[set->first + i];
        if (r->lo <= hi && r->hi >= lo) return true;
    }
    return false;
}

/* The stacks of in[a..b) after code point c, appended to tb; the new range in *out. */
static void step_cp(grammar_state *s, size_t a, size_t b, uint32_t c, glevel *out) {
    out->a = s->tb_len;
    s->budget = MAX_STEP_WORK;
    for (size_t i = a; i < b && s->st == ATTND_OK; i++) {
        int32_t x = s->tb[i];
        if (x < 0) continue;
        gnode nd = s->pool.n[x];
        if (s->g->el[nd.pos].type != G_CHARS || !set_has(s->g, &s->g->sets[s->g->el[nd.pos].v], c)) continue;
        int32_t y = node_new(s, nd.pos + 1, nd.parent);
        if (y == -2) break;
        expand(s, out->a, y);
    }
    out->b = s->tb_len;
}

/* The smallest code point a UTF-8 sequence of n bytes may encode (shorter forms are overlong). */
static uint32_t utf8_min(int n) { return n == 2 ? 0x80 : n == 3 ? 0x800 : n == 4 ? 0x10000 : 0; }

/* Whether some stack of tb[a..b) can take a character that starts with the partial cp (need
 * more bytes to come of a total-byte sequence): overlong and out-of-range completions do not
 * count. */
static bool partial_viable(const grammar_state *s, size_t a, size_t b, uint32_t cp, int need, int total) {
    uint32_t lo = cp << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
    if (lo < utf8_min(total)) lo = utf8_min(total);
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return false;
    for (size_t i = a; i < b; i++) {
        int32_t x = s->tb[i];
        const gelem *e = x >= 0 ? &s->g->el[s->pool.n[x].pos] : NULL;
        if (e && e->type == G_CHARS && set_meets(s->g, &s->g->sets[e->v], lo, hi)) return true;
    }
    return false;
}

/* One byte from level in to *out (the stacks appended to tb when a character completes, else
 * the same range). False when nothing survives. */
static bool step_byte(grammar_state *s, const glevel *in, unsigned char byte, glevel *out) {
    *out = *in;
    if (in->need == 0) {
        if (byte < 0x80) {
            step_cp(s, in->a, in->b, byte, out);
            return out->b > out->a && s->st == ATTND_OK;
        }
        int need = (byte & 0xE0) == 0xC0 ? 1 : (byte & 0xF0) == 0xE0 ? 2 : (byte & 0xF8) == 0xF0 ? 3 : 0;
        if (!need || byte < 0xC2 || byte > 0xF4) return false; /* a continuation byte, overlong, or not UTF-8 */
        out->need = need;
        out->total = need + 1;
        out->cp = need == 1 ? (byte & 0x1Fu) : need == 2 ? (byte & 0x0Fu) : (byte & 0x07u);
    } else {
        if ((byte & 0xC0) != 0x80) return false;
        out->cp = in->cp << 6 | (byte & 0x3Fu);
        out->need = in->need - 1;
        if (out->need == 0) {
            uint32_t c = out->cp;
            if (c > 0x10FFFF || c < utf8_min(in->total) || (c >= 0xD800 && c <= 0xDFFF)) return false;
            step_cp(s, in->a, in->b, c, out);
            return out->b > out->a && s->st == ATTND_OK;
        }
    }
    return partial_viable(s, out->a, out->b, out->cp, out->need, out->total);
}

static void start_stacks(grammar_state *s) {
    const grammar *g = s->g;
    s->pool.len = 0, s->tb_len = 0;
    s->budget = MAX_STEP_WORK;
    for (uint32_t k = g->alt_first[g->root]; k < g->alt_first[g->root + 1] && s->st == ATTND_OK; k++) {
        uint32_t a = g->alts[k];
        int32_t x = gelem_done(g->el[a].type) ? -1 : node_new(s, (int32_t)a, -1);
        if (x != -2) expand(s, 0, x);
    }
    if (s->st == ATTND_OK && !attnd_grow(&s->tops, &s->cap_tops, s->tb_len + 1, sizeof(*s->tops), 16))
        s->st = ATTND_ERR_NOMEM;
    if (s->st != ATTND_OK) s->tb_len = 0;
    memcpy(s->tops, s->tb, s->tb_len * sizeof(*s->tops));
    s->n_tops = s->tb_len;
    s->committed = s->pool.len;
    s->cp = 0, s->need = 0, s->total = 0;
    s->tb_len = 0;
}

attnd_status grammar_state_create(grammar_state **out, const grammar *g, attnd_err *err) {
    *out = NULL;
    grammar_state *s = calloc(1, sizeof(*s));
    if (!s) return attnd_fail(err, ATTND_ERR_NOMEM, "grammar: out of memory");
    s->g = g;
    start_stacks(s);
    if (s->st != ATTND_OK) {
        grammar_state_destroy(s);
        return attnd_fail(err, ATTND_ERR_NOMEM, "grammar: out of memory");
    }
    *out = s;
    return ATTND_OK;
}

void grammar_state_destroy(grammar_state *s) {
    if (!s) return;
    free(s->pool.n);
    free(s->spare.n);
    free(s->tops);
    free(s->tb);
    free(s->work);
    free(s->remap);
    free(s->levels);
    free(s->tok_id);
    free(s);
}

void grammar_state_reset(grammar_state *s) {
    s->st = ATTND_OK;
    start_stacks(s);
}

attnd_status grammar_state_status(const grammar_state *s) { return s->st; }

/* The committed state as level 0 in tb[0 .. n_tops). */
static bool load_committed(grammar_state *s, glevel *l) {
    s->pool.len = s->committed;
    if (!attnd_grow(&s->tb, &s->tb_cap, s->n_tops + 1, sizeof(*s->tb), 64)) {
        s->st = ATTND_ERR_NOMEM;
        return false;
    }
    memcpy(s->tb, s->tops, s->n_tops * sizeof(*s->tb));
    s->tb_len = s->n_tops;
    *l = (glevel){0, s->n_tops, s->cp, s->need, s->total, s->pool.len, s->tb_len};
    return true;
}

/* Runs bytes from the committed state; the final level in *l. */
static bool run_bytes(grammar_state *s, const char *bytes, size_t n, glevel *l) {
    if (s->st != ATTND_OK || !load_committed(s, l)) return false;
    for (size_t i = 0; i < n; i++) {
        glevel next;
        if (!step_byte(s, l, (unsigned char)bytes[i], &next)) return false;
        *l = next;
    }
    return true;
}

bool grammar_state_try(grammar_state *s, const char *bytes, size_t n) {
    glevel l;
    bool ok = run_bytes(s, bytes, n, &l);
    s->pool.len = s->committed, s->tb_len = 0;
    return ok;
}

/* Copies the chains of tb[a..b) into the spare pool (sharing kept), which becomes the pool. */
static bool compact(grammar_state *s, size_t a, size_t b) {
    size_t live = s->pool.len;
    if (!attnd_grow(&s->remap, &s->cap_remap, live + 1, sizeof(*s->remap), 64) ||
        !attnd_grow(&s->spare.n, &s->spare.cap, live + 1, sizeof(gnode), 64) ||
        !attnd_grow(&s->tops, &s->cap_tops, b - a + 1, sizeof(*s->tops), 16))
        return false;
    for (size_t i = 0; i < live; i++) s->remap[i] = -1;
    s->spare.len = 0;
    for (size_t i = a; i < b; i++) {
        /* copy the chain top-down, then link parents: remap the unmapped prefix of the chain */
        int32_t x = s->tb[i];
        while (x >= 0 && s->remap[x] < 0) {
            s->remap[x] = (int32_t)s->spare.len;
            s->spare.n[s->spare.len++] = s->pool.n[x];
            x = s->pool.n[x].parent;
        }
    }
    for (size_t i = 0; i < s->spare.len; i++) {
        int32_t p = s->spare.n[i].parent;
        s->spare.n[i].parent = p < 0 ? -1 : s->remap[p];
    }
    for (size_t i = a; i < b; i++) s->tops[i - a] = s->tb[i] < 0 ? -1 : s->remap[s->tb[i]];
    s->n_tops = b - a;
    gpool t = s->pool;
    s->pool = s->spare, s->spare = t;
    s->committed = s->pool.len;
    return true;
}

bool grammar_state_accept(grammar_state *s, const char *bytes, size_t n) {
    glevel l;
    if (n == 0) return s->st == ATTND_OK;
    bool ok = run_bytes(s, bytes, n, &l);
    if (ok && !compact(s, l.a, l.b)) s->st = ATTND_ERR_NOMEM, ok = false;
    if (ok) s->cp = l.cp, s->need = l.need, s->total = l.total;
    s->pool.len = s->committed, s->tb_len = 0;
    return ok;
}

bool grammar_state_complete(const grammar_state *s) {
    if (s->st != ATTND_OK || s->need) return false;
    for (size_t i = 0; i < s->n_tops; i++)
        if (s->tops[i] == -1) return true;
    return false;
}

bool grammar_state_can_continue(const grammar_state *s) {
    if (s->st != ATTND_OK) return false;
    for (size_t i = 0; i < s->n_tops; i++)
        if (s->tops[i] != -1) return true;
    return false;
}

// ---- the shortest completion ----------------------------------------------------------------

/* The characters still to write from stack x (its positions' rests, top to bottom). */
static uint32_t stack_rest(const grammar_state *s, int32_t x) {
    uint64_t d = 0;
    for (; x >= 0 && d < GRAMMAR_FAR; x = s->pool.n[x].parent) d += s->g->rest[s->pool.n[x].pos];
    return d < GRAMMAR_FAR ? (uint32_t)d : GRAMMAR_FAR;
}

static uint32_t min_rest(const grammar_state *s, const int32_t *stacks, size_t n) {
    uint32_t best = GRAMMAR_FAR;
    for (size_t i = 0; i < n; i++) {
        uint32_t d = stacks[i] < 0 ? 0 : stack_rest(s, stacks[i]);
        if (d < best) best = d;
    }
    return best;
}

uint32_t grammar_state_distance(const grammar_state *s) {
    if (s->st != ATTND_OK) return GRAMMAR_FAR;
    return min_rest(s, s->tops, s->n_tops);
}

bool grammar_state_try_distance(grammar_state *s, const char *bytes, size_t n, uint32_t *dist) {
    glevel l;
    bool ok = n > 0 && run_bytes(s, bytes, n, &l) && l.b > l.a;
    /* a character still being spelled: its stacks are at the set it will match, counted */
    if (ok) *dist = min_rest(s, s->tb + l.a, l.b - l.a);
    s->pool.len = s->committed, s->tb_len = 0;
    return ok;
}

// ---- token terminals ------------------------------------------------------------------------

/* Each token terminal's id in v (resolved once per vocabulary); false when out of memory. */
static bool resolve_tokens(grammar_state *s, const grammar_vocab *v) {
    const grammar *g = s->g;
    if (s->tv == v || g->n_toks == 0) return true;
    if (!s->tok_id && !(s->tok_id = malloc(g->n_toks * sizeof(*s->tok_id)))) return false;
    for (size_t i = 0; i < g->n_toks; i++) {
        const gtoken *t = &g->toks[i];
        s->tok_id[i] = t->id >= 0 ? (t->id < v->n ? t->id : -1) : v->names ? find_name(v, t->text, t->len) : -1;
    }
    s->tv = v;
    return true;
}

/* The committed stacks whose top is a token terminal for id, moved past it: appended to tb as
 * level *out (after load_committed). Empty when a character is pending. */
static void step_token(grammar_state *s, int32_t id, glevel *out) {
    *out = (glevel){.a = s->tb_len};
    s->budget = MAX_STEP_WORK;
    for (size_t i = 0; i < s->n_tops && s->need == 0 && s->st == ATTND_OK; i++) {
        int32_t x = s->tops[i];
        if (x < 0) continue;
        gnode nd = s->pool.n[x];
        const gelem *e = &s->g->el[nd.pos];
        if (e->type != G_TOKEN || s->tok_id[e->v] != id) continue;
        int32_t y = node_new(s, nd.pos + 1, nd.parent);
        if (y == -2) break;
        expand(s, out->a, y);
    }
    out->b = s->tb_len;
}

/* Runs token id: as a terminal that names it when some stack is at one (that reading wins),
 * else by its bytes. keep: commit the result. */
static bool run_token(grammar_state *s, const grammar_vocab *v, int32_t id, bool keep) {
    glevel l;
    if (s->st != ATTND_OK) return false;
    if (!resolve_tokens(s, v)) s->st = ATTND_ERR_NOMEM;
    if (s->st != ATTND_OK || !load_committed(s, &l)) return false;
    if (s->g->n_toks) step_token(s, id, &l);
    bool ok = s->g->n_toks && l.b > l.a && s->st == ATTND_OK;
    if (ok && keep && !compact(s, l.a, l.b)) s->st = ATTND_ERR_NOMEM, ok = false;
    s->pool.len = s->committed, s->tb_len = 0;
    if (ok || s->st != ATTND_OK) return ok;
    const char *b;
    size_t n;
    if (!grammar_vocab_token(v, id, &b, &n) || n == 0) return false;
    return keep ? grammar_state_accept(s, b, n) : grammar_state_try(s, b, n);
}

bool grammar_state_try_token(grammar_state *s, const grammar_vocab *v, int32_t id) { return run_token(s, v, id, false); }

bool grammar_state_accept_token(grammar_state *s, const grammar_vocab *v, int32_t id) { return run_token(s, v, id, true); }

/* Marks the tokens the committed stacks' token terminals name; returns how many were new. */
static int mask_tokens(grammar_state *s, const grammar_vocab *v, unsigned char *allowed) {
    int count = 0;
    if (s->g->n_toks == 0 || s->need) return 0;
    if (!resolve_tokens(s, v)) {
        s->st = ATTND_ERR_NOMEM;
        return 0;
    }
    for (size_t i = 0; i < s->n_tops; i++) {
        int32_t x = s->tops[i];
        const gelem *e = x >= 0 ? &s->g->el[s->pool.n[x].pos] : NULL;
        int32_t id = e && e->type == G_TOKEN ? s->tok_id[e->v] : -1;
        if (id >= 0 && !allowed[id]) allowed[id] = 1, count++;
    }
    return count;
}

bool grammar_state_mask_was_cut(const grammar_state *s) { return s->mask_cut; }

void grammar_state_mask_begin(grammar_state *s, const grammar_vocab *v, unsigned char *allowed) {
    memset(allowed, 0, (size_t)v->n);
    if (!attnd_grow(&s->levels, &s->cap_levels, (size_t)v->max_depth + 1, sizeof(*s->levels), 16)) s->st = ATTND_ERR_NOMEM;
    s->mask_i = s->mask_work = 0, s->mask_count = 0;
    s->mask_cut = false;
    if (s->st != ATTND_OK || !load_committed(s, &s->levels[0])) s->mask_i = v->n_nodes; /* nothing to walk */
}

/* Trie nodes walked between two looks at the clock (a node costs at most a step's work). */
enum { MASK_CLOCK_NODES = 64 };

bool grammar_state_mask_more(grammar_state *s, const grammar_vocab *v, unsigned char *allowed, double deadline,
                             int *count) {
    size_t i = s->mask_i;
    for (size_t seen = 0; i < v->n_nodes && s->st == ATTND_OK; i++, seen++) {
        if (deadline > 0 && seen >= MASK_CLOCK_NODES && seen % MASK_CLOCK_NODES == 0 && attnd_now_s() >= deadline) {
            s->mask_i = i; /* the levels of the path to node i stay as they are until the next call */
            return false;
        }
        const vnode *nd = &v->nodes[i];
        glevel *up = &s->levels[nd->depth - 1];
        s->pool.len = up->pool_end, s->tb_len = up->tb_end; /* forget the previous sibling's subtree */
        glevel *l = &s->levels[nd->depth];
        if (s->mask_work > MAX_MASK_WORK) {
            s->mask_cut = true; /* the tokens not reached stay 0: what is allowed is still allowed */
            break;
        }
        s->budget = MAX_STEP_WORK;
        bool alive = step_byte(s, up, nd->byte, l);
        s->mask_work += 1 + (MAX_STEP_WORK - s->budget);
        if (!alive) {
            i = nd->skip - 1; /* no token below this prefix can come next */
            continue;
        }
        l->pool_end = s->pool.len, l->tb_end = s->tb_len;
        for (uint32_t k = 0; k < nd->tok_n; k++) allowed[v->sorted[nd->tok_first + k]] = 1;
        s->mask_count += (int)nd->tok_n;
    }
    s->mask_i = v->n_nodes;
    s->pool.len = s->committed, s->tb_len = 0;
    s->mask_count += mask_tokens(s, v, allowed);
    *count = s->st == ATTND_OK ? s->mask_count : 0;
    return true;
}

int grammar_state_mask(grammar_state *s, const grammar_vocab *v, unsigned char *allowed) {
    int count;
    grammar_state_mask_begin(s, v, allowed);
    grammar_state_mask_more(s, v, allowed, 0, &count);
    return count;
}

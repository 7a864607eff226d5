/*
 * sse.c — the streamed generation response (see sse.h): turns the job's updates into SSE
 * events in a byte buffer that libmicrohttpd's content reader drains.
 */
#include "sse.h"

#include <string.h>

#include "attnd/buf.h"
#include "endpoints.h"
#include "oai_resp.h"

/* Per choice (prompt lists and n > 1 stream several jobs into one response). */
typedef struct sse_choice {
    size_t text_off;         /* bytes of generated text streamed so far (logprobs text_offset) */
    bool ended;              /* its final chunk (or error) went out */
} sse_choice;

struct sse_state {
    const sse_writer *w;     /* borrowed (a static table) */
    bool began, finished;
    double last_out;         /* when bytes last went to MHD (keep-alive clock) */
    buf out;                 /* SSE bytes */
    size_t out_off;          /* bytes of out already handed to MHD */
    int n_ended;
    sse_choice *ch;          /* (req_n_jobs) */
};

void sse_free(sse_state *st) {
    if (!st) return;
    buf_free(&st->out);
    free(st->ch);
    free(st);
}

/* Sets the index of a chunk's single choice (oai_chunk writes 0). */
static json_t *at_index(json_t *chunk, int k) {
    json_t *c = json_array_get(json_object_get(chunk, "choices"), 0);
    if (c && k) json_object_set_new(c, "index", json_integer(k));
    return chunk;
}

/* Appends "data: <json>\n\n" (o stolen). Out of memory drops the event. */
static void sse_event(buf *out, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) return;
    size_t n = strlen(s);
    if (buf_reserve(out, n + 8)) {
        buf_append(out, "data: ", 6);
        buf_append(out, s, n);
        buf_append(out, "\n\n", 2);
    }
    free(s);
}

/* The finish_reason of a stream cut by shutdown or cancellation: the text is cut short, which
 * "length" says in the words every OpenAI client knows (an error event would make them raise). */
static const char *CUT_REASON = "length";

bool sse_was_cut(const sched_output *o) { return o->status == ATTND_ERR_BUSY; }

/* The end of one choice: its final chunk (a cut one included), or an error event. The
 * session's history is made durable first. */
static void choice_end_oai(req *r, int k, const sched_output *o, buf *out) {
    gen_persist(r);
    if (sse_was_cut(o)) {
        sse_event(out, at_index(oai_chunk(&r->rctx, r->chat ? json_object() : json_string(""), NULL, CUT_REASON), k));
    } else if (o->status != ATTND_OK) {
        int code = http_status_of(o->status, HTTP_CTX_GENERATE);
        sse_event(out, oai_error(code, o->errmsg[0] ? o->errmsg : "generation failed", NULL));
    } else {
        sse_event(out, at_index(oai_chunk(&r->rctx, r->chat ? json_object() : json_string(""), NULL, o->finish_reason), k));
    }
}

/* The end of an OpenAI stream, once every choice ended: usage (summed), [DONE]. */
static void stream_end_oai(req *r, buf *out) {
    if (r->oreq.include_usage) {
        oai_gen sum;
        gen_usage_sum(r, &sum);
        sse_event(out, oai_usage_chunk(&r->rctx, &sum));
    }
    buf_puts(out, "data: [DONE]\n\n");
}

/* llama.cpp's stream: an event per update, ending with the stop:true event (no [DONE]). */
static void update_llama(req *r, int k, const sched_update *u, buf *out) {
    sched_output o;
    oai_gen g;
    sched_job_output(req_job(r, k), &o);
    gen_view(&o, &g);
    if (u->text_len || (r->return_tokens && u->to > u->from))
        sse_event(out, oai_llama_response(&r->rctx, &g, u->text, u->text_len, r->return_tokens, u->from, u->to, false));
    if (!u->done) return;
    gen_persist(r);
    if (o.status != ATTND_OK && !sse_was_cut(&o))
        sse_event(out, oai_error(503, o.errmsg[0] ? o.errmsg : "generation failed", NULL));
    else
        sse_event(out, oai_llama_response(&r->rctx, &g, "", 0, r->return_tokens, u->to, u->to, true));
}

/* The chat role chunk of every choice, first thing in a chat stream. */
static void begin_oai(req *r, buf *out) {
    for (int k = 0; r->chat && k < req_n_jobs(r); k++) {
        json_t *d = json_object();
        json_object_set_new(d, "role", json_string("assistant"));
        json_object_set_new(d, "content", json_string(""));
        sse_event(out, at_index(oai_chunk(&r->rctx, d, NULL, NULL), k));
    }
}

/* Turns one update of choice k into OpenAI chunks. */
static void update_oai(req *r, int k, const sched_update *u, buf *out) {
    sse_state *st = r->sse;
    sched_output o;
    oai_gen g;
    sched_job_output(req_job(r, k), &o);
    gen_view(&o, &g);
    bool lp = g.top_logprobs >= 0;
    if (u->text_len || (u->to > u->from && lp)) {
        json_t *text = oai_string(u->text, u->text_len), *lps = NULL;
        if (lp) {
            size_t off = st->ch[k].text_off;
            lps = r->chat ? oai_chat_logprobs(&r->rctx, &g, u->from, u->to)
                          : oai_completion_logprobs(&r->rctx, &g, u->from, u->to, false, &off);
        }
        json_t *payload = text;
        if (r->chat) {
            payload = json_object();
            json_object_set_new(payload, "content", text);
        }
        sse_event(out, at_index(oai_chunk(&r->rctx, payload, lps, NULL), k));
    }
    st->ch[k].text_off += u->text_len;
    if (u->done) choice_end_oai(r, k, &o, out);
}

static const sse_writer OAI_WRITER = {begin_oai, update_oai, stream_end_oai};
static const sse_writer LLAMA_WRITER = {NULL, update_llama, NULL};

// ---- the stream loop, shared by every streamed endpoint ----------------------------------

/* Hands update u of job k to the writer and counts the jobs that ended. */
static void stream_update(req *r, int k, const sched_update *u) {
    sse_state *st = r->sse;
    st->w->update(r, k, u, &st->out);
    if (u->done && !st->ch[k].ended) {
        st->ch[k].ended = true;
        st->n_ended++;
    }
}

/* Collects what every running choice has ready; when none has, waits up to 100 ms on the first
 * running one. Returns false when the client left (everything cancelled). */
static bool stream_poll(req *r) {
    sse_state *st = r->sse;
    int n = req_n_jobs(r), first = -1;
    bool news = false;
    sched_update u;
    for (int k = 0; k < n; k++) {
        if (st->ch[k].ended) continue;
        if (first < 0) first = k;
        if (sched_job_wait(req_job(r, k), 0, &u)) {
            stream_update(r, k, &u);
            news = true;
        }
    }
    if (news || first < 0) return true;
    if (sched_job_wait(req_job(r, first), 100, &u)) {
        stream_update(r, first, &u);
        return true;
    }
    if (!http_client_gone(r)) return true;
    for (int k = 0; k < n; k++) sched_job_cancel(req_job(r, k));
    r->cancelled = true;
    return false;
}

/* True when a waiting stream has sent nothing for sse_keepalive_s (at most half of
 * request_timeout_s): an SSE comment then tells proxies and clients it is alive. */
static bool keepalive_due(req *r) {
    const server_settings *c = &r->srv->cfg;
    if (c->sse_keepalive_s <= 0) return false;
    double every = c->sse_keepalive_s, half = c->request_timeout_s > 0 ? c->request_timeout_s / 2.0 : every;
    if (half < every) every = half;
    return attnd_now_s() - r->sse->last_out >= every;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    req *r = cls;
    sse_state *st = r->sse;
    while (st->out_off == st->out.len) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        buf_clear(&st->out);
        st->out_off = 0;
        /* the writer's opening frames go out at once; then wait for news */
        if (!st->began) {
            if (st->w->begin) st->w->begin(r, &st->out);
            st->began = true;
        } else if (!stream_poll(r)) {
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (st->n_ended == req_n_jobs(r)) {
            if (st->w->end) st->w->end(r, &st->out);
            st->finished = true;
        }
        if (st->out.len == 0 && keepalive_due(r)) buf_puts(&st->out, ": keep-alive\n\n");
    }
    st->last_out = attnd_now_s();
    size_t n = st->out.len - st->out_off;
    if (n > max) n = max;
    memcpy(out, st->out.p + st->out_off, n);
    st->out_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) { (void)cls; /* req owns everything; freed in completed() */ }

enum MHD_Result sse_stream(req *r, const sse_writer *w) {
    r->sse = calloc(1, sizeof(*r->sse));
    if (!r->sse || !(r->sse->ch = calloc((size_t)req_n_jobs(r), sizeof(sse_choice)))) return MHD_NO;
    r->sse->w = w;
    r->sse->last_out = attnd_now_s();
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r,
                                                                  stream_free);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    return http_send(r, 200, resp);
}

enum MHD_Result sse_respond(req *r) { return sse_stream(r, r->llama ? &LLAMA_WRITER : &OAI_WRITER); }

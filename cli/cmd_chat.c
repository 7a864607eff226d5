/*
 * cmd_chat.c — `attnd chat`: an interactive conversation with a model on its own chat template,
 * the reply streaming as it is generated. The conversation is a list of chat messages (the JSON
 * of /v1/chat/completions' "messages"); each turn hands all of it to a backend (repl.h), which
 * computes only what its cache does not already hold. /commands change the conversation:
 * /clear, /system, /save, /load; input spans lines with a trailing '\' or a """ block.
 *
 * With --verbose, a status line on stderr after each reply gives the turn's prompt tokens and how
 * many of them came from the cache ("cached"), the reply's tokens and the time.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "repl.h"

static const char *USAGE =
    "usage: attnd chat [--model PATH | --url http://HOST:PORT] [--system TEXT] [--n N] [sampling flags]\n"
    "                  [--ctx-size N] [--threads N] [--kv-type f16|f32|q8_0|q4_0] [--verbose]\n"
    "\n"
    "An interactive chat on the model's own chat template (the one `attnd serve` uses). Replies\n"
    "stream as they are generated; reasoning (<think> ... </think>) is dimmed on a terminal; Ctrl-C\n"
    "ends a reply, Ctrl-D (or /exit) ends the chat. The conversation stays in the KV cache, so a\n"
    "turn computes only its new tokens.\n"
    "  -m, --model PATH    the GGUF file (default: the shipped default model)\n"
    "  --url URL           chat with a running `attnd serve` at http://HOST:PORT instead (in a\n"
    "                      session of its own); --api-key KEY or $ATTND_API_KEY when it needs one\n"
    "  -sys, --system TEXT the system message\n"
    "  -n, --n N           most tokens per reply (default 0: until the turn ends or the context is full)\n"
    "  -c, --ctx-size N    the context (default 0: the model's); older turns are dropped to fit\n"
    "  -t, --threads N     threads; 0 (the default) = the CPUs this process may use\n"
    "  --kv-type T         KV cache type: f16 (default), f32, q8_0 or q4_0\n"
    "  -v, --verbose       after each reply, on stderr: prompt tokens, how many were cached, reply\n"
    "                      tokens, time\n"
    "Sampling defaults are the server's (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).\n"
    "In the chat:\n"
    "  /clear         forget the conversation (the system message stays)\n"
    "  /system TEXT   set the system message (empty: none)\n"
    "  /save FILE     write the conversation as JSON {\"messages\": [...]}\n"
    "  /load FILE     read a conversation written by /save (or a messages array)\n"
    "  /help, /exit\n"
    "  a line ending in \\ continues on the next; \"\"\" starts and ends a block of lines\n"
    "\n";

typedef struct chat_state {
    repl_opts o;
    const char *system;
    bool verbose, tty;
    repl_backend *b;
    json_t *messages; /* the conversation (owned) */
    repl_view view;
} chat_state;

static void parse_args(int argc, char **argv, chat_state *c) {
    cli_sampling_init(&c->o.sampling);
    sampler_params_default(&c->o.sampling.params); /* a chat samples, as the server does */
    const cli_opt opts[] = {
        CLI_OPT_RUN(&c->o.run),
        CLI_OPT_STR("--url", &c->o.url),
        CLI_OPT_STR("--api-key", &c->o.api_key),
        CLI_OPT_STR("--system", &c->system),
        CLI_OPT_INT("--n", &c->o.n_predict, 0, 1 << 24),
        CLI_OPT_INT("--ctx-size", &c->o.ctx_size, 0, 1 << 24),
        CLI_OPT_SAMPLING(&c->o.sampling),
        CLI_OPT_SET("--verbose", &c->verbose),
    };
    if (!cli_parse_opts("chat", USAGE, argc, argv, opts, ATTND_ARRAY_LEN(opts))) exit(0);
    if (c->o.sampling.top_logprobs) cli_usage_error("chat", "--top-logprobs is not shown in a chat");
    if (c->o.url && c->o.run.model) cli_usage_error("chat", "give --model or --url, not both");
    if (!c->o.api_key && getenv("ATTND_API_KEY") && *getenv("ATTND_API_KEY")) c->o.api_key = getenv("ATTND_API_KEY");
}

// ---- input ---------------------------------------------------------------------------------------

/* One line of stdin without its newline into *line (getline's buffer); false at the end. */
static bool read_line(chat_state *c, const char *prompt, char **line, size_t *cap) {
    if (c->tty) fputs(prompt, stdout), fflush(stdout);
    ssize_t n = getline(line, cap, stdin);
    if (n < 0) return false;
    if (n && (*line)[n - 1] == '\n') (*line)[--n] = '\0';
    return true;
}

/* The next message typed: a line, lines joined by a trailing '\', or a """ block. NULL at the end
 * of input. malloc'd. */
static char *read_input(chat_state *c) {
    char *line = NULL;
    size_t cap = 0;
    buf text;
    buf_init(&text);
    bool block = false, more = true;
    if (!read_line(c, "> ", &line, &cap)) {
        free(line);
        return NULL;
    }
    if (!strncmp(line, "\"\"\"", 3)) { /* a block: until a line ending in """ */
        block = true;
        memmove(line, line + 3, strlen(line + 3) + 1);
    }
    while (more) {
        size_t n = strlen(line);
        bool ends_block = block && n >= 3 && !strcmp(line + n - 3, "\"\"\"");
        bool cont = !block && n && line[n - 1] == '\\';
        buf_append(&text, line, n - (ends_block ? 3 : cont ? 1 : 0));
        more = (block && !ends_block) || cont;
        if (more) {
            buf_puts(&text, "\n");
            if (!read_line(c, "... ", &line, &cap)) break;
        }
    }
    free(line);
    if (!text.p) buf_puts(&text, "");
    return text.p;
}

// ---- the conversation ------------------------------------------------------------------------------

static json_t *message(const char *role, const char *content) {
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

static void set_system(chat_state *c, const char *text) {
    json_t *first = json_array_get(c->messages, 0);
    bool has = first && !strcmp(json_string_value(json_object_get(first, "role")), "system");
    if (has) json_array_remove(c->messages, 0);
    if (text && *text) json_array_insert_new(c->messages, 0, message("system", text));
}

/* The conversation in a /save file: {"messages": [...]} or the array alone; each message a role
 * and a string content. NULL (with the reason printed) otherwise. */
static json_t *load_messages(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je), *m = json_is_object(j) ? json_object_get(j, "messages") : j;
    if (!j) return fprintf(stderr, "cannot read %s: %s\n", path, je.text), NULL;
    bool ok = json_is_array(m);
    size_t i;
    json_t *e;
    json_array_foreach(m, i, e) ok = ok && json_is_string(json_object_get(e, "role")) &&
                                     json_is_string(json_object_get(e, "content"));
    if (!ok) {
        fprintf(stderr, "%s: not a conversation (a messages array of role and content strings)\n", path);
        json_decref(j);
        return NULL;
    }
    json_incref(m);
    json_decref(j);
    return m;
}

/* A line starting with '/'. Returns false for /exit. */
static bool command(chat_state *c, const char *line) {
    const char *arg = line + strcspn(line, " ");
    size_t n = (size_t)(arg - line);
    arg += strspn(arg, " ");
    if ((n == 5 && !strncmp(line, "/exit", 5)) || (n == 5 && !strncmp(line, "/quit", 5)) ||
        (n == 4 && !strncmp(line, "/bye", 4)))
        return false;
    if (n == 6 && !strncmp(line, "/clear", 6)) {
        json_t *first = json_incref(json_array_get(c->messages, 0)); /* the system message stays */
        json_array_clear(c->messages);
        if (first && !strcmp(json_string_value(json_object_get(first, "role")), "system"))
            json_array_append(c->messages, first);
        json_decref(first);
        c->b->forget(c->b);
        fprintf(stderr, "(the conversation is cleared)\n");
    } else if (n == 7 && !strncmp(line, "/system", 7)) {
        set_system(c, arg);
        fprintf(stderr, *arg ? "(system message set)\n" : "(no system message)\n");
    } else if (n == 5 && !strncmp(line, "/save", 5) && *arg) {
        json_t *j = json_pack("{s:O}", "messages", c->messages);
        if (json_dump_file(j, arg, JSON_INDENT(2)) == 0)
            fprintf(stderr, "(%zu messages saved to %s)\n", json_array_size(c->messages), arg);
        else fprintf(stderr, "cannot write %s\n", arg);
        json_decref(j);
    } else if (n == 5 && !strncmp(line, "/load", 5) && *arg) {
        json_t *m = load_messages(arg);
        if (m) {
            json_decref(c->messages);
            c->messages = m;
            fprintf(stderr, "(%zu messages loaded from %s)\n", json_array_size(m), arg);
        }
    } else if (n == 5 && !strncmp(line, "/help", 5)) {
        fputs(strstr(USAGE, "In the chat:"), stderr);
    } else {
        bool file = n == 5 && (!strncmp(line, "/save", 5) || !strncmp(line, "/load", 5));
        fprintf(stderr, "%.*s: %s\n", (int)n, line, file ? "needs a FILE" : "unknown command; /help lists them");
    }
    return true;
}

/* The oldest exchange after the system message, dropped for a conversation that outgrew the
 * context; false when only the last message is left. */
static bool drop_oldest(json_t *messages) {
    size_t first = json_array_size(messages) && !strcmp(json_string_value(json_object_get(
                                                              json_array_get(messages, 0), "role")), "system");
    if (json_array_size(messages) < first + 2) return false;
    json_array_remove(messages, first);
    while (json_array_size(messages) > first + 1 &&
           strcmp(json_string_value(json_object_get(json_array_get(messages, first), "role")), "user"))
        json_array_remove(messages, first);
    return true;
}

/* The user's message, the reply, and both into the conversation (the message alone is taken
 * back when the turn fails). */
static void turn(chat_state *c, const char *text) {
    json_array_append_new(c->messages, message("user", text));
    repl_stats st;
    attnd_err err;
    attnd_status rc;
    repl_interrupt_arm();
    while ((rc = c->b->turn(c->b, c->messages, &c->view, &st, &err)) != ATTND_OK && st.too_long &&
           drop_oldest(c->messages))
        fprintf(stderr, "(the conversation outgrew the context: the oldest exchange is dropped)\n");
    repl_interrupt_disarm();
    if (rc != ATTND_OK) {
        fprintf(stderr, "attnd chat: %s\n", err.msg);
        json_array_remove(c->messages, json_array_size(c->messages) - 1);
        return;
    }
    json_t *reply = message("assistant", c->view.content.p ? c->view.content.p : "");
    if (c->view.reasoning.len) json_object_set_new(reply, "reasoning_content", json_string(c->view.reasoning.p));
    json_array_append_new(c->messages, reply);
    if (c->verbose)
        fprintf(stderr, "[prompt %d tokens, %d cached; reply %d tokens (%s) in %.2f s]\n", st.prompt_tokens,
                st.cached_tokens, st.completion_tokens, st.finish, st.ms / 1e3);
}

int cmd_chat(int argc, char **argv) {
    chat_state c = {0};
    parse_args(argc, argv, &c);
    attnd_err err;
    attnd_status st = c.o.url ? repl_remote_open(&c.b, &c.o, &err) : repl_local_open(&c.b, &c.o, &err);
    if (st != ATTND_OK) {
        cli_sampling_free(&c.o.sampling);
        return cli_exit("chat", st, &err);
    }
    c.tty = isatty(STDIN_FILENO);
    c.messages = json_array();
    set_system(&c, c.system);
    repl_view_init(&c.view, stdout, isatty(STDOUT_FILENO));
    if (c.tty) fprintf(stderr, "attnd chat: %s\n/help for commands, Ctrl-D to quit\n", c.b->describe(c.b));
    for (char *text; (text = read_input(&c)) != NULL; free(text)) {
        if (text[0] == '/' && !command(&c, text)) {
            free(text);
            break;
        }
        if (text[0] != '/' && text[strspn(text, " \t\n")]) turn(&c, text);
    }
    c.b->destroy(c.b);
    repl_view_free(&c.view);
    json_decref(c.messages);
    cli_sampling_free(&c.o.sampling);
    return 0;
}

/*
 * models.h — a server of several models (server-private; docs/models.md): models_open fills the
 * registry (runtime/mreg.h) from the [model.NAME] presets, models_dir and the pull cache, with
 * the load and unload of one model (models_http.h's server_model); nothing loads until used.
 * models_close unloads them all (after the requests are over: server_shutdown drains first).
 */
#ifndef ATTND_SERVER_MODELS_H
#define ATTND_SERVER_MODELS_H

#include "attnd/common.h"
#include "http.h"
#include "mreg.h"

/* Errors: a preset without a file, an unreadable models_dir, no model at all, duplicate
 * names within presets. */
attnd_status models_open(struct server *s, attnd_err *err);
void models_close(struct server *s); /* accepts a server without models */
/* The model other than model `except` (an index of s->models; -1 = none) that holds owner's named
 * session id: a loaded model's sessions, or the files an unloaded one saved
 * (state_dir/models/NAME); its name into home. false when no other model has it. Any thread. */
bool models_session_home(struct server *s, int except, const char *owner, const char *id,
                         char home[MREG_NAME_MAX + 1]);
/* Cancels the work of every loaded model (shutdown past its timeout); nothing without models. */
void models_cancel_all(struct server *s);

#endif

/*
 * sess_json.h — the session store's views as the API returns them (GET /v1/sessions[/{id}]).
 */
#ifndef ATTND_SERVER_SESS_JSON_H
#define ATTND_SERVER_SESS_JSON_H

#include <jansson.h>

#include "sess.h"

/* {"id","object":"session","tokens","kv_tokens","kv_bytes","busy","created","last_used"} (new
 * ref), NULL when owner has no session id. */
json_t *sess_info_json(sess_store *st, const char *owner, const char *id);
/* The same object for a copy taken already (new ref). */
json_t *sess_info_to_json(const sess_info *s);
/* {"object":"list","data":[...]} (new ref), named sessions only, NULL when out of memory */
json_t *sess_list_json(sess_store *st, const char *owner);

#endif

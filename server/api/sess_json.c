/*
 * sess_json.c — sessions as JSON (see sess_json.h), from the copies the store hands out.
 */
#include "sess_json.h"

#include <stdlib.h>

json_t *sess_info_to_json(const sess_info *s) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(s->id));
    json_object_set_new(o, "object", json_string("session"));
    json_object_set_new(o, "tokens", json_integer(s->n_tokens));
    json_object_set_new(o, "kv_tokens", json_integer(s->kv_tokens));
    json_object_set_new(o, "kv_bytes", json_integer((json_int_t)s->kv_bytes));
    json_object_set_new(o, "busy", json_boolean(s->busy));
    json_object_set_new(o, "created", json_integer(s->created_ms / 1000));
    json_object_set_new(o, "last_used", json_integer(s->last_use_ms / 1000));
    return o;
}

json_t *sess_info_json(sess_store *st, const char *owner, const char *id) {
    sess_info s;
    return sess_get_info(st, owner, id, &s) ? sess_info_to_json(&s) : NULL;
}

json_t *sess_list_json(sess_store *st, const char *owner) {
    sess_info *v;
    int n = sess_list_info(st, owner, &v);
    if (n < 0) return NULL;
    json_t *root = json_object(), *arr = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(arr, sess_info_to_json(&v[i]));
    free(v);
    json_object_set_new(root, "object", json_string("list"));
    json_object_set_new(root, "data", arr);
    return root;
}

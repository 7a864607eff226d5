/*
 * web_assets.h — files served to browsers, compiled into the binary by cmake/embed.cmake:
 * the playground page (server/web/playground.html) served at GET /.
 */
#ifndef ATTND_SERVER_WEB_ASSETS_H
#define ATTND_SERVER_WEB_ASSETS_H

#include <stddef.h>

extern const unsigned char attnd_playground_html[]; /* (attnd_playground_html_len + 1) NUL-terminated */
extern const size_t attnd_playground_html_len;

#endif

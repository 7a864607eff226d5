/*
 * hub.h — models from the Hugging Face Hub, or any mirror that answers like it: `attnd pull
 * org/repo[:QUANT]` and `hf://org/repo[:QUANT]` model references.
 *
 * Resolving: the repository's files are listed through the Hub's API (GET
 * {endpoint}/api/models/{repo}/refs for the main branch's commit, then .../tree/{commit}?
 * recursive=true for each file's path, size and LFS sha256). The quant tag picks the first GGUF
 * model file (not mmproj, imatrix or a draft head) whose path holds the tag followed by '.' or
 * '-', case-insensitive; without a tag Q4_K_M, then Q8_0, then the first model file. A split set
 * (NAME-00001-of-0000N.gguf) is chosen by its first file and brings the others. This is how
 * llama-server's -hf picks a file.
 *
 * Downloading: {endpoint}/{repo}/resolve/{commit}/{path} (redirects followed), into
 * {cache}/{org}/{repo}/{path} through {path}.part: a download that is cut resumes from the bytes
 * it has (an HTTP Range request), here up to HUB_TRIES times and again on the next pull. A
 * finished file is checked against the sha256 the Hub lists for it; one that differs is kept
 * aside as {path}.bad and refused. Once pulled, a reference resolves offline (hub_cached) from a
 * note the pull leaves ({cache}/{org}/{repo}/.tags/{TAG}).
 *
 * Environment, as Hugging Face's own client reads it: HF_ENDPOINT (default
 * https://huggingface.co), HF_TOKEN (sent as a Bearer token: gated and private repositories).
 * The cache is $XDG_CACHE_HOME/attnd/models, or ~/.cache/attnd/models.
 *
 * Thread-safety: none needed; each call is self-contained (libcurl's global state is set up on
 * first use, from one thread: call hub_* from the main thread before starting others).
 */
#ifndef ATTND_SERVER_HUB_H
#define ATTND_SERVER_HUB_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/common.h"

#define HUB_TRIES 4 /* attempts per file, each resuming where the last one stopped */

/* Called as a file downloads: its path in the repository, bytes on disk and its size (0 when
 * unknown). */
typedef void (*hub_progress_fn)(void *user, const char *file, uint64_t done, uint64_t total);

typedef struct hub_opts {
    const char *endpoint;  /* NULL: $HF_ENDPOINT, or https://huggingface.co */
    const char *token;     /* NULL: $HF_TOKEN, or none */
    const char *cache_dir; /* NULL: hub_cache_dir() */
    hub_progress_fn progress;
    void *user;
} hub_opts;

/* "org/repo[:TAG]" or "hf://org/repo[:TAG]" split into its repository and tag ("" when none).
 * ATTND_ERR_INVALID for anything else (a name part outside [A-Za-z0-9._-], "..", empty). */
typedef struct hub_ref {
    char repo[200];
    char tag[64];
} hub_ref;
attnd_status hub_parse_ref(const char *s, hub_ref *out, attnd_err *err);

/* The model cache directory (not created). */
attnd_status hub_cache_dir(char *out, size_t cap, attnd_err *err);

/* Resolves ref on the Hub, downloads what is missing and verifies it; *path receives the local
 * file to load (a split set's first file). Errors name the repository, the file and the HTTP
 * status (401: gated or private, set HF_TOKEN; 404: no such repository or file). */
attnd_status hub_pull(const char *ref, const hub_opts *o, char *path, size_t cap, attnd_err *err);

/* The file `tag` picks from a repository's tree listing (the JSON array .../tree/{commit}
 * answers), as hub_pull picks it: its path into out. For tests and fuzzing. */
attnd_status hub_pick_from_tree(const char *json, size_t len, const char *tag, char *out, size_t cap,
                                attnd_err *err);

/* The local file of a ref pulled before, with no network: ATTND_ERR_NOT_FOUND when it was not. */
attnd_status hub_cached(const char *ref, const hub_opts *o, char *path, size_t cap, attnd_err *err);

#endif /* ATTND_SERVER_HUB_H */

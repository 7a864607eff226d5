#!/usr/bin/env python3
"""fake_hub.py — a local stand-in for the Hugging Face Hub's API and download endpoints, for
tests/test_pull.sh (the suite never reaches the real Hub).

    fake_hub.py ROOT PORTFILE LOGFILE

Serves the repositories under ROOT/<org>/<repo>/ (their files, any depth) on 127.0.0.1 at a free
port, written to PORTFILE once listening. As the Hub answers:
  GET /api/models/<org>/<repo>/refs                  {"branches": [{"name": "main", "targetCommit": ...}]}
  GET /api/models/<org>/<repo>/tree/<commit>?recursive=true
                                                     [{"type": "file", "path", "size", "oid",
                                                       "lfs": {"oid": sha256, "size"}}] (.gguf files as LFS)
  GET /<org>/<repo>/resolve/<commit>/<path>          302 to /cdn/<org>/<repo>/<path>, with X-Linked-Etag
                                                     and X-Linked-Size as the Hub sends them
  GET /cdn/<org>/<repo>/<path>                       the bytes, ETag, Accept-Ranges, Range -> 206
Controls, as files in a repository's folder (not listed):
  .token        the Bearer token it requires (else 401 with the Hub's JSON error)
  .wrong-sha    one path per line listed with a wrong sha256
  .cut          "PATH BYTES": the first full GET of PATH sends BYTES bytes of it, then closes
Every request is logged to LOGFILE as "METHOD PATH RANGE".
"""
import hashlib
import http.server
import json
import os
import sys
import threading

ROOT, PORTFILE, LOGFILE = sys.argv[1], sys.argv[2], sys.argv[3]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
cut_done = set()
lock = threading.Lock()


def repo_dir(org, repo):
    d = os.path.join(ROOT, org, repo)
    return d if os.path.isdir(d) and ".." not in (org, repo) else None


def control(d, name):
    p = os.path.join(d, name)
    return open(p).read().split("\n") if os.path.exists(p) else []


def files_of(d):
    out = []
    for base, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for n in sorted(names):
            if n.startswith("."):
                continue
            full = os.path.join(base, n)
            out.append(os.path.relpath(full, d))
    return sorted(out)


class Hub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorised(self, d):
        tok = [t for t in control(d, ".token") if t]
        if tok and self.headers.get("Authorization") != "Bearer " + tok[0]:
            self.send_json(401, {"error": "Access to model is restricted. You must be authenticated."})
            return False
        return True

    def do_GET(self):
        with open(LOGFILE, "a") as log:
            log.write("GET %s %s\n" % (self.path, self.headers.get("Range", "-")))
        parts = self.path.split("?")[0].split("/")[1:]
        if parts[:2] == ["api", "models"] and len(parts) >= 5:
            return self.api(parts[2], parts[3], parts[4:])
        if len(parts) >= 5 and parts[2] == "resolve":
            d = repo_dir(parts[0], parts[1])
            if not d or not self.authorised(d):
                return d or self.send_json(404, {"error": "Repository not found"})
            rel = "/".join(parts[4:])
            full = os.path.join(d, rel)
            if not os.path.isfile(full):
                return self.send_json(404, {"error": "Entry not found"})
            self.send_response(302)
            self.send_header("Location", "/cdn/%s/%s/%s" % (parts[0], parts[1], rel))
            self.send_header("X-Linked-Etag", '"%s"' % sha_of(full))
            self.send_header("X-Linked-Size", str(os.path.getsize(full)))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if parts[:1] == ["cdn"] and len(parts) >= 4:
            return self.cdn(parts[1], parts[2], "/".join(parts[3:]))
        self.send_json(404, {"error": "not found"})

    def api(self, org, repo, rest):
        d = repo_dir(org, repo)
        if not d:
            return self.send_json(404, {"error": "Repository not found"})
        if not self.authorised(d):
            return
        if rest == ["refs"]:
            return self.send_json(200, {"branches": [{"name": "dev", "targetCommit": "f" * 40},
                                                     {"name": "main", "targetCommit": COMMIT}],
                                        "tags": [], "converts": []})
        if rest[:1] == ["tree"]:
            wrong = set(x for x in control(d, ".wrong-sha") if x)
            out = []
            for rel in files_of(d):
                full = os.path.join(d, rel)
                size = os.path.getsize(full)
                item = {"type": "file", "path": rel, "size": size, "oid": hashlib.sha1(rel.encode()).hexdigest()}
                if rel.endswith(".gguf"):
                    sha = "0" * 64 if rel in wrong else sha_of(full)
                    item["lfs"] = {"oid": sha, "size": size, "pointerSize": 134}
                out.append(item)
            return self.send_json(200, out)
        self.send_json(404, {"error": "not found"})

    def cdn(self, org, repo, rel):
        d = repo_dir(org, repo)
        full = os.path.join(d, rel) if d else ""
        if not d or ".." in rel.split("/") or not os.path.isfile(full):
            return self.send_json(404, {"error": "not found"})
        data = open(full, "rb").read()
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % len(data))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        cut = [c.split() for c in control(d, ".cut") if c.strip()]
        limit = None
        with lock:
            for path, n in cut:
                if path == rel and start == 0 and rel not in cut_done:
                    cut_done.add(rel)
                    limit = int(n)
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", '"%s"' % sha_of(full))
        if start:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        self.end_headers()
        body = data[start:] if limit is None else data[start:limit]
        self.wfile.write(body)
        if limit is not None:
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)


def sha_of(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
with open(PORTFILE + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
os.rename(PORTFILE + ".tmp", PORTFILE)
srv.serve_forever()

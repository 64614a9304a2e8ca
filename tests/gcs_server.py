#!/usr/bin/python3
"""A Google Cloud Storage JSON-API server for ckpt's tests (Python standard library;
the `cryptography` package only to check service-account JWTs).

No GCS emulator is packaged here, so the tests run this one on 127.0.0.1; it answers
what Google's `gcloud storage` CLI and ckpt's gs:// backend send, as storage.googleapis.com
does:

  GET    /storage/v1/b/B                            bucket metadata (and /storageLayout)
  GET    /storage/v1/b/B/o?prefix&delimiter&pageToken&maxResults&startOffset   list
  GET    /storage/v1/b/B/o/NAME[?alt=media]          object metadata or its bytes (Range)
  GET    /download/storage/v1/b/B/o/NAME?alt=media   the same bytes
  DELETE /storage/v1/b/B/o/NAME                      delete
  POST   /upload/storage/v1/b/B/o?uploadType=media|multipart|resumable
  PUT    <session URI>  Content-Range: bytes a-b/total | a-b/* | */total | */*  (308 until done)

Objects have generations; ifGenerationMatch (0: must not exist) and
ifGenerationNotMatch are honoured (412); every object carries crc32c and md5Hash, every
media response x-goog-hash, and an upload whose x-goog-hash (or metadata crc32c) does
not match its bytes is refused (400). Objects are kept in the data directory, so a
server killed and started again on the same directory has what was stored.

Test controls (not GCS): POST /_control with a JSON object, GET /_stats.
  {"faults": [{"kind": "status", "status": 503, "count": 3, "match": "GET "},
              {"kind": "drop", "count": 1, "match": "alt=media"},
              {"kind": "delay", "seconds": 2, "count": 1, "match": "uploadType"}]}
      the next `count` requests whose "METHOD PATH?QUERY" contains `match` fail with
      that status, lose their connection (a media download after half its bytes), or
      are answered `seconds` late; "corrupt": a media download with its first byte flipped.
  {"auth": {"public_key": PEM, "client_email": E, "refresh_token": R, "client_id": I,
            "client_secret": S, "token_lifetime": N}}
      storage requests then need "Authorization: Bearer <a token this server issued,
      unexpired>"; POST /token exchanges a service-account JWT (RS256 signature and
      claims checked) or a refresh token for one; GET
      /computeMetadata/v1/instance/service-accounts/default/token (Metadata-Flavor:
      Google) hands one out.   {"auth": null} turns it off.
  /_stats: {"requests": {"kind": n}, "tokens": n, "auth_failures": n, "headers": [...], "queries": [...],
            "faults_left": n}
  POST /_reset_stats

Usage: gcs_server.py --data DIR --bucket NAME [--bucket NAME ...] [--port N] --port-file F
(port 0 or none: a free one; the port is written to F once the server listens).
"""

import base64
import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# --- crc32c (Castagnoli), as GCS reports it: big-endian, base64 ---
_T = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _T.append(_c)


def _crc32c_update_py(crc, data):
    crc ^= 0xFFFFFFFF
    t = _T
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# Debian's python3-crcmod computes it in C (about 400 MiB/s against 12 here): what
# makes the server fast enough for gigabytes (bench/bench_gcs.cpp). Same values.
try:
    import crcmod.predefined

    _crc32c_c = crcmod.predefined.mkCrcFun("crc-32c")

    def crc32c_update(crc, data):
        return _crc32c_c(bytes(data), crc)
except ImportError:
    crc32c_update = _crc32c_update_py


def b64_crc(crc):
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


class Store:
    """Objects of the buckets: metadata in memory, bytes and metadata in files."""

    def __init__(self, root, buckets):
        self.root = root
        self.lock = threading.Lock()
        self.buckets = set(buckets)
        self.objects = {b: {} for b in buckets}  # bucket -> name -> meta
        self.next_gen = int(time.time() * 1e6)
        for b in buckets:
            d = os.path.join(root, b)
            os.makedirs(d, exist_ok=True)
            for f in os.listdir(d):
                if not f.endswith(".json"):
                    continue
                try:
                    with open(os.path.join(d, f)) as fh:
                        m = json.load(fh)
                except (OSError, ValueError):
                    continue
                old = self.objects[b].get(m["name"])
                if old is None or int(old["generation"]) < int(m["generation"]):
                    self.objects[b][m["name"]] = m
                self.next_gen = max(self.next_gen, int(m["generation"]) + 1)

    def data_path(self, bucket, gen):
        return os.path.join(self.root, bucket, str(gen) + ".bin")

    def new_generation(self):
        with self.lock:
            self.next_gen += 1
            return self.next_gen

    def get(self, bucket, name):
        with self.lock:
            return self.objects[bucket].get(name)

    def check_conditions(self, current, query):
        """None, or the 412 message."""
        gm = query.get("ifGenerationMatch")
        if gm is not None:
            have = int(current["generation"]) if current else 0
            if int(gm) != have:
                return "At least one of the pre-conditions you specified did not hold."
        gnm = query.get("ifGenerationNotMatch")
        if gnm is not None and current and int(gnm) == int(current["generation"]):
            return "At least one of the pre-conditions you specified did not hold."
        return None

    def commit(self, bucket, name, tmp_path, size, crc, md5, content_type, query, extra=None):
        """Publishes the bytes in tmp_path as the object: (meta, None) or (None, 412 message)."""
        gen = self.new_generation()
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        meta = {
            "kind": "storage#object",
            "id": "%s/%s/%d" % (bucket, name, gen),
            "name": name,
            "bucket": bucket,
            "generation": str(gen),
            "metageneration": "1",
            "contentType": content_type or "application/octet-stream",
            "storageClass": "STANDARD",
            "size": str(size),
            "crc32c": b64_crc(crc),
            "md5Hash": base64.b64encode(md5).decode(),
            "etag": base64.b64encode(str(gen).encode()).decode(),
            "timeCreated": now,
            "updated": now,
            "timeStorageClassUpdated": now,
        }
        if extra and isinstance(extra.get("metadata"), dict):
            meta["metadata"] = extra["metadata"]
        with self.lock:
            current = self.objects[bucket].get(name)
            why = self.check_conditions(current, query)
            if why:
                os.unlink(tmp_path)
                return None, why
            os.rename(tmp_path, self.data_path(bucket, gen))
            mpath = os.path.join(self.root, bucket, str(gen) + ".json")
            with open(mpath + ".tmp", "w") as fh:
                json.dump(meta, fh)
            os.rename(mpath + ".tmp", mpath)
            self.objects[bucket][name] = meta
        if current:
            self.drop_files(bucket, current)
        return meta, None

    def drop_files(self, bucket, meta):
        for ext in (".json", ".bin"):
            try:
                os.unlink(os.path.join(self.root, bucket, meta["generation"] + ext))
            except OSError:
                pass

    def delete(self, bucket, name, query):
        """None (deleted), 404 or a 412 message."""
        with self.lock:
            current = self.objects[bucket].get(name)
            if current is None:
                return 404
            why = self.check_conditions(current, query)
            if why:
                return why
            del self.objects[bucket][name]
        self.drop_files(bucket, current)
        return None

    def names(self, bucket):
        with self.lock:
            return sorted(self.objects[bucket].items())


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.faults = []
        self.auth = None
        self.tokens = {}  # token -> expiry
        self.stats = {}
        self.token_requests = 0
        self.auth_failures = 0
        self.headers = []  # the Authorization-free headers of the last requests (what clients send)
        self.queries = []  # and their query strings
        self.sessions = {}

    def take_fault(self, line):
        with self.lock:
            for f in self.faults:
                if f.get("count", 0) > 0 and f.get("match", "") in line:
                    f["count"] -= 1
                    return dict(f)
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gcs-test-server"

    def log_message(self, fmt, *args):  # quiet unless GCS_SERVER_LOG is set; the tests read /_stats
        if os.environ.get("GCS_SERVER_LOG"):
            sys.stderr.write("%s\n" % (fmt % args))

    # --- plumbing ---
    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                n = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def send(self, status, body=b"", ctype="application/json; charset=UTF-8", headers=()):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def resource(self, meta):
        """An object's JSON resource, with the links clients download from."""
        host = self.headers.get("Host", "127.0.0.1")
        name = urllib.parse.quote(meta["name"], safe="")
        out = dict(meta)
        out["selfLink"] = "http://%s/storage/v1/b/%s/o/%s" % (host, meta["bucket"], name)
        out["mediaLink"] = "http://%s/download/storage/v1/b/%s/o/%s?generation=%s&alt=media" % (
            host, meta["bucket"], name, meta["generation"])
        return out

    def error(self, status, message, reason=None):
        reasons = {400: "invalid", 401: "required", 403: "forbidden", 404: "notFound", 412: "conditionNotMet",
                   429: "rateLimitExceeded", 503: "backendError"}
        r = reason or reasons.get(status, "backendError")
        self.send(status, {"error": {"code": status, "message": message, "errors": [
            {"domain": "global", "reason": r, "message": message}]}})

    def drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # --- dispatch ---
    def do_GET(self):
        self.handle_any()

    def do_POST(self):
        self.handle_any()

    def do_PUT(self):
        self.handle_any()

    def do_DELETE(self):
        self.handle_any()

    def do_PATCH(self):
        self.handle_any()

    def handle_any(self):
        st = self.server.state
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        if path.startswith("/resumable/upload/"):  # where gcloud starts resumable uploads
            path = path[len("/resumable"):]
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        body = self.read_body()
        if path == "/_control":
            return self.control(json.loads(body or b"{}"))
        if path == "/_stats":
            with st.lock:
                return self.send(200, {"requests": st.stats, "tokens": st.token_requests,
                                       "auth_failures": st.auth_failures, "headers": st.headers[-50:],
                                       "queries": st.queries[-50:],
                                       "faults_left": sum(f.get("count", 0) for f in st.faults)})
        if path == "/_reset_stats":
            with st.lock:
                st.stats, st.token_requests, st.auth_failures, st.headers, st.queries = {}, 0, 0, [], []
            return self.send(200, {})
        if path == "/token":
            return self.token(body)
        if path.startswith("/computeMetadata/") or (path == "/" and "Metadata-Flavor" in self.headers):
            return self.metadata(path)

        kind = self.kind(path, query)
        line = "%s %s?%s" % (self.command, path, url.query)
        with st.lock:
            st.stats[kind] = st.stats.get(kind, 0) + 1
            st.headers.append({k: v for k, v in self.headers.items() if k.lower() != "authorization"})
            st.queries.append(url.query)
        fault = st.take_fault(line)
        if fault:
            if fault["kind"] == "status":
                return self.error(int(fault["status"]), "injected failure")
            if fault["kind"] == "delay":
                time.sleep(float(fault["seconds"]))
            if fault["kind"] == "drop" and kind != "GET media":
                return self.drop()
        if not self.authorized():
            with st.lock:
                st.auth_failures += 1
            return self.error(401, "Anonymous caller does not have storage.objects.get access, or the token is invalid.",
                              "required")
        try:
            self.storage(path, query, body, kind, fault)
        except (BrokenPipeError, ConnectionResetError):
            pass

    @staticmethod
    def kind(path, query):
        if path.startswith("/upload/"):
            return "upload " + query.get("uploadType", "?")
        if "/o/" in path or path.startswith("/download/"):
            return ("GET media" if query.get("alt") == "media" or path.startswith("/download/") else "GET meta") \
                if path and not path.endswith("/o") else "other"
        if path.endswith("/o"):
            return "list"
        return "other"

    def authorized(self):
        st = self.server.state
        with st.lock:
            if not st.auth:
                return True
            h = self.headers.get("Authorization", "")
            if not h.startswith("Bearer "):
                return False
            exp = st.tokens.get(h[7:])
            return exp is not None and exp > time.time()

    def control(self, c):
        st = self.server.state
        with st.lock:
            if "faults" in c:
                st.faults = list(c["faults"])
            if "auth" in c:
                st.auth = c["auth"]
                st.tokens = {}
        self.send(200, {})

    def issue_token(self, headers=()):
        st = self.server.state
        with st.lock:
            life = int(st.auth.get("token_lifetime", 3600)) if st.auth else 3600
            tok = "ya29.test-" + uuid.uuid4().hex
            st.tokens[tok] = time.time() + life
            st.token_requests += 1
        return self.send(200, {"access_token": tok, "expires_in": life, "token_type": "Bearer"}, headers=headers)

    def token(self, body):
        st = self.server.state
        form = dict(urllib.parse.parse_qsl(body.decode()))
        auth = st.auth or {}
        grant = form.get("grant_type", "")
        if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            why = self.check_jwt(form.get("assertion", ""), auth)
            if why:
                return self.send(400, {"error": "invalid_grant", "error_description": why})
            return self.issue_token()
        if grant == "refresh_token":
            if not auth.get("refresh_token") or (form.get("refresh_token"), form.get("client_id"),
                                                 form.get("client_secret")) != (
                    auth.get("refresh_token"), auth.get("client_id"), auth.get("client_secret")):
                return self.send(400, {"error": "invalid_grant", "error_description": "Bad Request"})
            return self.issue_token()
        return self.send(400, {"error": "unsupported_grant_type"})

    def check_jwt(self, assertion, auth):
        parts = assertion.split(".")
        if len(parts) != 3:
            return "not a JWT"
        try:
            header = json.loads(b64url_decode(parts[0]))
            claims = json.loads(b64url_decode(parts[1]))
            sig = b64url_decode(parts[2])
        except ValueError:
            return "not a JWT"
        if header.get("alg") != "RS256":
            return "alg is not RS256"
        if not auth.get("public_key"):
            return "no key registered"
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding
        key = serialization.load_pem_public_key(auth["public_key"].encode())
        try:
            key.verify(sig, (parts[0] + "." + parts[1]).encode(), padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return "Invalid JWT Signature."
        now = time.time()
        host = self.headers.get("Host", "")
        if claims.get("iss") != auth.get("client_email"):
            return "iss is not the service account"
        if claims.get("aud") != "http://%s/token" % host:
            return "aud is not the token URI"
        if "https://www.googleapis.com/auth/devstorage" not in claims.get("scope", ""):
            return "no storage scope"
        iat, exp = claims.get("iat", 0), claims.get("exp", 0)
        if abs(iat - now) > 300 or exp <= now or exp - iat > 3600:
            return "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
        return None

    def metadata(self, path):
        flavor = [("Metadata-Flavor", "Google")]
        if self.headers.get("Metadata-Flavor") != "Google":
            return self.send(403, b"Missing Metadata-Flavor:Google header.", "text/plain", flavor)
        if path == "/computeMetadata/v1/instance/service-accounts/default/token":
            return self.issue_token(flavor)
        if path == "/":
            return self.send(200, b"computeMetadata/\n", "application/text", flavor)
        if path == "/computeMetadata/v1/project/project-id":
            return self.send(200, b"test-project", "application/text", flavor)
        return self.send(404, b"not found", "text/plain", flavor)

    # --- the JSON API ---
    def storage(self, path, query, body, kind, fault):
        store = self.server.store
        segs = path.split("/")
        # /storage/v1/b/B..., /upload/storage/v1/b/B/o, /download/storage/v1/b/B/o/NAME
        if segs[1] in ("upload", "download"):
            segs = segs[1:]
        if len(segs) < 5 or segs[1:4] != ["storage", "v1", "b"]:
            return self.error(404, "Not Found")
        bucket = urllib.parse.unquote(segs[4])
        if bucket not in store.buckets:
            return self.error(404, "The specified bucket does not exist.")
        rest = segs[5:]
        if not rest:
            if self.command == "GET":
                return self.send(200, {"kind": "storage#bucket", "id": bucket, "name": bucket,
                                       "location": "US", "storageClass": "STANDARD", "metageneration": "1"})
            return self.error(405, "method not allowed")
        if rest == ["storageLayout"] and self.command == "GET":  # gcloud asks before a recursive copy
            return self.send(200, {"kind": "storage#storageLayout", "bucket": bucket, "location": "US",
                                   "locationType": "multi-region", "hierarchicalNamespace": {"enabled": False}})
        if rest[0] != "o":
            return self.error(404, "Not Found")
        if path.startswith("/upload/"):
            if self.command == "POST":
                return self.upload_start(bucket, query, body)
            if self.command == "PUT":
                return self.upload_chunk(bucket, query, body)
            if self.command == "DELETE" and "upload_id" in query:  # cancels a session, as GCS does
                with self.server.state.lock:
                    gone = self.server.state.sessions.pop(query["upload_id"], None)
                if gone:
                    try:
                        os.unlink(gone["path"])
                    except OSError:
                        pass
                return self.send(499 if gone else 404, b"", "text/plain")
            return self.error(405, "method not allowed")
        if len(rest) == 1:
            if self.command == "GET":
                return self.list(bucket, query)
            return self.error(405, "method not allowed")
        name = urllib.parse.unquote("/".join(rest[1:]))
        if self.command == "DELETE":
            r = store.delete(bucket, name, query)
            if r == 404:
                return self.error(404, "No such object: %s/%s" % (bucket, name))
            if r:
                return self.error(412, r)
            return self.send(204, b"")
        if self.command != "GET":
            return self.error(405, "method not allowed")
        meta = store.get(bucket, name)
        if meta is None or ("generation" in query and query["generation"] != meta["generation"]):
            return self.error(404, "No such object: %s/%s" % (bucket, name))
        why = store.check_conditions(meta, query)
        if why:
            return self.error(412, why)
        if kind != "GET media":
            return self.send(200, self.resource(meta))
        return self.media(bucket, meta, fault)

    def media(self, bucket, meta, fault):
        size = int(meta["size"])
        begin, end, status = 0, size, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            if a == "":
                begin = max(0, size - int(b))
            else:
                begin = int(a)
                end = min(size, int(b) + 1) if b else size
            if begin >= size and size > 0:
                return self.send(416, {"error": {"code": 416, "message": "The requested range cannot be satisfied."}},
                                 headers=[("Content-Range", "bytes */%d" % size)])
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", meta["contentType"])
        self.send_header("Content-Length", str(end - begin))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (begin, end - 1, size))
        self.send_header("x-goog-hash", "crc32c=%s,md5=%s" % (meta["crc32c"], meta["md5Hash"]))
        self.send_header("x-goog-generation", meta["generation"])
        self.send_header("x-goog-metageneration", "1")
        self.send_header("x-goog-stored-content-length", meta["size"])
        self.send_header("x-goog-stored-content-encoding", "identity")
        self.send_header("ETag", meta["etag"])
        self.end_headers()
        with open(self.server.store.data_path(bucket, meta["generation"]), "rb") as fh:
            fh.seek(begin)
            left = end - begin
            cut = left // 2 if fault and fault["kind"] == "drop" else -1
            while left > 0:
                chunk = fh.read(min(left, 1 << 20) if cut < 0 else min(left, 1 << 20, max(cut, 1)))
                if not chunk:
                    break
                if fault and fault["kind"] == "corrupt" and left == end - begin:
                    chunk = bytes([chunk[0] ^ 1]) + chunk[1:]
                self.wfile.write(chunk)
                left -= len(chunk)
                if cut >= 0:
                    cut -= len(chunk)
                    if cut <= 0:
                        self.wfile.flush()
                        return self.drop()

    def list(self, bucket, query):
        prefix = query.get("prefix", "")
        delim = query.get("delimiter", "")
        token = b64url_decode(query["pageToken"]).decode() if query.get("pageToken") else ""
        start = query.get("startOffset", "")
        limit = max(1, min(1000, int(query.get("maxResults") or 1000)))
        entries = []  # (sort key, object meta or None for a prefix)
        seen = set()
        for name, meta in self.server.store.names(bucket):
            if not name.startswith(prefix) or name < start:
                continue
            if delim:
                cut = name.find(delim, len(prefix))
                if cut >= 0:
                    p = name[:cut + len(delim)]
                    if p not in seen:
                        seen.add(p)
                        entries.append((p, None))
                    continue
            entries.append((name, meta))
        entries.sort(key=lambda e: e[0])
        entries = [e for e in entries if e[0] > token]
        page, more = entries[:limit], len(entries) > limit
        out = {"kind": "storage#objects"}
        items = [self.resource(m) for _, m in page if m is not None]
        prefixes = [k for k, m in page if m is None]
        if items:
            out["items"] = items
        if prefixes:
            out["prefixes"] = prefixes
        if more:
            out["nextPageToken"] = base64.urlsafe_b64encode(page[-1][0].encode()).decode().rstrip("=")
        self.send(200, out)

    def expected_crc(self, meta_json):
        for part in self.headers.get("x-goog-hash", "").split(","):
            k, _, v = part.strip().partition("=")
            if k == "crc32c":
                return v
        return (meta_json or {}).get("crc32c")

    def write_tmp(self, bucket, data):
        path = os.path.join(self.server.store.root, bucket, "upload-%s.tmp" % uuid.uuid4().hex)
        with open(path, "wb") as fh:
            fh.write(data)
        return path

    def finish_upload(self, bucket, name, data_path, size, crc, md5, ctype, query, meta_json, want_crc):
        if want_crc and want_crc != b64_crc(crc):
            os.unlink(data_path)
            return self.error(400, "Provided CRC32C \"%s\" doesn't match calculated CRC32C \"%s\"." % (
                want_crc, b64_crc(crc)), "invalid")
        meta, why = self.server.store.commit(bucket, name, data_path, size, crc, md5, ctype, query, meta_json)
        if why:
            return self.error(412, why)
        return self.send(200, self.resource(meta))

    def upload_start(self, bucket, query, body):
        utype = query.get("uploadType", "")
        if utype == "media":
            name = query.get("name")
            if not name:
                return self.error(400, "Required parameter: name")
            path = self.write_tmp(bucket, body)
            return self.finish_upload(bucket, name, path, len(body), crc32c_update(0, body), hashlib.md5(body).digest(),
                                      self.headers.get("Content-Type"), query, None, self.expected_crc(None))
        if utype == "multipart":
            ctype = self.headers.get("Content-Type", "")
            boundary = None
            for p in ctype.split(";"):
                k, _, v = p.strip().partition("=")
                if k == "boundary":
                    boundary = v.strip("\"'")
            if not boundary:
                return self.error(400, "multipart upload without a boundary")
            parts = []
            for chunk in body.split(b"--" + boundary.encode())[1:]:
                if chunk.startswith(b"--"):
                    break
                # CRLF per RFC 2046; gcloud's Python writes bare LF
                chunk = chunk[2:] if chunk.startswith(b"\r\n") else chunk[1:] if chunk.startswith(b"\n") else chunk
                crlf = chunk.find(b"\r\n\r\n")
                lf = chunk.find(b"\n\n")
                if crlf >= 0 and (lf < 0 or crlf < lf):
                    head, content = chunk[:crlf], chunk[crlf + 4:]
                else:
                    head, content = chunk[:lf], chunk[lf + 2:]
                if content.endswith(b"\r\n"):
                    content = content[:-2]
                elif content.endswith(b"\n"):
                    content = content[:-1]
                hdrs = {}
                for line in head.decode("latin-1").replace("\r\n", "\n").split("\n"):
                    k, _, v = line.partition(":")
                    if k:
                        hdrs[k.strip().lower()] = v.strip()
                parts.append((hdrs, content))
            if os.environ.get("GCS_SERVER_LOG"):
                sys.stderr.write("multipart %r %r\n" % (ctype, body[:600]))
            if len(parts) != 2:
                return self.error(400, "multipart upload needs two parts (metadata, media)")
            meta_json = json.loads(parts[0][1] or b"{}")
            name = meta_json.get("name") or query.get("name")
            if not name:
                return self.error(400, "Required parameter: name")
            data = parts[1][1]
            path = self.write_tmp(bucket, data)
            return self.finish_upload(bucket, name, path, len(data), crc32c_update(0, data), hashlib.md5(data).digest(),
                                      meta_json.get("contentType") or parts[1][0].get("content-type"), query,
                                      meta_json, self.expected_crc(meta_json))
        if utype == "resumable":
            if "upload_id" in query:
                return self.error(400, "POST to a session URI")
            meta_json = json.loads(body or b"{}") if body else {}
            name = meta_json.get("name") or query.get("name")
            if not name:
                return self.error(400, "Required parameter: name")
            # preconditions are checked when the object is published; an object the
            # session must not overwrite already there fails now, as GCS does
            why = self.server.store.check_conditions(self.server.store.get(bucket, name), query)
            if why:
                return self.error(412, why)
            uid = uuid.uuid4().hex
            st = self.server.state
            with st.lock:
                st.sessions[uid] = {"bucket": bucket, "name": name, "query": query, "meta": meta_json,
                                    "path": self.write_tmp(bucket, b""), "received": 0, "crc": 0,
                                    "md5": hashlib.md5(),
                                    "ctype": meta_json.get("contentType") or self.headers.get("X-Upload-Content-Type"),
                                    "lock": threading.Lock()}
            host = self.headers.get("Host", "127.0.0.1")
            loc = "http://%s/upload/storage/v1/b/%s/o?uploadType=resumable&upload_id=%s" % (host, bucket, uid)
            return self.send(200, b"", "text/plain", [("Location", loc), ("X-GUploader-UploadID", uid)])
        return self.error(400, "unknown uploadType")

    def upload_chunk(self, bucket, query, body):
        st = self.server.state
        with st.lock:
            s = st.sessions.get(query.get("upload_id", ""))
        if s is None or s["bucket"] != bucket:
            return self.error(404, "No such upload session")
        cr = self.headers.get("Content-Range", "")
        if not cr.startswith("bytes "):
            cr = "bytes */*" if not body else "bytes 0-%d/%d" % (len(body) - 1, len(body))
        span, _, total = cr[6:].partition("/")
        with s["lock"]:
            if s.get("done"):
                return self.send(200, self.resource(s["done"]))
            if span != "*":
                a, _, b = span.partition("-")
                a, b = int(a), int(b)
                if b - a + 1 != len(body):
                    return self.error(400, "Content-Range does not match the body's length")
                if a > s["received"]:
                    return self.error(400, "Invalid request: a chunk beyond the bytes received")
                new = body[s["received"] - a:]
                with open(s["path"], "ab") as fh:
                    fh.write(new)
                s["crc"] = crc32c_update(s["crc"], new)
                s["md5"].update(new)
                s["received"] += len(new)
            if total != "*" and int(total) == s["received"]:
                with st.lock:
                    st.sessions.pop(query["upload_id"], None)
                return self.finish_upload(bucket, s["name"], s["path"], s["received"], s["crc"], s["md5"].digest(),
                                          s["ctype"], s["query"], s["meta"], self.expected_crc(s["meta"]))
            if total != "*" and int(total) < s["received"]:
                return self.error(400, "more bytes than the total")
            hdrs = [("Range", "bytes=0-%d" % (s["received"] - 1))] if s["received"] else []
            return self.send(308, b"", "text/plain", hdrs)


def main():
    args = sys.argv[1:]
    data, buckets, port, port_file = None, [], 0, None
    i = 0
    while i < len(args):
        a, v = args[i], args[i + 1] if i + 1 < len(args) else None
        if a == "--data":
            data = v
        elif a == "--bucket":
            buckets.append(v)
        elif a == "--port":
            port = int(v)
        elif a == "--port-file":
            port_file = v
        else:
            sys.exit("unknown argument " + a)
        i += 2
    if not data or not buckets:
        sys.exit(__doc__)
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.store = Store(data, buckets)
    server.state = State()
    if port_file:
        with open(port_file + ".tmp", "w") as fh:
            fh.write(str(server.server_address[1]))
        os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()

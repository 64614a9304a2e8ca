#!/usr/bin/python3
"""The AWS credential sources, for tests/test_storage.cpp: STS, a container's
credentials endpoint and the EC2 instance metadata service (IMDSv2), on 127.0.0.1.
Python standard library only.

Usage: aws_credentials_server.py --port-file F [--port N]

Each source hands out the same keys (AccessKeyId, SecretAccessKey: "S3RVER", the
account s3rver knows, unless /_control says otherwise), a fresh SessionToken each
time ("session-<n>"), expiring `lifetime` seconds from now (3600 unless set):

  POST /            STS AssumeRoleWithWebIdentity (form body, unsigned, as the SDKs send
                    it): RoleArn must be `role_arn`, WebIdentityToken `web_identity_token`;
                    answers the XML of STS, or 400 InvalidIdentityToken / AccessDenied
  GET  /container/* a container's credentials endpoint: needs "Authorization:
                    <container_token>" when one is set; answers JSON
  PUT  /latest/api/token                      IMDSv2: a session token (needs
                                              X-aws-ec2-metadata-token-ttl-seconds)
  GET  /latest/meta-data/iam/security-credentials/[ROLE]   needs X-aws-ec2-metadata-token
                    (401 without: IMDSv1 is off); the role's name, then its keys as JSON

  POST /_control  {"lifetime": N, "key_id": K, "secret": S, "role_arn": R,
                   "web_identity_token": T, "container_token": A}
  GET  /_stats    {"sts": n, "container": n, "imds_token": n, "imds_keys": n,
                   "refused": n, "session_tokens": [...]}

No request's secrets are logged.
"""

import datetime
import json
import secrets
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROLE = "ckpt-instance-role"


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.config = {"lifetime": 3600, "key_id": "S3RVER", "secret": "S3RVER",
                       "role_arn": "arn:aws:iam::123456789012:role/ckpt", "web_identity_token": "",
                       "container_token": ""}
        self.stats = {"sts": 0, "container": 0, "imds_token": 0, "imds_keys": 0, "refused": 0}
        self.imds_tokens = set()
        self.issued = 0

    def keys(self, kind):
        with self.lock:
            self.issued += 1
            self.stats[kind] += 1
            c = dict(self.config)
            n = self.issued
        exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=int(c["lifetime"]))
        return {"AccessKeyId": c["key_id"], "SecretAccessKey": c["secret"], "Token": "session-%d" % n,
                "Expiration": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else (json.dumps(body) if not isinstance(body, str) else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def refuse(self, status, code, message, xml=False):
        st = self.server.state
        with st.lock:
            st.stats["refused"] += 1
        if xml:
            doc = ("<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type>"
                   "<Code>%s</Code><Message>%s</Message></Error><RequestId>r-1</RequestId></ErrorResponse>" % (code, message))
            return self.send(status, doc, "text/xml")
        return self.send(status, {"code": code, "message": message})

    def do_PUT(self):
        st = self.server.state
        self.body()
        if self.path == "/latest/api/token":
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self.refuse(400, "MissingTTL", "X-aws-ec2-metadata-token-ttl-seconds is required")
            tok = secrets.token_urlsafe(24)
            with st.lock:
                st.imds_tokens.add(tok)
                st.stats["imds_token"] += 1
            return self.send(200, tok, "text/plain")
        return self.refuse(404, "NotFound", "no such path")

    def do_GET(self):
        st = self.server.state
        path = self.path
        if path == "/_stats":
            with st.lock:
                return self.send(200, dict(st.stats))
        if path.startswith("/container/"):
            with st.lock:
                want = st.config["container_token"]
            if want and self.headers.get("Authorization") != want:
                return self.refuse(403, "AccessDenied", "the container's authorization token is wrong")
            return self.send(200, self.server.state.keys("container"))
        if path.startswith("/latest/meta-data/iam/security-credentials/"):
            with st.lock:
                ok = self.headers.get("X-aws-ec2-metadata-token") in st.imds_tokens
            if not ok:
                return self.refuse(401, "Unauthorized", "IMDSv2 session token required")
            role = path[len("/latest/meta-data/iam/security-credentials/"):]
            if role == "":
                return self.send(200, ROLE, "text/plain")
            if role != ROLE:
                return self.refuse(404, "NotFound", "no such role")
            k = st.keys("imds_keys")
            k.update({"Code": "Success", "Type": "AWS-HMAC", "LastUpdated": k["Expiration"]})
            return self.send(200, k)
        return self.refuse(404, "NotFound", "no such path")

    def do_POST(self):
        st = self.server.state
        raw = self.body()
        if self.path == "/_control":
            c = json.loads(raw or b"{}")
            with st.lock:
                st.config.update(c)
            return self.send(200, {})
        if self.path == "/":
            form = urllib.parse.parse_qs(raw.decode(), keep_blank_values=True)
            get = lambda k: form.get(k, [""])[0]
            if self.headers.get("Authorization"):
                return self.refuse(400, "InvalidRequest", "AssumeRoleWithWebIdentity is unsigned", xml=True)
            if get("Action") != "AssumeRoleWithWebIdentity" or get("Version") != "2011-06-15":
                return self.refuse(400, "InvalidAction", "unknown action", xml=True)
            with st.lock:
                c = dict(st.config)
            if get("RoleArn") != c["role_arn"]:
                return self.refuse(403, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity", xml=True)
            if not get("WebIdentityToken") or get("WebIdentityToken") != c["web_identity_token"]:
                return self.refuse(400, "InvalidIdentityToken", "The web identity token that was passed is not valid", xml=True)
            if not get("RoleSessionName"):
                return self.refuse(400, "ValidationError", "RoleSessionName is required", xml=True)
            k = st.keys("sts")
            doc = ("<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
                   "<AssumeRoleWithWebIdentityResult><Credentials>"
                   "<SessionToken>%s</SessionToken><SecretAccessKey>%s</SecretAccessKey>"
                   "<Expiration>%s</Expiration><AccessKeyId>%s</AccessKeyId></Credentials>"
                   "<SubjectFromWebIdentityToken>system:serviceaccount:ckpt:trainer</SubjectFromWebIdentityToken>"
                   "<AssumedRoleUser><Arn>%s/%s</Arn><AssumedRoleId>AROA:ckpt</AssumedRoleId></AssumedRoleUser>"
                   "</AssumeRoleWithWebIdentityResult><ResponseMetadata><RequestId>r-2</RequestId></ResponseMetadata>"
                   "</AssumeRoleWithWebIdentityResponse>") % (
                       k["Token"], k["SecretAccessKey"], k["Expiration"], k["AccessKeyId"], c["role_arn"],
                       get("RoleSessionName"))
            return self.send(200, doc, "text/xml")
        return self.refuse(404, "NotFound", "no such path")


def main():
    args, port, port_file = sys.argv[1:], 0, None
    i = 0
    while i < len(args):
        if args[i] == "--port":
            port = int(args[i + 1])
        elif args[i] == "--port-file":
            port_file = args[i + 1]
        else:
            sys.exit("unknown argument " + args[i])
        i += 2
    if not port_file:
        sys.exit(__doc__)
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.state = State()
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.replace(tmp, port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()

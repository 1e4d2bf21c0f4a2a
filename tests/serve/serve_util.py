"""What tests/serve's scripts share: an `ffn serve` process on a free
loopback port (its stderr, the access log, in a file), plain HTTP posts,
/metrics."""
import json
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    ffn = None  # the ffn binary (set by the test)

    def __init__(self, *args, env=None, port=None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # stderr (the access log: a line per request) to a file, so that it never fills a pipe
        self.err = tempfile.NamedTemporaryFile("w+", prefix="ffn-serve-", suffix=".log")
        self.p = subprocess.Popen([self.ffn, "serve", "--port", str(self.port), *args], stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, env=env)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError("ffn serve exited: " + self.log())
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError("ffn serve did not become healthy")

    def log(self):
        self.err.flush()
        with open(self.err.name) as f:
            return f.read()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
        return self.p.returncode


def post(url, body, headers=None, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def metrics_text(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()

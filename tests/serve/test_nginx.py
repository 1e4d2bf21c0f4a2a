#!/usr/bin/env python3
"""Scale-out (issue 67): nginx in front of two `ffn serve` processes on
loopback ports, one of them killed mid-run, and a restart.

    python tests/serve/test_nginx.py FFN_BINARY DATA_DIR

nginx runs with docs/serve.md's configuration (upstream of the two, HTTP/1.1
keep-alive to them, proxy_buffering off for server-sent events, passive
health: max_fails=1 fail_timeout=30s, proxy_next_upstream on errors and
503s). 8 clients send seeded chat requests (stream on and off) through it;
after the first 12 are answered, backend A is killed (SIGKILL). Checked:
  - every request sent after the kill is answered (nginx passes it to B),
    and its answer is bitwise what B gives it alone afterwards;
  - requests sent before the kill were answered, or (in flight on A) failed
    with a 502 or a cut connection: a SIGKILL loses only what was in flight;
  - A restarted on its port answers the same requests with the same bits;
  - /health through nginx is 200 throughout.
Exit 0 pass, 1 fail, 77 skipped (no nginx, or ffn built without cpp-httplib).
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, free_port  # noqa: E402

FFN, DATA = sys.argv[1], sys.argv[2]
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
failures = []
Server.ffn = FFN
WORDS = "the a cat dog sat on red book water fast slow night fire light read page".split()

NGINX_CONF = """
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  upstream ffn {{
    server 127.0.0.1:{a} max_fails=1 fail_timeout=30s;
    server 127.0.0.1:{b} max_fails=1 fail_timeout=30s;
    keepalive 16;
  }}
  server {{
    listen 127.0.0.1:{port};
    client_max_body_size 16m;
    location / {{
      proxy_pass http://ffn;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
      proxy_next_upstream error timeout http_503;
      proxy_next_upstream_tries 2;
    }}
  }}
}}
"""


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def ask(port, body):
    """The answer's bits that must match (choices and token usage), or ("error", what)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read().decode("utf-8", errors="replace")
        if r.status != 200:
            return ("error", r.status)
        if body.get("stream"):
            events = [line[6:] for line in raw.split("\n") if line.startswith("data: ")]
            if not events or events[-1] != "[DONE]":
                return ("error", "a cut connection: the stream has no [DONE]")
            return tuple(json.dumps([json.loads(e)["choices"]], sort_keys=True) for e in events[:-1])
        j = json.loads(raw)
        return (json.dumps([j["choices"], j["usage"]["completion_tokens"]], sort_keys=True),)
    except (OSError, http.client.HTTPException, ValueError) as e:
        return ("error", "a cut connection: " + repr(e))
    finally:
        c.close()


def health(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/health")
        return c.getresponse().status
    except OSError:
        return -1
    finally:
        c.close()


def main():
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
    if not nginx:
        print("SKIPPED: scale-out: nginx is not installed (scripts/setup.sh installs nginx-light)")
        return 77
    if "not built" in subprocess.run([FFN, "serve", "--help"], capture_output=True, text=True).stdout:
        print("SKIPPED: scale-out: ffn was built without cpp-httplib")
        return 77
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "gqa3_tied")
        shutil.copytree(os.path.join(DATA, "llama", "gqa3_tied"), model)
        with open(os.path.join(model, "chat_template.jinja"), "w") as f:
            f.write(CHATML)
        common = ("--model", model, "--threads", "1", "--parallel", "4", "--log-format", "none")
        a, b = Server(*common), Server(*common)
        port = free_port()
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF.format(d=d, a=a.port, b=b.port, port=port))
        ng = subprocess.Popen([nginx, "-p", d, "-c", os.path.join(d, "nginx.conf"), "-g", "daemon off;"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        a2 = None
        try:
            deadline = time.time() + 20
            while health(port) != 200 and time.time() < deadline and ng.poll() is None:
                time.sleep(0.05)
            if ng.poll() is not None:
                print(f"SKIPPED: scale-out: nginx did not start: {ng.stderr.read()[-300:]}")
                return 77
            check(health(port) == 200, "/health through nginx")
            requests = [{"messages": [{"role": "user", "content": " ".join(WORDS[(i * 7 + j) % len(WORDS)]
                                                                               for j in range(3 + i % 11))}],
                         "max_tokens": 8 + i % 17, "seed": i, "temperature": 0.8 if i % 2 else 0,
                         "stream": i % 3 == 0} for i in range(48)]
            answers, sent_after_kill = {}, set()
            killed = threading.Event()
            lock = threading.Lock()
            nxt = iter(range(len(requests)))

            def client():
                while True:
                    with lock:
                        i = next(nxt, None)
                        if i is None:
                            return
                        if killed.is_set():
                            sent_after_kill.add(i)
                    got = ask(port, requests[i])
                    with lock:
                        answers[i] = got
                        if len(answers) == 12 and not killed.is_set():
                            a.p.send_signal(signal.SIGKILL)
                            a.p.wait(10)
                            killed.set()

            threads = [threading.Thread(target=client) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            check(killed.is_set() and len(sent_after_kill) > 20, f"{len(sent_after_kill)} requests sent after the kill")
            check(health(port) == 200, "/health through nginx after the kill")
            # After the kill: all answered, bitwise as B answers them alone.
            for i in sorted(sent_after_kill):
                alone = ask(b.port, requests[i])
                check(answers.get(i) == alone and alone[0] != "error",
                      f"request {i} (after the kill): {str(answers.get(i))[:120]} vs alone {str(alone)[:120]}")
            lost = [i for i, v in answers.items() if v[0] == "error"]
            check(all(i not in sent_after_kill for i in lost), f"lost after the kill: {lost}")
            check(all(answers[i][1] == 502 or str(answers[i][1]).startswith("a cut connection") for i in lost),
                  f"in flight on the killed backend: 502 or a cut connection ({[answers[i] for i in lost]})")
            print(f"scale-out: {len(answers)} requests, {len(sent_after_kill)} after the kill, "
                  f"{len(lost)} lost in flight on the killed backend")
            # A restarted on its port answers the same requests with the same bits.
            a2 = Server(*common, port=a.port)
            for i in range(0, len(requests), 5):
                check(ask(a2.port, requests[i]) == ask(b.port, requests[i]), f"request {i}: restarted A == B")
        finally:
            ng.send_signal(signal.SIGQUIT)
            try:
                ng.wait(10)
            except subprocess.TimeoutExpired:
                ng.kill()
            for s in (a, b, a2):
                if s:
                    s.stop()
    print(f"scale-out: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

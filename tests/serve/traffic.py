"""The traffic of the load and fault test (tests/serve/load_test.py), also
sent by bench/serve_mixed_peers.py to ffn serve and llama-server alike: random
well-formed chat and completion requests, and clients that misbehave (a
connection dropped mid-stream or mid-body, a body sent a byte at a time).
Loopback only; every call is bounded in time."""
import http.client
import json
import socket
import time

WORDS = "the a cat dog sat on red book water fast slow night fire light read page old first then by it".split()


def request(port, path, body, timeout=120):
    """(status, headers, the answer: parsed JSON, or for a stream the list of its data objects)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=body if isinstance(body, bytes) else json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read().decode("utf-8", errors="replace")
        if r.getheader("Content-Type", "").startswith("text/event-stream"):
            events = [line[6:] for line in raw.split("\n") if line.startswith("data: ")]
            return r.status, dict(r.getheaders()), [json.loads(e) for e in events if e != "[DONE]"] + (
                ["[DONE]"] if "[DONE]" in events else [])
        return r.status, dict(r.getheaders()), json.loads(raw) if raw else None
    finally:
        c.close()


def random_request(rng):
    chat = rng.random() < 0.6
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
    body = {"max_tokens": rng.randint(1, 24), "seed": rng.randint(0, 2 ** 31)}
    if rng.random() < 0.5:
        body.update(temperature=round(rng.uniform(0.3, 1.2), 2), top_p=round(rng.uniform(0.5, 1.0), 2))
    else:
        body["temperature"] = 0
    if rng.random() < 0.4:
        body["stream"] = True
        if chat:
            body["stream_options"] = {"include_usage": True}
    if rng.random() < 0.3:
        body.update({"logprobs": True, "top_logprobs": 2} if chat else {"logprobs": 2})
    if chat:
        body["messages"] = [{"role": "user", "content": words}]
        return "/v1/chat/completions", body
    body["prompt"] = words
    return "/v1/completions", body


def drop_mid_stream(port, body):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    s.recv(200)  # the headers or a first chunk
    s.close()


def drop_mid_body(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 1000\r\n\r\n" + b'{"messages": [{"role": "user", "content": "' + b"x" * 200)
    time.sleep(0.05)
    s.close()


def slow_client(port, path, body):
    """The body a byte at a time; then the answer, as request() gives it."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode())
    for i in range(len(data)):
        s.sendall(data[i:i + 1])
        time.sleep(0.002)
    raw = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        raw += b
    s.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if b"chunked" in head.lower():  # de-chunk
        out = b""
        while rest:
            n, _, rest = rest.partition(b"\r\n")
            n = int(n, 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        rest = out
    text = rest.decode("utf-8", errors="replace")
    if b"text/event-stream" in head:
        events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
        return status, [json.loads(e) for e in events if e != "[DONE]"] + (["[DONE]"] if "[DONE]" in events else [])
    return status, json.loads(text)

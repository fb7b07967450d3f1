"""Real clients against a running `webtensor serve`: the `openai` Python package (chat streaming and not,
completions, embeddings, errors), curl for the raw server-sent-event framing, and a bounded load test (200
requests, 16 at a time, mixed streaming, lengths and endpoints, some clients disconnecting): zero lost or mixed-up
answers (each checked against the same request run alone), every slot free afterwards, resident memory flat
between two rounds, p50/p99 latencies printed.

Usage: python3 tests/serve_clients.py URL SERVER_PID API_KEY   (run by tests/serve.rs)
"""

import concurrent.futures as cf
import json
import random
import subprocess
import sys
import time
import urllib.error
import urllib.request

import openai

URL, PID, KEY = sys.argv[1], int(sys.argv[2]), sys.argv[3]
client = openai.OpenAI(base_url=URL + "/v1", api_key=KEY, max_retries=0, timeout=300)
MODEL = client.models.list().data[0].id
EMBED = client.models.list().data[1].id


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def raw(path, body=None, key=KEY, method=None):
    """(status, headers, body text) of a raw request."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def chat(prompt, n, stream, seed=None, temperature=0.0, stop_after=None):
    """The answer's text (a streamed one joined), its finish reason and usage."""
    msgs = [{"role": "user", "content": prompt}]
    kw = dict(model=MODEL, messages=msgs, max_tokens=n, temperature=temperature, seed=seed)
    if not stream:
        r = client.chat.completions.create(**kw)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens
    s = client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
    text, reason, usage = "", None, None
    for i, c in enumerate(s):
        if stop_after is not None and i >= stop_after:
            s.close()  # the client goes away mid-answer
            return None, "disconnected", None
        if c.usage:
            usage = c.usage.completion_tokens
        for ch in c.choices:
            text += ch.delta.content or ""
            reason = ch.finish_reason or reason
    return text, reason, usage


def complete(prompt, n, stream):
    if not stream:
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0)
        return r.choices[0].text, r.choices[0].finish_reason, r.usage.completion_tokens
    text, reason = "", None
    for c in client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0, stream=True):
        text += c.choices[0].text
        reason = c.choices[0].finish_reason or reason
    return text, reason, None


def embed(texts, fmt=None):
    kw = {} if fmt is None else {"encoding_format": fmt}
    r = client.embeddings.create(model=EMBED, input=texts, **kw)
    return [d.embedding for d in r.data]


def api_checks():
    text, reason, used = chat("What is 2 + 2?", 12, stream=False)
    check(isinstance(text, str) and len(text) > 0 and reason in ("stop", "length"), f"chat: {text!r} {reason}")
    stext, sreason, sused = chat("What is 2 + 2?", 12, stream=True)
    check((stext, sreason, sused) == (text, reason, used), f"streamed {stext!r} vs whole {text!r}")
    ctext, creason, _ = complete("The capital of France is", 6, stream=False)
    check(creason == "length" and ctext.strip(), f"completion: {ctext!r} {creason}")
    check(complete("The capital of France is", 6, stream=True)[0] == ctext, "streamed completion differs")
    # a stop string ends the answer before it
    r = client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0, stop=[" 7"])
    check(r.choices[0].finish_reason == "stop" and " 7" not in r.choices[0].text, f"stop: {r.choices[0]}")
    # seeded sampling repeats
    a = chat("Name a color.", 8, stream=False, seed=5, temperature=0.9)
    check(a == chat("Name a color.", 8, stream=False, seed=5, temperature=0.9), "the same seed gave another answer")
    # embeddings: the client's default (base64) and floats agree; unit length (MiniLM normalizes)
    b64, flt = embed(["a cat", "a dog"]), embed(["a cat", "a dog"], "float")
    check(len(b64) == 2 and len(b64[0]) == 384, "embedding shape")
    check(max(abs(x - y) for x, y in zip(b64[0], flt[0])) < 1e-6, "base64 and float embeddings differ")
    check(abs(sum(x * x for x in flt[1]) - 1) < 1e-3, "not normalized")
    check(len(embed("one string")) == 1, "a string input")
    print("openai client: chat, streaming, completions, stop, seed, embeddings ok")


def error_checks():
    def status_of(f):
        try:
            f()
        except openai.APIStatusError as e:
            body = e.response.json()
            check(set(body["error"]) >= {"message", "type", "code"}, f"error body {body}")
            return e.status_code, body["error"]["message"]
        raise AssertionError("no error")

    msgs = [{"role": "user", "content": "hi"}]
    s, _ = status_of(lambda: client.chat.completions.create(model="no-such-model", messages=msgs))
    check(s == 404, f"unknown model: {s}")
    s, m = status_of(lambda: client.completions.create(model=MODEL, prompt="word " * 5000, max_tokens=4))
    check(s == 400 and "5001" in m and "4096" in m, f"prompt too long: {s} {m}")
    s, _ = status_of(lambda: client.chat.completions.create(model=MODEL, messages=msgs, temperature=-1))
    check(s == 400, f"bad temperature: {s}")
    bad = openai.OpenAI(base_url=URL + "/v1", api_key="wrong", max_retries=0)
    s, _ = status_of(lambda: bad.models.list())
    check(s == 401, f"wrong key: {s}")
    check(raw("/v1/models", key=None)[0] == 401, "missing key")
    check(raw("/health", key=None)[0] == 200, "/health needs no key")
    st, _, body = raw("/v1/chat/completions", b"{not json")
    check(st == 400 and json.loads(body)["error"]["type"] == "invalid_request_error", f"malformed JSON: {st}")
    st, _, body = raw("/v1/embeddings", b'{"input": "' + b"x" * (5 << 20) + b'"}')
    check(st == 413, f"big body: {st}")
    # what the server does not do is refused by name, not silently left out of the answer
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}]
    tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    refused = [
        ("image_url", lambda: client.chat.completions.create(model=MODEL, messages=image, max_tokens=1)),
        ("logprobs", lambda: client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=1, logprobs=True)),
        ("tools", lambda: client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=1, tools=tool)),
        ("response_format", lambda: client.chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=1, response_format={"type": "json_object"})),
        ("echo", lambda: client.completions.create(model=MODEL, prompt="hi", max_tokens=1, echo=True)),
        ("best_of", lambda: client.completions.create(model=MODEL, prompt="hi", max_tokens=1, best_of=3)),
        ("dimensions", lambda: client.embeddings.create(model=EMBED, input="a", dimensions=64)),
    ]
    for field, f in refused:
        s, m = status_of(f)
        check(s == 400 and field in m, f"{field}: {s} {m}")
    # the same fields at their 'off' values are accepted, as clients send them
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=1, logprobs=False, tools=[],
                                       response_format={"type": "text"})
    check(r.choices[0].finish_reason == "length", "off-valued fields")
    check(len(client.embeddings.create(model=EMBED, input="a", dimensions=384).data[0].embedding) == 384, "own size")
    print("errors: 404 model, 400 too long (both lengths named), 400 bad value, 401 key, 400 JSON, 413 body ok")
    print("errors: images, logprobs, tools, response_format, echo, best_of, dimensions refused by name ok")


def sse_framing():
    body = json.dumps({"model": MODEL, "prompt": "Hello", "max_tokens": 4, "temperature": 0, "stream": True})
    out = subprocess.run(["curl", "-sN", URL + "/v1/completions", "-H", "Authorization: Bearer " + KEY,
                          "-H", "Content-Type: application/json", "-d", body], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    events = [e for e in out.split("\n\n") if e.strip()]
    check(all(e.startswith("data: ") for e in events), f"not SSE: {out[:200]!r}")
    check(events[-1] == "data: [DONE]", "no [DONE] at the end")
    check(json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length", "no finish reason")
    print(f"curl: {len(events)} server-sent events, each 'data: ...', ending with [DONE]")


def rss_kib():
    with open(f"/proc/{PID}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])


def metric(name):
    text = raw("/metrics")[2]
    return int(next(line for line in text.splitlines() if line.startswith(name + " ")).split()[1])


PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "List three fruits.",
           "What is the boiling point of water?", "1, 2, 3,", "Tell me a fact about cats.",
           "Translate 'hello' to Spanish.", "Once upon a time"]


def requests_for_round(rng):
    """200 requests: (kind, prompt index, tokens, stream, disconnect after)."""
    out = []
    for _ in range(200):
        kind = rng.choice(["chat", "chat", "complete", "embed"])
        out.append((kind, rng.randrange(len(PROMPTS)), rng.choice([4, 8, 16]), rng.random() < 0.5,
                    2 if kind == "chat" and rng.random() < 0.1 else None))
    return out


def run_one(req):
    kind, p, n, stream, stop_after = req
    t0 = time.time()
    if kind == "chat":
        res = chat(PROMPTS[p], n, stream or stop_after is not None, stop_after=stop_after)[:2]
    elif kind == "complete":
        res = complete(PROMPTS[p], n, stream)[:2]
    else:
        res = [round(x, 4) for x in embed([PROMPTS[p], PROMPTS[-1 - p]], "float")[0][:8]]
    return req, res, time.time() - t0


def load_test():
    rng = random.Random(1)
    rounds = [requests_for_round(rng), requests_for_round(rng)]
    # each distinct request, alone
    alone = {}
    for req in sorted({(k, p, n) for r in rounds for (k, p, n, _, _) in r}):
        alone[req] = run_one((req[0], req[1], req[2], False, None))[1]
    rss = []
    for r in rounds:
        t0 = time.time()
        with cf.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(run_one, r))
        wall = time.time() - t0
        lat = sorted(x[2] for x in results)
        mixed = [(q, got, alone[q[:3]]) for q, got, _ in results if q[4] is None and got != alone[q[:3]]]
        check(len(results) == len(r), "lost answers")
        check(not mixed, f"{len(mixed)} answers differ from the same request alone, e.g. {mixed[:2]}")
        gone = sum(1 for q in r if q[4] is not None)
        print(f"load: {len(r)} requests, 16 at a time, {gone} disconnecting: {wall:.1f} s, "
              f"latency p50 {lat[len(lat) // 2] * 1e3:.0f} ms, p99 {lat[int(len(lat) * 0.99)] * 1e3:.0f} ms")
        time.sleep(0.5)
        check(metric("webtensor_slots_busy") == 0 and metric("webtensor_requests_queued") == 0, "slots busy after")
        rss.append(rss_kib())
    print(f"resident memory after each round: {rss[0] / 1024:.1f} MiB, {rss[1] / 1024:.1f} MiB")
    check(rss[1] <= rss[0] * 1.10 + 8 * 1024, f"resident memory grew: {rss}")


api_checks()
error_checks()
sse_framing()
load_test()
print("all client checks passed")

#!/usr/bin/env python3
"""`webtensor serve` against llama.cpp's `llama-server`: the same model, the same load, the same client (this
script; the standard library only), each server started and stopped here in turn.

Loads (SmolLM2-135M Q4_1 on the CPU in docs/performance.md's table):
  1 client       one streamed completion at a time, 128 tokens: decode tokens/s and time to first token
  8 clients      8 concurrent streamed completions of 128 tokens, 3 rounds: total generated tokens/s, p50 and p99
                 time to first token
  embeddings     16 concurrent clients of 8 sentences each, 4 rounds: sentences/s (webtensor only: compare with
                 `webtensor bench embed`'s batch-32 figure)

Usage:
  python3 scripts/bench_serve.py --model FILE.gguf [--embedding-model DIR] [--llama-server PATH]
         [--webtensor target/release/webtensor] [--backend cpu] [--threads 2]

`scripts/build-llama-server.sh` builds llama-server from llama-cpp-python 0.3.36's sdist (its vendor/llama.cpp).
"""

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

PROMPTS = ["Once upon a time, in a land far away,", "The history of the Roman Empire began",
           "Here is a long story about a dragon:", "In the year 2050, the world",
           "The recipe for a good bread is", "A letter to my future self:",
           "The first chapter of the novel opens with", "Ten facts about the ocean:"]
SENTENCES = [f"Sentence number {i} is about {w} and other things people say." for i, w in
             enumerate(["cats", "dogs", "the sea", "mountains", "bread", "music", "rain", "trains"] * 16)]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, port):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            sys.exit(f"error: {cmd[0]} exited with {proc.returncode}")
        time.sleep(0.5)
    sys.exit(f"error: {cmd[0]} did not become healthy")


def stream_completion(port, prompt, n):
    """(time to first token s, generated tokens, seconds from first to last token)."""
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True, "ignore_eos": True,
                       "cache_prompt": False})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first = last = None
    tokens = 0
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        doc = json.loads(line[6:])
        if doc.get("choices") and doc["choices"][0].get("text"):
            now = time.perf_counter()
            first = first or now
            last = now
            tokens += 1
    return (first - t0) if first else float("nan"), tokens, (last - first) if first else 0.0


def concurrent(fn, args):
    out = [None] * len(args)

    def run(i):
        out[i] = fn(*args[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, time.perf_counter() - t0


def embed(port, texts):
    body = json.dumps({"input": texts, "encoding_format": "float"})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    return len(json.loads(r.read())["data"])


def bench_generation(port, n):
    stream_completion(port, "Warm up", 8)
    one = [stream_completion(port, p, n) for p in PROMPTS[:3]]
    decode = statistics.median(t / d for _, t, d in one if d > 0)
    ttft1 = statistics.median(f for f, _, _ in one)
    totals, ttfts = [], []
    for r in range(3):
        res, wall = concurrent(stream_completion, [(port, PROMPTS[(i + r) % 8], n) for i in range(8)])
        totals.append(sum(t for _, t, _ in res) / wall)
        ttfts += [f for f, _, _ in res]
    ttfts.sort()
    return {"decode1": decode, "ttft1": ttft1 * 1e3, "total8": statistics.median(totals),
            "p50": ttfts[len(ttfts) // 2] * 1e3, "p99": ttfts[min(len(ttfts) - 1, int(len(ttfts) * 0.99))] * 1e3}


def bench_embeddings(port):
    embed(port, SENTENCES[:8])
    rates = []
    for r in range(4):
        res, wall = concurrent(embed, [(port, SENTENCES[i * 8:(i + 1) * 8]) for i in range(16)])
        rates.append(sum(res) / wall)
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--embedding-model")
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"))
    ap.add_argument("--webtensor", default="target/release/webtensor")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=1024, help="positions per slot")
    a = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {a.tokens}-token answers; 8 slots of {a.ctx} "
          f"positions each; greedy", flush=True)
    rows = {}
    port = free_port()
    cmd = [a.webtensor, "serve", "--model", a.model, "--port", str(port), "--parallel", "8", "--ctx", str(a.ctx),
           "--backend", a.backend]
    if a.embedding_model:
        cmd += ["--embedding-model", a.embedding_model]
    p = start(cmd, port)
    try:
        rows["webtensor serve"] = bench_generation(port, a.tokens)
        emb = bench_embeddings(port) if a.embedding_model else None
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait()
    if a.llama_server:
        port = free_port()
        cmd = [a.llama_server, "-m", a.model, "--port", str(port), "-np", "8", "-c", str(8 * a.ctx), "-t",
               str(a.threads), "-cb", "--no-webui"]
        p = start(cmd, port)
        try:
            rows["llama-server"] = bench_generation(port, a.tokens)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait()
    print()
    print("| server | 1 client decode tokens/s | 1 client TTFT ms | 8 clients total tokens/s | 8 clients TTFT p50 ms "
          "| p99 ms |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['decode1']:.1f} | {r['ttft1']:.0f} | {r['total8']:.1f} | {r['p50']:.0f} | {r['p99']:.0f} |")
    if len(rows) == 2:
        w, l = rows["webtensor serve"], rows["llama-server"]
        print(f"| ratio (tokens/s: higher is better; TTFT: lower is) | {w['decode1'] / l['decode1']:.2f}x | "
              f"{w['ttft1'] / l['ttft1']:.2f}x | {w['total8'] / l['total8']:.2f}x | {w['p50'] / l['p50']:.2f}x | "
              f"{w['p99'] / l['p99']:.2f}x |")
    w = rows["webtensor serve"]
    print(f"\nwebtensor: 8 clients give {w['total8'] / w['decode1']:.2f}x its 1-client decode tokens/s")
    if emb is not None:
        print(f"embeddings, 16 clients x 8 sentences: {emb:.1f} sentences/s "
              f"(compare: webtensor bench embed --model {a.embedding_model} --backend {a.backend}, batch 32)")


if __name__ == "__main__":
    main()

"""llama.cpp's side of `webtensor bench generate`, through llama-cpp-python, spoken to in JSON lines on
stdin/stdout (one request, one reply). llama-bench's method: pp = one batch of the prompt's tokens into an empty
context; tg = one token per decode call, fixed pseudo-random tokens, no sampling. A missing module is reported
as {"absent": why}, never an error.

Requests: {"cmd": "load", "path", "n_ctx", "threads", "batch"} · {"cmd": "pp", "tokens"} · {"cmd": "tg",
"tokens"} · {"cmd": "depth", "tokens", "length", "steps"} (the cache filled with the first `length` tokens, then
`steps` decode calls timed one by one: {"ms": [each call's]}) · {"cmd": "rss"} (peak resident set in KiB).
"""
import json
import sys
import time


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def peak_rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def main():
    try:
        import llama_cpp
    except Exception as e:  # noqa: BLE001 - any import failure means "absent"
        reply({"absent": f"llama_cpp not importable ({type(e).__name__}: {e}); pip install llama-cpp-python"})
        return
    reply({"hello": True, "version": getattr(llama_cpp, "__version__", "?")})
    llm = None
    for line in sys.stdin:
        req = json.loads(line)
        cmd = req["cmd"]
        if cmd == "load":
            llm = llama_cpp.Llama(model_path=req["path"], n_ctx=req["n_ctx"], n_threads=req["threads"],
                                  n_threads_batch=req["threads"], n_batch=req["batch"], n_ubatch=req["batch"],
                                  verbose=False)
            reply({"ok": True})
        elif cmd == "pp":
            llm.reset()
            llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
            t = time.perf_counter()
            llm.eval(req["tokens"])
            reply({"ms": (time.perf_counter() - t) * 1e3})
        elif cmd == "tg":
            llm.reset()
            llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
            toks = req["tokens"]
            llm.eval(toks[:1])
            t = time.perf_counter()
            for tok in toks[1:]:
                llm.eval([tok])
            reply({"ms": (time.perf_counter() - t) * 1e3})
        elif cmd == "depth":
            llm.reset()
            llm._ctx.kv_cache_clear() if hasattr(llm._ctx, "kv_cache_clear") else None
            toks, n = req["tokens"], req["length"]
            if n > 0:
                llm.eval(toks[:n])
            ms = []
            for tok in toks[n:n + req["steps"]]:
                t = time.perf_counter()
                llm.eval([tok])
                ms.append((time.perf_counter() - t) * 1e3)
            reply({"ms": ms})
        elif cmd == "rss":
            reply({"kib": peak_rss_kib()})
        else:
            reply({"error": f"unknown command {cmd}"})


if __name__ == "__main__":
    main()

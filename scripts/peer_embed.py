"""sentence-transformers' side of `webtensor bench embed`, in JSON lines on stdin/stdout (one request, one
reply). A missing module is reported as {"absent": why}, never an error.

Requests: {"cmd": "load", "path", "threads", "device"} (reply: {"ok", "device"}; device "cuda" falls back to
"cpu" where torch has no CUDA) · {"cmd": "embed", "texts", "batch"} (reply: {"ms"}).
"""
import json
import sys
import time


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except Exception as e:  # noqa: BLE001 - any import failure means "absent"
        reply({"absent": f"sentence_transformers not importable ({type(e).__name__}); pip install sentence-transformers"})
        return
    import sentence_transformers

    reply({"hello": True, "version": sentence_transformers.__version__, "torch": torch.__version__})
    model = None
    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "load":
            torch.set_num_threads(req["threads"])
            device = req.get("device", "cpu")
            if device == "cuda" and not torch.cuda.is_available():
                device = "cpu"
            model = SentenceTransformer(req["path"], device=device)
            reply({"ok": True, "device": device})
        elif req["cmd"] == "embed":
            t = time.perf_counter()
            model.encode(req["texts"], batch_size=req["batch"], convert_to_numpy=True)
            reply({"ms": (time.perf_counter() - t) * 1e3})
        else:
            reply({"error": f"unknown command {req['cmd']}"})


if __name__ == "__main__":
    main()

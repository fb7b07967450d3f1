#!/usr/bin/env python3
"""Serves a folder (default web/) on 127.0.0.1 for the demo: explicit MIME types (.wasm as application/wasm,
.js/.mjs as text/javascript), no caching, cross-origin isolation headers (COOP same-origin, COEP require-corp),
no directory listings outside the folder.

    python3 scripts/serve.py [--port N] [--dir web]

--port 0 picks a free port. The first line printed is `Serving http://127.0.0.1:PORT/` (tests read it).
"""
import argparse
import functools
import http.server
import sys


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".json": "application/json",
        ".html": "text/html",
        ".css": "text/css",
        ".svg": "image/svg+xml",
        ".ts": "text/plain",
        "": "application/octet-stream",
    }

    def end_headers(self):
        self.send_header("Cache-Control", "no-store")
        # cross-origin isolation: SharedArrayBuffer for threaded wasm (wllama's threads need it)
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        super().end_headers()

    def log_message(self, fmt, *args):
        if not self.server.quiet:
            super().log_message(fmt, *args)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--dir", default="web")
    p.add_argument("--quiet", action="store_true", help="do not log requests")
    a = p.parse_args()
    handler = functools.partial(Handler, directory=a.dir)
    with http.server.ThreadingHTTPServer(("127.0.0.1", a.port), handler) as httpd:
        httpd.quiet = a.quiet
        print(f"Serving http://127.0.0.1:{httpd.server_address[1]}/", flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

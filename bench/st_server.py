"""The embedding server a user would otherwise write: a sentence-transformers model behind the same ASGI server
(starlette on uvicorn) with OpenAI's /v1/embeddings route, each request encoded on its own, one at a time.
For bench/serve_api.py only.

    python -m bench.st_server MODEL_DIR PORT       # POST /v1/embeddings {"input": ...}, GET /health
"""

from __future__ import annotations

import sys
import threading

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def app_for(model_dir: str) -> Starlette:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_dir, device="cpu")
    lock = threading.Lock()  # a request at a time: how a plain model endpoint runs

    def encode(texts: list[str]) -> list[list[float]]:
        with lock:
            return model.encode(texts, normalize_embeddings=True, convert_to_numpy=True).tolist()

    async def embeddings(request: Request) -> JSONResponse:
        body = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = await run_in_threadpool(encode, texts)
        return JSONResponse({"object": "list", "model": "st", "data": [
            {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"]), Route("/health", health)])


if __name__ == "__main__":
    uvicorn.run(app_for(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)

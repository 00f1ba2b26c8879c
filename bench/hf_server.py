"""The server a user would otherwise write: transformers' text-classification pipeline behind the same ASGI server
(starlette on uvicorn), each request run on its own, no batching. For bench/serve.py only.

    python -m bench.hf_server MODEL_DIR PORT       # POST /v1/predict {"inputs": [...]}, GET /health
"""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def app_for(model_dir: str) -> Starlette:
    import transformers

    classify = transformers.pipeline("text-classification", model=model_dir, device="cpu", top_k=None)

    async def predict(request: Request) -> JSONResponse:
        body = await request.json()
        # each request on its own, in starlette's thread pool, as a plain pipeline endpoint runs
        return JSONResponse({"predictions": await run_in_threadpool(classify, body["inputs"])})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/v1/predict", predict, methods=["POST"]), Route("/health", health)])


if __name__ == "__main__":
    uvicorn.run(app_for(sys.argv[1]), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)

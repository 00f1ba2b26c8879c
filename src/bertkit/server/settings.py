"""`bertkit serve`'s settings: each field is a flag of the command (bertkit.settings makes it one)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..settings import DEVICES, Settings, non_negative, one_of, option, positive

API_KEY_VARIABLE = "BERTKIT_API_KEY"


@dataclass(frozen=True)
class ServeSettings(Settings):
    model: Path = option(help="a model folder (fine-tuned: its task; any, with --pooling: an embedder) or an "
                              "exported one", metavar="DIR")
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8000, "port to listen on")
    max_batch_size: int = option(32, "inputs a forward pass, at most (one larger request still runs)", check=positive)
    max_batch_tokens: int = option(16384, "tokens a forward pass, at most, padding included (one larger request "
                                          "still runs, split across passes)", check=positive)
    max_wait_ms: float = option(5.0, "how long a request waits for others to batch with", check=non_negative)
    max_concurrent_requests: int = option(512, "requests queued or running, at most: one more is answered 429 at "
                                               "once", check=positive)
    # also how long a forward pass may run before the server counts as stalled (module docstring, README)
    request_timeout: float = option(30.0, "seconds a request may wait in the queue; then it is answered 503 and "
                                          "never runs", check=positive)
    max_inputs: int = option(256, "inputs a request, at most", check=positive)
    max_body_bytes: int = option(1 << 20, "request body size, at most", check=positive)
    api_key: str | None = option(None, "every /v1 route needs Authorization: Bearer KEY", metavar="KEY",
                                 shows=f"the {API_KEY_VARIABLE} environment variable, if set", secret=True)
    pooling: str | None = option(None, "serve as an embedder (POST /v1/embeddings) with this pooling",
                                 check=one_of("mean", "cls", "pooler"), shows="a folder without a task: its sentence-transformers files' pooling, else mean")
    normalize: bool = option(False, "embedder: unit-length vectors (dot product = cosine); on by itself where the "
                                    "folder's sentence-transformers files say so")
    workers: int = option(1, "processes on one port, the cores shared among them", check=positive)
    device: str = option("auto", "auto: a GPU when there is one", check=DEVICES)
    precision: str = option("fp32", "bf16: autocast (PyTorch task models)", check=one_of("fp32", "bf16"))

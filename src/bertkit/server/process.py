"""`bertkit serve`'s process: uvicorn on the app, SIGTERM (drain, then exit 0), and --workers N processes on one
port, each given its settings through multiprocessing's pipe."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any

from ..errors import BertkitError
from .app import create_app
from .settings import API_KEY_VARIABLE, ServeSettings

log = logging.getLogger("bertkit")


@dataclass(frozen=True)
class WorkerApp:
    """The app factory of one of `--workers` processes. uvicorn pickles it, with the settings it holds (the API
    key among them), to each worker through multiprocessing's pipe: in neither the worker's environment
    (/proc/PID/environ) nor its command line."""

    cfg: ServeSettings

    def __call__(self) -> Any:
        return create_app(self.cfg, warm_first=True)  # a cold worker must not answer 503 while a warm one could answer


def serve(cfg: ServeSettings) -> None:
    """Serves until SIGTERM or Ctrl-C: loads the model, warms it up, then listens on cfg.host:cfg.port."""
    try:
        import orjson  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn
    except ImportError:
        raise BertkitError("bertkit serve needs uvicorn, starlette, orjson and prometheus_client: pip install "
                           "'bertkit[serve]'") from None
    # uvicorn finishes the requests in flight on SIGTERM (each within the request timeout), then raises the signal
    # again to end the process; a handler here takes that second one, so that a drained server exits 0
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    # no proxy-headers middleware: nothing here reads the client's address or scheme, and it costs every request
    options = {"host": cfg.host, "port": cfg.port, "log_level": "warning", "access_log": False, "proxy_headers": False,
               "timeout_graceful_shutdown": int(cfg.request_timeout) + 30}
    if cfg.workers == 1:
        app = create_app(cfg)  # a model that cannot be served fails here, before the port is taken
        log.warning("serving %s on http://%s:%d", cfg.model, cfg.host, cfg.port)
        uvicorn.Server(uvicorn.Config(app, **options)).run()
        return
    log.warning("serving %s on http://%s:%d (%d processes)", cfg.model, cfg.host, cfg.port, cfg.workers)
    # each worker loads the model and takes its share of the cores (torch and onnxruntime read OMP_NUM_THREADS)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // cfg.workers)))
    # a key from the environment goes to the workers inside their settings, not in the environment they inherit
    cfg = dataclasses.replace(cfg, api_key=cfg.api_key or os.environ.pop(API_KEY_VARIABLE, None) or None)
    _run_workers(uvicorn.Config(WorkerApp(cfg), factory=True, workers=cfg.workers, **options))


def _run_workers(config: Any) -> None:
    """uvicorn.run's --workers path, with an app factory object in place of an import string (which uvicorn.run
    insists on, and which could carry no settings but through the environment)."""
    import inspect

    from uvicorn.server import Server
    from uvicorn.supervisors import Multiprocess

    sockets = [config.bind_socket()]
    if "target" in inspect.signature(Multiprocess).parameters:  # uvicorn before its supervisor took the target itself
        Multiprocess(config, target=Server(config).run, sockets=sockets).run()
    else:
        Multiprocess(config, sockets=sockets).run()

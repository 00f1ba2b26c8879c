"""`bertkit serve`'s names where they have always been imported from: the server is the `bertkit.server` package."""

from .server import ServeSettings, create_app, serve

__all__ = ["ServeSettings", "create_app", "serve"]

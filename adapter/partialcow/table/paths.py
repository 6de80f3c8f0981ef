"""Local paths of table locations and data files (the page engine rewrites files on a local or mounted file
system)."""

from __future__ import annotations

from urllib.parse import unquote, urlparse

__all__ = ["local_path"]


def local_path(uri: str) -> str | None:
    """The local file-system path of ``uri`` (``file:/x``, ``file:///x`` or ``/x``), or None for remote URIs.

    >>> local_path("file:/tmp/a%20b/t"), local_path("/tmp/t"), local_path("s3://bucket/t")
    ('/tmp/a b/t', '/tmp/t', None)
    """
    if uri.startswith("/"):
        return uri
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    return None

"""Local paths of table locations and data files (the page engine rewrites files on a local or mounted file
system).

Two spellings of a local file reach the write path, and reading one as the other names a file that does not exist:

- A *location*, as Iceberg and Hadoop's ``Path`` write it: ``file:/wh/t/data/ts=2024-01-01T10%3A00%3A00/f.parquet``.
  It is not escaped: everything after the scheme is the path, ``%``, ``#`` and ``?`` included. Iceberg escapes
  partition values into folder names itself, so that ``%3A`` is on disk as it stands. See :func:`local_path`.
- A *URI*, as ``java.net.URI``, delta-rs and Delta's log write it: ``file:///tmp/a%20b%23c``, percent-encoded. See
  :func:`uri_local_path`.

Neither is split at ``#`` or ``?``: a location has no fragment or query, and an encoded URI spells those characters
``%23`` and ``%3F``, so one that reaches us unencoded was meant as part of the path.
"""

from __future__ import annotations

from urllib.parse import unquote

__all__ = ["local_path", "uri_local_path"]


def local_path(location: str) -> str | None:
    """The local path of an Iceberg/Hadoop location (``file:/x``, ``file:///x`` or ``/x``), taken as it is spelled
    (not percent-decoded); None for a location on another file system, or a relative one.

    >>> local_path("file:/wh/t/data/ts=2024-01-01T10%3A00%3A00/f.parquet")
    '/wh/t/data/ts=2024-01-01T10%3A00%3A00/f.parquet'
    >>> local_path("file:///tmp/a b#1/t"), local_path("/tmp/t"), local_path("s3://bucket/t")
    ('/tmp/a b#1/t', '/tmp/t', None)
    """
    if location.startswith("/"):
        return location
    return _file_path(location)


def uri_local_path(uri: str) -> str | None:
    """The local path of a percent-encoded ``file:`` URI (``java.net.URI``'s, delta-rs's), decoded; a plain path
    unchanged; None for a URI on another file system, or a relative path.

    >>> uri_local_path("file:///tmp/a%20b%23c%C3%A9/t"), uri_local_path("/tmp/a%20b"), uri_local_path("s3://b/t")
    ('/tmp/a b#cé/t', '/tmp/a%20b', None)
    """
    if uri.startswith("/"):
        return uri  # already a path: its "%" are characters of the name
    path = _file_path(uri)
    return None if path is None else unquote(path)


def _file_path(text: str) -> str | None:
    """What follows ``file:`` (and an empty or ``localhost`` authority), or None for anything else."""
    if text[:5].lower() != "file:":
        return None
    rest = text[5:]
    if not rest.startswith("//"):
        return rest
    authority, _, path = rest[2:].partition("/")
    # file://host/x names a file on another machine, not one this process can open
    return "/" + path if authority in ("", "localhost") else None

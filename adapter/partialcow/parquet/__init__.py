"""The Parquet page engine: partial copy-on-write of Parquet files, page by page.

``rewrite_file`` applies row updates and deletes by re-encoding only the data pages that hold changed rows and
copying every other page byte for byte; ``write_table`` writes new files laid out for that; ``inspect`` shows a
file's row groups, chunks and pages; ``remove_sidecar`` removes a data file's row fingerprints
(written by ``rewrite_file(..., fingerprints=True)``) with it. Depends on pyarrow and numpy only.
"""

from __future__ import annotations

from partialcow.parquet._engine import ROW_POSITION, RewriteReport, rewrite_file
from partialcow.parquet._fingerprints import remove_sidecar
from partialcow.parquet._format import INT96_UNIT
from partialcow.parquet.writer import DEFAULT_WRITE_OPTIONS, WrittenFile, write_table

__all__ = ["DEFAULT_WRITE_OPTIONS", "INT96_UNIT", "ROW_POSITION", "RewriteReport", "WrittenFile", "remove_sidecar",
           "rewrite_file", "write_table"]

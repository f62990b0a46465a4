"""Report writers: results.json (the contract), results.jsonl, JUnit XML, Markdown, plots.

``finalize`` turns a list of check results plus run metadata into the verdict and every
report file; rank 0 calls it at the end, and ``mlenv acceptance --local`` calls it on
the partial ``results.jsonl`` when rank 0 died before it could.
"""

from __future__ import annotations

from mlenv.acceptance.reports.document import RunMeta, build_document, finalize, write_json

__all__ = ["RunMeta", "build_document", "finalize", "write_json"]

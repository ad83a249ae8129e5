"""The multi-rank document: every rank's graph of one job in one JSON file.

``{"format": "torchatlas-ranks", "version": 1, "world_size": N, "meta": {...},
"graphs": [graph document of rank 0, rank 1, ...]}``; each graph is a whole graph
document (``docs/format.md``), checked as ``torchatlas.load`` checks one.
"""

from __future__ import annotations

import json
from typing import Any

from ._document import graph_from_dict, graph_to_dict
from ._graph import GraphFormatError, GraphIR

RANKS_FORMAT = "torchatlas-ranks"
RANKS_VERSION = 1


def ranks_to_json(graphs: list[GraphIR], meta: dict[str, Any]) -> str:
    doc = {
        "format": RANKS_FORMAT,
        "version": RANKS_VERSION,
        "world_size": len(graphs),
        "meta": json.loads(json.dumps(meta, default=str, allow_nan=False)),
        "graphs": [graph_to_dict(ir) for ir in graphs],
    }
    return json.dumps(doc, ensure_ascii=True, allow_nan=False)


def ranks_from_json(text: str) -> tuple[list[GraphIR], dict[str, Any]]:
    """(graphs in rank order, document meta); anything malformed raises one ``GraphFormatError``."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as e:
        raise GraphFormatError(f"not a usable JSON document ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != RANKS_FORMAT:
        raise GraphFormatError(f"not a torchatlas multi-rank document (format={str(doc.get('format') if isinstance(doc, dict) else None)[:80]!r})")
    version = doc.get("version")
    if type(version) is not int or version > RANKS_VERSION:
        raise GraphFormatError(f"multi-rank document version {version!r}; this torchatlas reads up to {RANKS_VERSION}")
    raw = doc.get("graphs")
    if not isinstance(raw, list) or not raw:
        raise GraphFormatError("multi-rank document has no 'graphs' list")
    graphs = []
    for i, entry in enumerate(raw):
        try:
            graphs.append(graph_from_dict(entry))
        except GraphFormatError as e:
            raise GraphFormatError(f"graphs[{i}]: {e}") from None
    meta = doc.get("meta")
    return graphs, meta if isinstance(meta, dict) else {}

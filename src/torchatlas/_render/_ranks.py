"""Every rank of a job in text: the hang report, one rank's tree with where the others
differ, and the per-call summary with each number's smallest and largest rank.

Pure functions of the analysed graphs and the plain problem and difference dicts the
ranks pass (``_passes/_ranks.py``) makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchatlas._ir import GraphIR, PythonRead, Source
from torchatlas._text import format_bytes, format_count, format_si, to_ascii, visible
from torchatlas._view import LINE_LIMIT, read_outcome

_WHY = {
    "missing": "rank(s) {ranks} issue no collective here; the others wait for them forever",
    "collective": "ranks issue different collectives",
    "dtype": "ranks send different dtypes",
    "bytes": "ranks send different sizes",
    "unmatched": "a send has no matching receive (or a receive no send)",
    "p2p shape": "the receive's shape or dtype is not what was sent",
    "splits": "an all-to-all's split sizes disagree: a rank sends another rows it does not expect",
}


def _ranks_text(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def _entry_line(rank: int, entry: dict[str, Any] | None) -> str:
    if entry is None:
        return f"rank {rank}: —  (ends its collectives on this group before this step)"
    sizes = entry["sent"] or entry["received"]
    shape = " ".join("×".join(map(str, s)) for s in sizes) or "-"
    peer = f" peer {entry['peer']}" if entry.get("peer") is not None else ""
    if entry.get("splits"):  # rows to and from each rank of the group
        peer += f" splits sent {entry['splits']['sent']} received {entry['splits']['received']}"
    if entry.get("action"):  # the pipeline schedule's step it serves
        peer += f" for {entry['action']}"
    where = f" @ {_short(entry['source'])}" if entry.get("source") else ""
    code = f"  `{entry['code']}`" if entry.get("code") else ""
    return (
        f"rank {rank}: {entry['op']}{peer} {shape} {entry['dtype'] or '?'}, {format_bytes(entry['sent_bytes'])} sent"
        f" in {entry['module']}{where}{code}"
    )


def _short(source: str) -> str:
    """``model.py:12`` from a full path and line."""
    file, _, line = source.rpartition(":")
    return f"{file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}"


def _decision_lines(decision: dict[str, Any] | None) -> list[str]:
    if decision is None:
        return ["  parted by: no tensor value read into Python went differently before this step;",
                "             the ranks took different code paths on something else (the rank, a flag, a config)"]
    file, _, line = decision["source"].rpartition(":")
    outcomes = []
    for rank, value in decision["values"].items():
        read = PythonRead(decision["as"], 0, value if not isinstance(value, list) else None, decision["statement"],
                          Source(file, int(line), decision["code"]))
        outcomes.append(f"rank {rank}: {read_outcome(read) or value}")
    what = decision["statement"] or decision["as"]
    return [f"  parted by: {what} @ {_short(decision['source'])}  `{decision['code']}`  ({'; '.join(outcomes)})"]


def hang_report(problems: list[dict[str, Any]], world_size: int, ascii: bool = False) -> str:
    """``ranks: 2 ranks, no predicted hang`` or one paragraph per problem: the group, the step,
    each rank's collective there (its source line and module call) and the decision that sent
    the ranks apart."""
    if not problems:
        text = f"ranks: {world_size} ranks, collectives line up on every group: no predicted hang\n"
        return to_ascii(text) if ascii else text
    hangs = sum(1 for p in problems if p["kind"] == "hang")
    lines = [f"ranks: {world_size} ranks, {hangs} predicted hang(s), {len(problems) - hangs} other problem(s)"]
    for p in problems:
        title = "PREDICTED HANG" if p["kind"] == "hang" else p["kind"].upper()
        why = _WHY[p["why"]].format(ranks=_ranks_text(p["ranks"]))
        group = f"group {p['group']} (ranks {_ranks_text(p['members'])})"
        lines.append(f"{title} on {group} at collective #{p['step']}: {why}")
        lines += ["  " + visible(_entry_line(r, e), LINE_LIMIT) for r, e in p["at"].items()]
        # both ranks reached the send and its receive: no branch parted them, a size did
        if (p["kind"] == "hang" and p["why"] != "p2p shape") or p.get("decision") is not None:
            lines += [visible(line, LINE_LIMIT) for line in _decision_lines(p.get("decision"))]
    text = "\n".join(lines) + "\n"
    return to_ascii(text) if ascii else text


def schedule_text(pipeline: dict[str, Any] | None) -> str:
    """A pipeline rank's schedule: its stages and the actions it ran, in order (torch's notation:
    stage, action, microbatch)."""
    if not isinstance(pipeline, dict):
        return ""
    stages = ", ".join(str(s) for s in pipeline.get("stages", []))
    return (
        f"{pipeline.get('schedule')}: stage {stages} of {pipeline.get('num_stages')}, "
        f"{pipeline.get('microbatches')} microbatches: {' '.join(pipeline.get('actions', []))}\n"
    )


def differences_text(differences: list[dict[str, Any]], shown_rank: int, ascii: bool = False) -> str:
    """What the tree of ``shown_rank`` does not show: each call where other ranks differ."""
    if not differences:
        return "other ranks: the same ops, shapes and collectives in every call\n"
    lines = [f"other ranks differ from rank {shown_rank} in {len(differences)} call(s):"]
    for d in differences:
        by_rank = "; ".join(f"rank {r}: {text}" for r, text in d["by_rank"].items())
        lines.append(visible(f"  {d['label']}: {d['what']} differ — {by_rank}", LINE_LIMIT))
    text = "\n".join(lines) + "\n"
    return to_ascii(text) if ascii else text


_COLUMNS = (  # (title, per-rank key, the key of a graph with no DTensor, format)
    ("Params/rank", "params_per_rank", "params", format_count),
    ("FLOPs/rank", "flops_per_rank", "flops", format_si),
    ("Comm", "comm_bytes", None, format_bytes),
    ("Collectives", "collectives", None, format_count),
)


def _value(scope: Any, key: str, plain: str | None) -> Any:
    """A call's per-rank number; a call that moved nothing has 0 bytes and collectives."""
    if scope is None:
        return None
    value = scope.meta.get(key, scope.meta.get(plain) if plain is not None else None)
    return 0 if value is None and plain is None else value


def _span(values: list[Any], show: Any) -> tuple[str, str]:
    numbers = [v for v in values if isinstance(v, (int, float))]
    if not numbers:
        return "-", "-"
    return show(min(numbers)), show(max(numbers))


def ranks_summary(graphs: Sequence[GraphIR], depth: int | None = 1, ascii: bool = False) -> str:
    """One row per module call (to ``depth``), with the smallest and largest value over the
    ranks of each per-rank number, and a ``≠`` where the ranks' numbers differ."""
    by_rank = [{(s.path, s.call): s for s in ir.scopes} for ir in graphs]
    order = list(dict.fromkeys(key for scopes in by_rank for key in scopes))
    header = ["Module"] + [f"{name} {end}" for name, _, _, _ in _COLUMNS for end in ("min", "max")]
    rows = [header]
    pipelined = any("pipeline" in ir.meta for ir in graphs)
    for path, call in order:
        if depth is not None and path and path.count(".") + 1 > depth:
            continue
        scopes = [s.get((path, call)) for s in by_rank]
        if pipelined:  # a stage's calls are compared over the ranks that hold that stage
            scopes = [s for s in scopes if s is not None]
        label = next(s.label for s in scopes if s is not None)
        cells = [label]
        differs = False
        for _, key, plain, show in _COLUMNS:
            values = [_value(s, key, plain) for s in scopes]
            differs |= len({repr(v) for v in values}) > 1
            cells += list(_span(values, show))
        cells[0] = ("≠ " if differs else "  ") + cells[0]
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)).rstrip()
        for row in rows
    ]
    text = f"per rank over {len(graphs)} ranks (≠: the ranks differ)\n" + "\n".join(lines) + "\n"
    return to_ascii(text) if ascii else text

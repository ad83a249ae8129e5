"""How often the graph is what the model computed: ``python bench/fidelity.py``.

Every model of the corpus (``bench/corpus``: every transformers model type from a small
random config, twice, hand-written edge cases, and the timm and diffusers zoo) is traced
and checked against torch.export's functional graph with each pass-through module cloning
(``bench/corpus/_oracle.py``). Prints one line per model that does not simply agree, with
the reason, then one score line per corpus (``diffusers``, ``edge``, ``hf``, ``timm``) and
a total. Exit status 1 unless every model with an oracle agrees.

The whole corpus is about 1,300 cases, several hours of CPU: run it in parts and add
them up. ``--shard 2/4`` runs every fourth case from the second, ``--jsonl FILE`` appends
each verdict to FILE as it comes, ``--tally FILE...`` prints the lines of saved verdicts,
``--skip FILE...`` leaves out the cases already saved (to resume, or run the rest).
Names (or prefixes, ``hf:bert``) select cases; ``--sample`` is the test suite's sample.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import CASES, corpus_cases  # noqa: E402
from corpus._oracle import Verdict, check  # noqa: E402
from corpus.hf_all import Skip  # noqa: E402

STATUSES = ("agrees", "disagrees", "named", "no-oracle", "fails", "skipped")


class _TimedOut(BaseException):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    """Raise in the running case after ``seconds`` (0: no limit); the main thread only."""
    if not seconds:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise _TimedOut(f"took over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run(name: str, cases: dict[str, Callable] | None = None, limit: int = 0) -> Verdict:
    cases = CASES if cases is None else cases
    with warnings.catch_warnings(), _time_limit(limit):
        warnings.simplefilter("ignore")
        try:
            try:
                model, args, kwargs = cases[name]()
            except Skip as exc:
                return Verdict(name, "skipped", str(exc))
            except Exception as exc:  # the corpus itself is broken: say so, never skip silently
                return Verdict(name, "fails", f"could not build: {type(exc).__name__}: {exc}")
            return check(name, model, args, kwargs)
        except _TimedOut as exc:
            return Verdict(name, "skipped", f"the case {exc} (the corpus's per-case limit)")
        except MemoryError:
            return Verdict(name, "skipped", "the case needs more memory than the corpus's limit (--memory-gb)")


def corpus_of(name: str) -> str:
    return name.partition(":")[0]


def score_line(verdicts: list[Verdict], label: str = "fidelity") -> str:
    counts = {s: sum(v.status == s for v in verdicts) for s in STATUSES}
    judged = counts["agrees"] + counts["disagrees"] + counts["fails"]
    share = 100 * counts["agrees"] / judged if judged else 100.0
    line = (
        f"{label}: {counts['agrees']}/{judged} models with an oracle agree with torch.export ({share:.0f}%); "
        f"{counts['named']} disagree for a named reason of export's own; "
        f"{counts['no-oracle']} have no oracle (export fails) and trace with identical outputs"
    )
    if counts["skipped"]:
        line += f"; {counts['skipped']} skipped (not runnable here, reasons above)"
    return line


def score_lines(verdicts: list[Verdict]) -> list[str]:
    """One line per corpus, then the total."""
    corpora = sorted({corpus_of(v.name) for v in verdicts})
    lines = [score_line([v for v in verdicts if corpus_of(v.name) == c], f"fidelity[{c}]") for c in corpora]
    return lines + [score_line(verdicts)]


def _report(verdict: Verdict) -> None:
    if verdict.status != "agrees":
        print(f"{verdict.status:>10}  {verdict.name}: {verdict.detail}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="cases to check (default: the whole corpus); a prefix selects several")
    parser.add_argument("--sample", action="store_true", help="the test suite's sample, not the whole corpus")
    parser.add_argument("--shard", default="1/1", help="K/N: every Nth case from the Kth")
    parser.add_argument("--jsonl", type=Path, help="append each verdict to this file")
    parser.add_argument("--tally", type=Path, nargs="+", help="print the lines of verdicts saved by --jsonl")
    parser.add_argument("--limit", type=int, default=300, help="seconds a case may take (0: no limit)")
    parser.add_argument("--memory-gb", type=float, default=16, help="address space a run may take (0: no limit); "
                        "a default config too big to build is then skipped, not left to the kernel's OOM killer")
    parser.add_argument("--beyond-sample", action="store_true", help="only the cases the test suite's sample lacks")
    parser.add_argument("--skip", type=Path, nargs="+", default=[], help="leave out the cases saved in these --jsonl files")
    opts = parser.parse_args(argv)
    if opts.memory_gb and not opts.tally:
        limit = int(opts.memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    if opts.tally:
        latest = {}
        for path in opts.tally:
            for line in path.read_text().splitlines():
                row = json.loads(line)
                latest[row["name"]] = Verdict(row["name"], row["status"], row["detail"])
        verdicts = list(latest.values())
        for verdict in sorted(verdicts, key=lambda v: v.name):
            _report(verdict)
    else:
        cases = CASES if opts.sample else corpus_cases()
        done = {json.loads(line)["name"] for path in opts.skip if path.exists() for line in path.read_text().splitlines()}
        if opts.beyond_sample:
            done |= set(CASES)
        names = [n for n in cases if (not opts.names or any(n.startswith(p) for p in opts.names)) and n not in done]
        k, n = (int(part) for part in opts.shard.split("/"))
        verdicts = []
        for name in names[k - 1 :: n]:
            verdict = run(name, cases, opts.limit)
            verdicts.append(verdict)
            _report(verdict)
            if opts.jsonl:
                with opts.jsonl.open("a") as out:
                    out.write(json.dumps({"name": name, "status": verdict.status, "detail": verdict.detail}) + "\n")
    print("\n".join(score_lines(verdicts)))
    return 1 if any(v.status in ("disagrees", "fails") for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())

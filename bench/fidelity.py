"""How often the graph is what the model computed: ``python bench/fidelity.py``.

Every model of the corpus (``bench/corpus``: transformers architectures from small random
configs and hand-written edge cases) is traced and checked against torch.export's
functional graph (``bench/corpus/_oracle.py``). Prints one line per model that does not
simply agree, then one score line. Exit status 1 unless every model with an oracle agrees.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import CASES  # noqa: E402
from corpus._oracle import Verdict, check  # noqa: E402


def run(name: str) -> Verdict:
    try:
        model, args, kwargs = CASES[name]()
    except Exception as exc:  # the corpus itself is broken: say so, never skip silently
        return Verdict(name, "fails", f"could not build: {type(exc).__name__}: {exc}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check(name, model, args, kwargs)


def score_line(verdicts: list[Verdict]) -> str:
    counts = {s: sum(v.status == s for v in verdicts) for s in ("agrees", "disagrees", "named", "no-oracle", "fails")}
    judged = counts["agrees"] + counts["disagrees"] + counts["fails"]
    share = 100 * counts["agrees"] / judged if judged else 100.0
    return (
        f"fidelity: {counts['agrees']}/{judged} models with an oracle agree with torch.export ({share:.0f}%); "
        f"{counts['named']} disagree for a named reason of export's own; "
        f"{counts['no-oracle']} have no oracle (export fails) and trace with identical outputs"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models to check (default: the whole corpus); a prefix selects several")
    opts = parser.parse_args(argv)
    names = [n for n in CASES if not opts.names or any(n.startswith(p) for p in opts.names)]
    verdicts = []
    for name in names:
        verdict = run(name)
        verdicts.append(verdict)
        if verdict.status != "agrees":
            print(f"{verdict.status:>10}  {name}: {verdict.detail}", flush=True)
    print(score_line(verdicts))
    bad = [v for v in verdicts if v.status in ("disagrees", "fails")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

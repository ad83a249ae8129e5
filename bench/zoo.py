"""The vision and diffusion zoo: ``python bench/zoo.py [--only timm:rexnet_100 ...]``.

Traces one timm model per architecture family and the diffusers models (``bench/corpus/zoo.py``:
tiny, random weights, nothing downloaded) and prints one line per model that fails a check
or whose tree has a numbered listing, then the score: models traced with outputs equal to
eager and nothing left installed, and the share of trees with a numbered listing.
Needs ``timm`` and ``diffusers`` (the ``dev`` extra). Exit status 1 if any model fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from corpus.zoo import ZooResult, check_zoo_model, corpus  # noqa: E402


def score_line(results: list[ZooResult], seconds: float) -> str:
    ok = sum(not r.error for r in results)
    listed = sum(r.listing for r in results)
    return (
        f"zoo: {ok}/{len(results)} models trace with eager's outputs and leave nothing installed; "
        f"{listed}/{len(results)} trees have a numbered listing ({100 * listed / max(len(results), 1):.1f}%); "
        f"{seconds:.0f} s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="model names (timm:NAME, diffusers:NAME)")
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    models = corpus()
    names = options.only or list(models)
    start = time.perf_counter()
    results = []
    for name in names:
        result = check_zoo_model(name, models[name])
        results.append(result)
        if result.error or result.listing:
            print(f"{name}: {result.error or 'numbered listing in its tree'}", flush=True)
    print(score_line(results, time.perf_counter() - start))
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

"""torchatlas and the other PyTorch graph tools, side by side: ``python bench/compare.py``.

The other tools (torchview, torchlens, torchinfo, torchviz, torchvista) are no
dependency of torchatlas, so they live in their own virtual environment,
``bench/.venv-compare``, made on first use from ``bench/requirements-compare.txt``;
torchatlas comes from this checkout's ``src/`` (on the workers' ``PYTHONPATH``),
so the numbers are always for the code in front of you. Each (tool, model) runs
in a fresh process (``bench/_worker.py``); results go to ``bench/results/``:
``compare.md`` (tables), ``compare.json`` (every measurement), ``compare.png``
and ``scale.png`` (plots, when matplotlib is there).

    python bench/compare.py                 # everything (about an hour on 2 cores)
    python bench/compare.py --smoke         # CoolCNN and a tiny GPT-2, seconds
    python bench/compare.py --models gpt2,llama-70b --tools torchatlas,torchview
    python bench/compare.py --update --models t5-small --tools torchinfo   # redo one cell
    python bench/compare.py --python "$(which python)"   # use this interpreter, no venv
    python bench/compare.py --device cuda   # on a GPU: ratios to a synchronised forward, GPU peak memory

With ``--device cuda`` the results go to ``bench/results/cuda/`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import _report

from torchatlas._io import write_atomic

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
VENV = BENCH / ".venv-compare"
REQUIREMENTS = BENCH / "requirements-compare.txt"
CONSTRAINTS = REPO / "constraints.txt"
WORKER = BENCH / "_worker.py"


def ensure_venv() -> Path:
    """The comparison venv's interpreter, creating and filling the venv if it is missing."""
    python = VENV / "bin" / "python"
    if python.exists():
        return python
    print(f"creating {VENV} (one time: torch, transformers and five graph tools)", flush=True)
    venv.create(VENV, with_pip=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "-c", str(CONSTRAINTS)]
    try:
        subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    except subprocess.CalledProcessError:
        python.unlink()  # half-made: the next call starts over
        raise
    return python


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_worker(
    python: str, args: list[str], out: Path, timeout: float, env: dict[str, str], script: Path = WORKER
) -> dict[str, Any]:
    """Run one worker task (``script ARGS... OUT``) in its own process group; a timeout kills
    the group (dot too)."""
    out.unlink(missing_ok=True)
    log = out.with_suffix(".log")
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [python, str(script), *args, str(out)],
            cwd=BENCH,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = None
    doc: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    if code is None:
        doc.setdefault("error", f"timeout after {timeout:.0f} s")
    elif code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        doc.setdefault("error", f"worker exited {code}: {tail[0][:200]}")
    return doc


def checkout_env() -> dict[str, str]:
    """This environment with the checkout's ``src/`` first on ``PYTHONPATH``: whatever the
    interpreter has installed, it imports the torchatlas in front of you."""
    path = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def worker_env(threads: int, budget: float, device: str = "cpu") -> dict[str, str]:
    return {
        **checkout_env(),
        "BENCH_THREADS": str(threads),
        "BENCH_BUDGET_S": str(budget),
        "BENCH_DEVICE": device,
        "PYTHONUNBUFFERED": "1",
    }


def check_device(parser: argparse.ArgumentParser, device: str) -> str | None:
    """The card's name for ``--device cuda`` (None on the CPU); a usage error where there is none."""
    if device == "cpu":
        return None
    import torch

    if not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device on this machine")
    return torch.cuda.get_device_name()


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu",
        help="where the models run; cuda: each time ends in torch.cuda.synchronize() and peaks are GPU memory",
    )


def installed_tools(python: str, env: dict[str, str]) -> dict[str, str]:
    found = subprocess.run(
        [python, str(WORKER), "tools"], cwd=BENCH, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(found.stdout.strip().splitlines()[-1])


def _short(doc: dict[str, Any]) -> str:
    if "ratio" in doc:
        return f"{doc['ratio']:.2f}x forward, {doc['nodes']} nodes"
    return doc.get("error", "no result")


def previous_results(out: Path) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[str, Any]]:
    """Runs and probes of an earlier ``compare.json`` in ``out``, for ``--update``."""
    path = out / "compare.json"
    if not path.exists():
        return {}, {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {(r["tool"], r["model"]): r for r in doc["runs"]}, dict(doc["probes"])


def write_results(
    opts: argparse.Namespace,
    available: dict[str, str],
    tools: list[str],
    zoo: list[str],
    scale: list[str],
    runs: dict[tuple[str, str], dict[str, Any]],
    probes: dict[str, Any],
) -> list[Path]:
    import torch

    env_doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs" + (f", {opts.card}" if opts.card else ""),
        "torch": torch.__version__,
        "threads": opts.threads or next((d["threads"] for d in runs.values() if "threads" in d), "torch's default"),
        "versions": available,
    }
    write_atomic(
        opts.out / "compare.json", json.dumps({"env": env_doc, "probes": probes, "runs": list(runs.values())}, indent=1)
    )
    write_atomic(opts.out / "compare.md", _report.markdown(env_doc, tools, zoo, scale, runs, probes))
    try:
        return [opts.out / "compare.md", opts.out / "compare.json", *_report.plots(opts.out, tools, zoo, scale, runs)]
    except ImportError:
        return [opts.out / "compare.md", opts.out / "compare.json"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="only the tiny models, no scale test")
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--tools", help="comma-separated tool names (default: every installed one)")
    parser.add_argument("--python", help="interpreter for the workers (default: the comparison venv)")
    parser.add_argument("--out", type=Path, help="folder for the results (default: bench/results, or results/cuda)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per (tool, model) process")
    parser.add_argument("--scale-timeout", type=float, default=300, help="seconds per (tool, synthetic chain) process")
    parser.add_argument("--budget", type=float, default=15, help="seconds of alternating rounds per (tool, model)")
    parser.add_argument(
        "--update",
        action="store_true",
        help="keep the other results already in --out/compare.json; re-measure only the chosen tools and models",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the tables and plots from --out/compare.json, measure nothing",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads in the workers (0: torch's default; see _worker.THREADS)",
    )
    add_device_option(parser)
    opts = parser.parse_args(argv)
    opts.card = check_device(parser, opts.device)
    if opts.out is None:
        opts.out = BENCH / "results" / ("cuda" if opts.device == "cuda" else "")

    if opts.python is None:
        python = ensure_venv()
        if Path(sys.executable).resolve() != python.resolve():
            # Plots need the venv's matplotlib: run the whole orchestration there (its
            # reports are written through torchatlas._io, so it needs src/ too).
            os.execve(
                str(python),
                [str(python), __file__, *(argv if argv is not None else sys.argv[1:]), "--python", str(python)],
                checkout_env(),
            )
        opts.python = str(python)
    elif os.sep in opts.python:
        opts.python = os.path.abspath(opts.python)  # the workers run in bench/; abspath keeps a venv's symlink

    import models  # needs torch: only once in an interpreter that has it

    env = worker_env(opts.threads, opts.budget, opts.device)
    available = installed_tools(opts.python, env)
    tools = [t for t in (opts.tools.split(",") if opts.tools else available) if t in available]
    missing = sorted(set(opts.tools.split(",")) - set(available)) if opts.tools else []
    if missing:
        print(f"not installed in {opts.python}, skipped: {', '.join(missing)}")
    if opts.models:
        names = opts.models.split(",")
    else:
        names = models.smoke_models() + ([] if opts.smoke else models.zoo_models(opts.device) + models.scale_models())
    unknown = [n for n in names if n not in models.MODELS]
    if unknown:
        parser.error(f"unknown models: {', '.join(unknown)}; known: {', '.join(models.MODELS)}")

    raw = opts.out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    runs, probes = previous_results(opts.out) if opts.update or opts.report_only else ({}, {})
    for tool in [t for t in tools if t not in probes and not opts.report_only]:  # --update keeps earlier probes
        probes[tool] = run_worker(opts.python, ["probe", tool], raw / f"probe-{tool}.json", opts.timeout, env)
        print(
            f"probe {tool}: "
            + ", ".join(f"{k}={'yes' if v['ok'] else 'no'}" for k, v in probes[tool].items() if isinstance(v, dict)),
            flush=True,
        )

    def report() -> list[Path]:
        # Table order: tools as the worker lists them, models as bench/models.py does.
        shown_tools = [t for t in available if t in tools or t in probes]
        shown = [n for n in models.MODELS if n in names or any(m == n for _, m in runs)]
        zoo = [n for n in shown if not models.MODELS[n].scale]
        scale = [n for n in shown if models.MODELS[n].scale]
        return write_results(opts, available, shown_tools, zoo, scale, runs, probes)

    written = report()
    ordered = (
        []
        if opts.report_only
        else [n for n in names if not models.MODELS[n].scale] + [n for n in names if models.MODELS[n].scale]
    )
    for name in ordered:
        timeout = opts.scale_timeout if models.MODELS[name].scale else opts.timeout
        for tool in tools:
            doc = run_worker(opts.python, ["run", tool, name], raw / f"{tool}-{name}.json", timeout, env)
            runs[(tool, name)] = {"tool": tool, "model": name, **doc}
            print(f"{name:>10} {tool:<11} {_short(doc)}", flush=True)
            # Rewritten after every run, so a long run can be read (or stopped) part-way.
            written = report()
    if not written[2:]:
        print("matplotlib is not installed here: no plots (the comparison venv has it)")
    print("wrote", ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())

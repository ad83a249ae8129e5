"""One measurement in a fresh process: ``python bench/_worker.py TASK ...``.

Tasks:
  tools                      print the installed tools and versions as JSON
  run TOOL MODEL OUT.json    time TOOL against a plain forward pass of MODEL, then its outputs
  capture TOOL MODEL OUT.json  the same without the outputs (drawing, HTML...)
  probe TOOL OUT.json        does TOOL work under no_grad, on meta, with dict inputs?

Results go to OUT.json, rewritten after every phase, so a run that times out
or crashes mid-way still leaves what it measured (stdout is left to the tools,
some of which print).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import models
import torch
from _measure import alternate, peak_rss_mb, reset_peak_rss, rounds_for, timed
from tools import TOOLS, NotSupported, Tool, model_device

BUDGET_S = float(os.environ.get("BENCH_BUDGET_S", "15"))
"""Seconds of alternating rounds to aim for per tool and model (3 rounds at least)."""
THREADS = int(os.environ.get("BENCH_THREADS", "1"))
"""Intra-op threads; 0 leaves torch's default. One by default: on a busy 2-core
machine OpenMP workers wait for each other at every parallel region, and a
ResNet-50 forward measured 0.41 s on one thread against 1.7-4.6 s on two."""
DEVICE = os.environ.get("BENCH_DEVICE", "cpu")
"""Where the models run (``compare.py --device``). On cuda every timed call ends in
``torch.cuda.synchronize()``, and peaks are ``torch.cuda.max_memory_allocated``."""


def _synchronized(fn: Callable[[], Any]) -> Callable[[], Any]:
    if DEVICE != "cuda":
        return fn

    def run() -> Any:
        result = fn()
        torch.cuda.synchronize()
        return result

    return run


_gpu_resting = 0
"""GPU memory held when the peak counter was last reset (the weights and inputs)."""


def _reset_peaks() -> None:
    global _gpu_resting
    reset_peak_rss()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        _gpu_resting = torch.cuda.memory_allocated()


def _gpu_peaks(doc: dict[str, Any], prefix: str) -> None:
    """The GPU peak since the reset, and its part over the memory held then (what the call
    itself allocated at most: the figure issue 32's targets are about)."""
    peak = torch.cuda.max_memory_allocated()
    doc[f"{prefix}_peak_gpu_mb"] = peak / 2**20
    doc[f"{prefix}_extra_gpu_mb"] = (peak - _gpu_resting) / 2**20


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text[:200]


def _grad_mode(tool: Tool) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext() if tool.needs_grad else torch.no_grad()


def run(tool_name: str, model_name: str, out: Path, outputs: bool = True) -> None:
    tool, spec = TOOLS[tool_name], models.MODELS[model_name]
    doc: dict[str, Any] = {"tool": tool_name, "model": model_name, "version": tool.version()}
    _write(out, doc)
    build_s, (model, args, kwargs) = timed(lambda: models.build(model_name, DEVICE))
    doc.update(
        device=model_device(model),
        params=sum(p.numel() for p in model.parameters()),
        build_s=build_s,
        grad=tool.needs_grad,
    )

    @_synchronized
    def forward() -> Any:
        with torch.no_grad():
            return model(*args, **kwargs)

    @_synchronized
    def capture() -> Any:
        with _grad_mode(tool):
            return tool.capture(model, args, kwargs, workdir)

    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        workdir = Path(tmp)
        forward()  # first call pays for lazy initialisation
        _reset_peaks()
        doc["forward_s"], _ = timed(forward)
        doc["forward_peak_rss_mb"] = peak_rss_mb()
        if DEVICE == "cuda":
            _gpu_peaks(doc, "forward")
        _write(out, doc)

        _reset_peaks()
        try:
            doc["first_capture_s"], handle = timed(capture)
        except Exception as exc:  # the tool failing is a result, not a harness error
            doc["error"] = _error(exc)
            _write(out, doc)
            return
        doc["capture_peak_rss_mb"] = peak_rss_mb()
        if DEVICE == "cuda":
            _gpu_peaks(doc, "capture")
        nodes, edges = tool.size(handle)
        doc.update(nodes=nodes, edges=edges, size_unit=tool.size_unit)
        _write(out, doc)

        rounds = rounds_for(doc["forward_s"] + doc["first_capture_s"], BUDGET_S)
        result = alternate(forward, capture, rounds)
        doc.update(
            forward_median_s=result.baseline_s,
            capture_s=result.candidate_s,
            ratio=result.ratio,
            rounds=rounds,
            threads=torch.get_num_threads(),
        )
        _write(out, doc)
        if not outputs:
            return

        stages: dict[str, Callable[[], Any]] = {}
        draws = type(tool).svg is not Tool.svg
        if draws and (spec.scale or spec.meta_only or (spec.gpu and DEVICE != "cuda")):  # dot takes hours on 5,000 to 100,000 nodes
            doc["svg_note"] = "not drawn: too big for dot"
        else:
            stages["svg"] = lambda: tool.svg(handle, workdir / "graph.svg")
        stages["html"] = lambda: tool.html(handle, workdir / "graph.html")
        stages.update(tool.extra_stages(handle, workdir))
        for stage, make in stages.items():
            try:
                doc[f"{stage}_s"], _ = timed(make)
            except NotSupported as exc:
                doc[f"{stage}_note"] = str(exc)
            except Exception as exc:
                doc[f"{stage}_error"] = _error(exc)
            _write(out, doc)


def _check(tool: Tool, build: Callable[[str], models.Built], device: str, workdir: Path, grad: bool) -> int:
    """Size of the tool's graph of ``build(device)``: nodes, or rows for torchinfo."""
    model, args, kwargs = build(device)
    with torch.enable_grad() if grad else torch.no_grad():
        handle = tool.capture(model, args, kwargs, workdir)
    return tool.size(handle)[0]


def probe(tool_name: str, out: Path) -> None:
    """Each capability as ``{"ok": bool, "note": str}``."""
    tool = TOOLS[tool_name]
    doc: dict[str, Any] = {"tool": tool_name, "version": tool.version()}

    def attempt(name: str, check: Callable[[], str]) -> None:
        try:
            doc[name] = {"ok": True, "note": check()}
        except Exception as exc:
            doc[name] = {"ok": False, "note": _error(exc)}
        _write(out, doc)

    unit = tool.size_unit.split("/")[0]
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        workdir = Path(tmp)

        def no_grad() -> str:
            with_grad = _check(tool, models.build_coolcnn, "cpu", workdir, grad=True)
            without = _check(tool, models.build_coolcnn, "cpu", workdir, grad=False)
            if without < with_grad:
                raise ValueError(f"graph shrinks from {with_grad} to {without} {unit} under no_grad")
            return f"{without} {unit}"

        def meta() -> str:
            sizes = [
                _check(tool, build, "meta", workdir, grad=tool.needs_grad)
                for build in (models.build_coolcnn, models.build_tiny_gpt2)
            ]
            return f"CoolCNN {sizes[0]} {unit}, GPT-2 {sizes[1]} {unit}"

        def hf_kwargs() -> str:
            def build(device: str) -> models.Built:
                model, (ids,), _ = models.build_tiny_gpt2(device)
                return model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

            return f"{_check(tool, build, 'cpu', workdir, grad=tool.needs_grad)} {unit}"

        def dict_arg() -> str:
            return f"{_check(tool, models.build_dict_net, 'cpu', workdir, grad=tool.needs_grad)} {unit}"

        attempt("no_grad", no_grad)
        attempt("meta", meta)
        attempt("kwargs", hf_kwargs)
        attempt("dict_input", dict_arg)


def main(argv: list[str]) -> int:
    if THREADS:
        torch.set_num_threads(THREADS)
    task = argv[0]
    if task == "tools":
        print(json.dumps({name: tool.version() for name, tool in TOOLS.items() if tool.installed()}))
    elif task in ("run", "capture"):
        run(argv[1], argv[2], Path(argv[3]), outputs=task == "run")
    elif task == "probe":
        probe(argv[1], Path(argv[2]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception:
        traceback.print_exc()
        sys.exit(1)

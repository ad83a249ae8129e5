"""compile_report beside other threads (issue 28): a thread tracing and a thread running the
user's own compiled model meanwhile. ``torch._dynamo.reset()`` under them killed the process
(SIGSEGV, SIGFPE), and dynamo, compiling in one thread, inlined the ``_call_impl`` stand-in
a trace had installed, guarded on its closure, and raised ``InternalTorchDynamoError`` once
it was gone. The scenario runs in a child process, so a crash is a failed test, not a lost run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import torchatlas
from torchatlas._capture import _patches

SCENARIO = textwrap.dedent(
    """
    import sys, threading, time, traceback
    import torch
    from torch import nn
    import torchatlas

    class ItemBreak(nn.Module):  # two compiled graphs around an .item() break
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 4)

        def forward(self, x):
            h = torch.relu(self.fc1(x))
            if h.mean().item() > 0.5:
                h = h * 2
            return self.fc2(h)

    torch.manual_seed(0)
    x = torch.randn(2, 8)
    reported, traced = ItemBreak(), nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 2))
    users = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    alone = torchatlas.compile_report(reported, x)
    report_alone = ([n.meta["compile_region"] for n in alone.ir.ops()], [b.kind for b in alone.graph_breaks])
    trace_alone = torchatlas.trace(traced, x).tree(ascii=False)
    compiled, expected = torch.compile(users, backend="eager"), users(x)
    assert report_alone == ([0, 0, 0, 1], [".item()/.tolist()"]), report_alone

    def report():
        graph = torchatlas.compile_report(reported, x)
        got = ([n.meta["compile_region"] for n in graph.ir.ops()], [b.kind for b in graph.graph_breaks])
        assert got == report_alone, got

    def trace():
        assert torchatlas.trace(traced, x).tree(ascii=False) == trace_alone

    def run_compiled():
        torch.testing.assert_close(compiled(x), expected)

    stop = time.monotonic() + float(sys.argv[1])
    counts, errors = {}, []

    def loop(name, step):
        counts[name] = 0
        try:
            while time.monotonic() < stop:
                step()
                counts[name] += 1
        except BaseException as e:
            errors.append(f"{name}: " + "".join(traceback.format_exception(e))[-2000:])

    threads = [threading.Thread(target=loop, args=item) for item in
               [("report", report), ("trace", trace), ("compiled", run_compiled)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(counts)
    print("\\n".join(errors) or "no errors")
    """
)


def run_scenario(seconds: float, folder: Path) -> subprocess.CompletedProcess[str]:
    script = folder / "scenario.py"  # a file: compile_report aligns graphs by source line
    script.write_text(SCENARIO, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, str(script), str(seconds)], capture_output=True, text=True, timeout=seconds + 240, env=env
    )


@pytest.mark.parametrize("seconds", [5, pytest.param(15, marks=pytest.mark.slow)])
def test_compile_report_beside_a_tracing_thread_and_a_compiled_model(seconds: float, tmp_path: Path) -> None:
    done = run_scenario(seconds, tmp_path)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    assert "InternalTorchDynamoError" not in done.stderr, done.stderr[-3000:]
    counts, errors = done.stdout.strip().split("\n", 1)
    assert errors == "no errors"
    assert all(f"'{name}': 0," not in counts + "," for name in ("report", "trace", "compiled")), counts


def test_the_stance_is_set_before_the_stand_ins_and_restored_after_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile in another thread must never find the stand-in while the stance lets it compile."""
    pytest.importorskip("torch._dynamo")
    seen: list[str] = []
    make = _patches._module_call

    def module_call(tracker_of):  # installing: the stance must already be force_eager
        seen.append(f"install under {torch._dynamo.eval_frame._stance.stance}")
        return make(tracker_of)

    class Stance(type(_patches._eager_stance)):  # restoring: the stand-in must already be gone
        def close(self) -> None:
            seen.append(f"restore with stand-in {torch.nn.Module._call_impl is not _patches._CALL_IMPL}")
            super().close()

    monkeypatch.setattr(_patches, "_module_call", module_call)
    monkeypatch.setattr(_patches, "_eager_stance", Stance())
    torchatlas.trace(nn.Linear(2, 2), torch.randn(1, 2))
    assert seen == ["install under force_eager", "restore with stand-in False"]


def test_a_compile_in_another_thread_never_sees_the_stand_in_go_half_way() -> None:
    """Another thread compiles while a trace runs, and the trace ends while that compile is
    between its backend and its guards (it was: ``InternalTorchDynamoError``, the guard on the
    stand-in's closure could not be built). It computes the same and raises nothing: the
    stand-in is opaque to dynamo (no guard names its closure), and goes only between compiles."""
    import torch._dynamo as dynamo

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.randn(2, 4)
    expected = model(x)
    compiling, trace_ending = threading.Event(), threading.Event()

    def backend(gm: torch.fx.GraphModule, _inputs: list) -> object:
        compiling.set()
        trace_ending.wait(timeout=10)
        time.sleep(0.3)  # the trace would take its stand-in away now
        return gm.forward

    compiled = torch.compile(model, backend=backend)
    results: list[object] = []

    def compile_meanwhile() -> None:
        try:
            with torch.compiler.set_stance("default"):  # the trace's force_eager is process-wide
                results.append(compiled(x))
        except BaseException as e:  # reported below, in the main thread
            results.append(e)
        finally:
            compiling.set()  # dynamo may have run it all eagerly, the stand-in breaking every graph

    class StartsACompile(nn.Module):
        def forward(self, y: torch.Tensor) -> torch.Tensor:
            threading.Thread(target=compile_meanwhile, name="compiles").start()
            compiling.wait(timeout=30)
            trace_ending.set()
            return y + 1

    try:
        torchatlas.trace(StartsACompile(), x)
        for thread in threading.enumerate():
            if thread.name == "compiles":
                thread.join(timeout=60)
        assert len(results) == 1 and isinstance(results[0], torch.Tensor), results
        torch.testing.assert_close(results[0], expected)
        assert torch.nn.Module._call_impl is _patches._CALL_IMPL
        torch.testing.assert_close(compiled(x), expected)  # after: the guards fail cleanly, it compiles again
    finally:
        dynamo.reset()


def test_compile_report_leaves_another_models_compiled_code_alone() -> None:
    """Only the report's own cache entries are dropped: the user's compiled model is not
    compiled again afterwards, and dynamo's caches hold nothing of the report's."""
    import torch._dynamo as dynamo

    compiles: list[int] = []

    def backend(gm: torch.fx.GraphModule, _inputs: list) -> object:
        compiles.append(1)
        return gm.forward

    users = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), backend=backend)
    x = torch.randn(2, 8)
    try:
        users(x)
        for _ in range(10):  # more than dynamo's recompile limit (8) of spent entries
            graph = torchatlas.compile_report(nn.Sequential(nn.Linear(8, 4)), x)
            assert graph.ir.meta["compile_graphs"] == 1
        users(x)
        assert compiles == [1]
    finally:
        dynamo.reset()

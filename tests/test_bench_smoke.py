"""The side-by-side benchmark runs end to end on its tiny models and writes well-formed tables.

Timings are printed for the curious and never asserted: they depend on the machine.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
RATIO = re.compile(r"^\*{0,2}\d+\.\d\d×\*{0,2}")


def _tables(markdown: str) -> dict[str, list[list[str]]]:
    """Each ``## heading`` -> the rows (header first) of the pipe table under it."""
    tables: dict[str, list[list[str]]] = {}
    heading = ""
    for line in markdown.splitlines():
        if line.startswith("## "):
            heading = line[3:]
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            tables.setdefault(heading, []).append(cells)
    return tables


def _bench_module(name: str) -> types.ModuleType:
    """``bench/<name>.py``, imported by its path under a name of its own: a test before this one
    may have left another module called ``models`` (the CLI keeps a model file ``models.py``
    imported under its stem, as ``python models.py`` would)."""
    spec = importlib.util.spec_from_file_location(f"_torchatlas_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    sys.path.insert(0, str(BENCH))  # for the bench's imports of its own helpers
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def _bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=600)
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _coolcnn_row(script: str, out: Path) -> tuple[list[str], list[str]]:
    """Run a bench script on CoolCNN alone, writing ``out``: the header and the one row of its table."""
    _bench(script, "--models", "coolcnn", "--budget", "0.5", "--out", str(out))
    rows = _tables("## t\n" + out.read_text(encoding="utf-8"))["t"]
    header, (row,) = rows[0], rows[1:]
    assert row[0] == "coolcnn"
    return header, row


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    # Two of the dev venv's four torchatlas columns: each (tool, model) is a process, and the
    # other two run the same code with another option.
    _bench(
        "compare.py", "--smoke", "--python", sys.executable, "--out", str(out), "--budget", "0.5", "--timeout", "300",
        "--tools", "torchatlas,torchatlas-stats",
    )
    return out


def test_compare_writes_one_row_per_smoke_model_and_a_column_per_tool(smoke: Path) -> None:
    tables = _tables((smoke / "compare.md").read_text(encoding="utf-8"))
    ratios = tables["Capture time, as a multiple of a plain forward pass"]
    header, rows = ratios[0], ratios[1:]
    assert header[0] == "model" and {"torchatlas", "torchatlas-stats"} <= set(header)
    assert [r[0] for r in rows] == ["coolcnn", "tiny-gpt2"]
    assert all(len(r) == len(header) for r in rows)
    column = header.index("torchatlas")
    assert all(RATIO.match(r[column]) for r in rows), rows
    for title, table in tables.items():
        assert all(len(r) == len(table[0]) for r in table), title


def test_compare_json_holds_the_measurements_behind_the_table(smoke: Path) -> None:
    doc = json.loads((smoke / "compare.json").read_text(encoding="utf-8"))
    ours = {r["model"]: r for r in doc["runs"] if r["tool"] == "torchatlas"}
    assert set(ours) == {"coolcnn", "tiny-gpt2"}
    for run in ours.values():
        assert run["capture_s"] > 0 and run["forward_median_s"] > 0 and run["rounds"] >= 3
        assert run["nodes"] > 10 and run["edges"] > 10
        assert "html_s" in run and "json_s" in run
    assert all(doc["probes"]["torchatlas"][k]["ok"] for k in ("no_grad", "meta", "kwargs", "dict_input"))


def test_bench_trace_reports_the_ratio_and_the_target(tmp_path: Path) -> None:
    header, row = _coolcnn_row("bench_trace.py", tmp_path / "trace.md")
    assert RATIO.match(row[header.index("trace / forward")])
    assert row[header.index("target")] in ("meets ≤ 1.5x", "misses ≤ 1.5x")  # CoolCNN's target


def test_trace_breakdown_times_every_part_and_they_add_up(tmp_path: Path) -> None:
    # The breakdown reaches into torchatlas._capture to time its parts: this fails when they move.
    header, row = _coolcnn_row("trace_breakdown.py", tmp_path / "breakdown.md")
    doc = json.loads((tmp_path / "raw" / "breakdown-coolcnn.json").read_text())
    parts = doc["parts_s"]
    assert set(parts) == {"set-up", "module calls", "op records", "recorded forward", "build", "finish"}
    assert all(seconds > 0 for seconds in parts.values())
    assert doc["counts"] == {"module calls": 9, "op records": 15}  # CoolCNN: 9 module calls, 15 torch calls
    timed_parts = parts["set-up"] + parts["recorded forward"] + parts["build"] + parts["finish"]
    assert timed_parts < doc["timed trace_s"]
    assert parts["module calls"] + parts["op records"] < parts["recorded forward"]
    assert row[header.index("op records")].endswith("µs an op")


def test_report_says_why_a_cell_has_no_number() -> None:
    _report = _bench_module("_report")

    base = {"forward_s": 0.01, "forward_peak_rss_mb": 200.0, "capture_peak_rss_mb": 210.0, "nodes": 5, "edges": 4}
    runs = {
        ("a", "m"): {
            **base,
            "first_capture_s": 0.02,
            "capture_s": 0.02,
            "ratio": 2.0,
            "svg_s": 0.5,
            "html_note": "no HTML output",
        },
        ("b", "m"): {"error": "KeyError: '1'"},
        ("c", "m"): {**base, "first_capture_s": 0.3, "error": "timeout after 600 s"},
        ("d", "m"): {**base, "first_capture_s": 0.02, "capture_s": 0.02, "ratio": 1.5, "error": "timeout after 600 s"},
    }
    env = {"date": "today", "machine": "test", "torch": "x", "threads": 1, "versions": {t: "1" for t in "abcd"}}
    tables = _tables(_report.markdown(env, list("abcd"), ["m"], [], runs, {}))
    assert tables["Capture time, as a multiple of a plain forward pass"][1] == [
        "m",
        "2.00×",
        "fails",
        "~30.0× (1 run)",
        "1.50×",
    ]
    assert tables["Drawing: SVG through Graphviz `dot`"][1] == ["m", "0.50 s", "fails", "timeout", "timeout"]
    assert tables["Graph size: nodes / edges (torchinfo: module rows)"][1][1] == "5 / 4"
    failures = _report.markdown(env, list("abcd"), ["m"], [], runs, {}).split("## Failures")[1]
    assert "b on m, run: `KeyError: '1'`" in failures


def test_dot_size_counts_declared_nodes_and_edges_not_defaults() -> None:
    dot_size = _bench_module("tools").dot_size

    source = 'digraph g {\n\tgraph [rankdir=TB]\n\tnode [shape=box]\n\tedge [color=red]\n\t0 [label=<a>]\n\t"x.y" [label="b"]\n\t1 [label=c]\n\t0 -> "x.y"\n\t"x.y" -> 1 [label=d]\n\t0 -> 1\n}\n'
    assert dot_size(source) == (3, 3)


@pytest.mark.parametrize("script", ["compare.py", "bench_runtime.py"])
def test_device_cuda_without_a_gpu_is_one_clear_usage_error(script: str) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--device", "cuda"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "--device cuda: torch sees no CUDA device" in done.stderr
    assert "Traceback" not in done.stderr


def test_bench_profile_reports_the_root_against_the_forward(tmp_path: Path) -> None:
    out = tmp_path / "profile.md"
    _bench("bench_profile.py", "--models", "coolcnn", "--rounds", "3", "--out", str(out))
    rows = _tables("## t\n" + out.read_text(encoding="utf-8"))["t"]
    assert rows[0][:4] == ["model", "plain forward", "profiled root", "root / forward"]
    assert rows[1][0] == "coolcnn" and RATIO.match(rows[1][3]) and rows[1][-1] in ("yes", "no")


def test_the_gpu_target_row_is_skipped_with_a_reason_without_cuda(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out = tmp_path / "runtime.md"
    done = _bench("bench_runtime.py", "--models", "llama-8b", "--out", str(out))
    assert "llama-8b" in done.stdout and "needs `--device cuda`" in done.stdout
    text = out.read_text(encoding="utf-8")
    assert "GPU target row (llama-8b, bfloat16, 4×2048) is skipped" in text


def test_llama_8b_is_llama_3_8b_in_bfloat16_on_the_meta_device_off_the_gpu() -> None:
    import torch

    models = _bench_module("models")
    model, (tokens,), kwargs = models.build("llama-8b", "cpu")
    params = list(model.parameters())
    assert {p.device.type for p in params} == {"meta"} and {p.dtype for p in params} == {torch.bfloat16}
    assert 8.0e9 < sum(p.numel() for p in params) < 8.1e9
    assert tuple(tokens.shape) == (4, 2048) and kwargs == {}
    assert "llama-8b" not in models.zoo_models() and "llama-8b" in models.zoo_models("cuda")
    with pytest.raises(ValueError, match="only built on a CUDA device or on the meta device"):
        models.build_llama_8b("cpu")


def test_bench_scaling_prints_a_ladder_per_case() -> None:
    done = _bench("bench_scaling.py", "--scale", "0.02")
    rows = _tables(done.stdout)[""][1:]
    assert len(rows) == 5 * 4 and all(float(row[2]) >= 0 for row in rows)
    assert {row[0] for row in rows} >= {"tree, op reading n values", "diff, n-op chains at two input sizes"}

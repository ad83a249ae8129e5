"""What ``torch.compile`` makes of a forward pass, in dynamo's own words.

The model runs under ``torch._dynamo.optimize`` with a backend that records every graph
dynamo hands it (the user source line of each of its ops, and dynamo's reason for ending
it there), wraps it to note each time it runs, and then runs it with the backend the user
named. Guard failures on later input sets are dynamo's ``guard_fail_fn`` reports. Nothing
here decides where a graph breaks: dynamo does, and this only writes it down.

``torch._dynamo.reset()`` frees compiled code that another thread may be running (it crashed
the process), so it is called only when no other compiled code is left. The run compiles in
a cache region of its own (``isolate_recompiles``): nothing compiled before is reused and no
recompile limit is shared. Afterwards its own cache entries are invalidated (``_forget_compiled``).
Traces wait meanwhile (``_patches.dynamo_exclusive``): the run needs dynamo's process-wide
stance at "default", a trace at "force_eager". Dynamo's config is put
back as it was, and its logger's graph-break warnings are held back while it runs (they say
what the report says).
"""

from __future__ import annotations

import inspect
import logging
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .._ops import op_name
from . import _patches
from ._regions import CompiledGraph, CompileFacts, GuardFailure, Key
from ._session import TraceError
from ._source import is_user_file, line_text

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_GRAPH_OPS = ("call_function", "call_method", "call_module")


def _user_key(stack_trace: str | None) -> Key | None:
    """The innermost frame of a node's stack trace in user code: the line our trace records."""
    frames = [(m["file"], int(m["line"])) for m in _FRAME.finditer(stack_trace or "")]
    user = [f for f in frames if is_user_file(f[0])]
    return user[-1] if user else None


def _op_name(node: Any) -> str:
    """The op a graph node runs, named as the eager graph's op names are (``_ops.op_name``):
    ``operator.mul`` and ``Tensor.__mul__`` are both ``mul``, ``torch._C._nn.linear`` is ``linear``."""
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", str(target))
    return op_name(name.rsplit(".", 1)[-1])


def _user_frames(stack: Sequence[Any]) -> list[tuple[str, int, str]]:
    return [(fs.filename, fs.lineno or 0, (fs.line or "").strip()) for fs in stack if is_user_file(fs.filename)]


@dataclass
class _Recorder:
    """The backend dynamo compiles with: it writes down each graph and each run of it."""

    backend: Callable[..., Any]
    facts: CompileFacts = field(default_factory=CompileFacts)
    call: int = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        index = len(self.facts.graphs)
        reason = getattr(gm, "compile_subgraph_reason", None)
        self.facts.graphs.append(
            CompiledGraph(
                keys=[_user_key(n.meta.get("stack_trace")) for n in gm.graph.nodes if n.op in _GRAPH_OPS],
                names=[_op_name(n) for n in gm.graph.nodes if n.op in _GRAPH_OPS],
                reason=str(getattr(reason, "reason", "")),
                graph_break=bool(getattr(reason, "graph_break", False)),
                stack=_user_frames(getattr(reason, "user_stack", None) or []),
                call=self.call,
            )
        )
        compiled = self.backend(gm, example_inputs)
        runs = self.facts.runs

        def run(*args: Any) -> Any:
            runs.append((self.call, index))
            return compiled(*args)

        return run

    def guard_failed(self, failure: Any) -> None:
        code = getattr(failure, "orig_code", None)
        file = getattr(code, "co_filename", "")
        line = getattr(code, "co_firstlineno", 0)
        self.facts.failures.append(
            GuardFailure(str(getattr(failure, "reason", failure)), file, line, line_text(file, line), self.call)
        )


def compile_facts(
    model: Callable[..., Any], input_sets: Sequence[tuple[tuple[Any, ...], dict[str, Any]]], backend: str | Callable[..., Any],
    dynamic: bool | None,
) -> CompileFacts:
    """Run ``model`` compiled once per input set, recording what dynamo compiled and why it broke."""
    import torch._dynamo as dynamo

    recorder = _Recorder(dynamo.lookup_backend(backend) if isinstance(backend, str) else backend)
    with _patches.dynamo_exclusive(lambda: TraceError("torchatlas.compile_report cannot run inside a torchatlas.trace in the same thread")):
        config = dynamo.config.get_config_copy()
        logger = logging.getLogger("torch._dynamo")
        level = logger.level
        try:
            logger.setLevel(max(logging.ERROR, level))  # its graph-break warnings are what this reports
            context = dynamo.optimize(
                recorder, nopython=False, dynamic=dynamic, guard_fail_fn=recorder.guard_failed, **_isolated(dynamo)
            )
            compiled = context(model)
            with torch.compiler.set_stance("default"):
                for call, (args, kwargs) in enumerate(input_sets):
                    recorder.call = call
                    compiled(*args, **kwargs)
        finally:
            # The logger and config first: forgetting what was compiled may itself be interrupted.
            logger.setLevel(level)
            try:
                _forget_compiled(recorder)
            finally:
                with warnings.catch_warnings():  # reading a deprecated key warns
                    warnings.simplefilter("ignore", FutureWarning)
                    changed = {k: v for k, v in config.items() if getattr(dynamo.config, k) != v}
                dynamo.config.load_config(changed)  # only what changed: the rest keeps its user-set marks
    facts, recorder.facts = recorder.facts, CompileFacts()  # the spent entries keep the recorder
    return facts


def _isolated(dynamo: Any) -> dict[str, bool]:
    """``isolate_recompiles=True`` where this torch's dynamo takes it (2.13 does, 2.11 does not). Before it, the
    run shares the code's cache: entries of another backend are not reused (dynamo matches the
    backend), only its recompile count is shared."""
    accepted = inspect.signature(dynamo.eval_frame._optimize).parameters
    return {"isolate_recompiles": True} if "isolate_recompiles" in accepted else {}


def _forget_compiled(recorder: _Recorder) -> None:
    """Drop what this run compiled, and nothing else.

    A code object holding only this run's cache entries is reset (entries, spent entries and
    recompile counts: dynamo counts spent entries toward its recompile limits). One that also
    holds another backend's live entries keeps them; this run's are invalidated, as dynamo
    invalidates an entry whose guarded object died. When no other compiled code is left in
    the process, dynamo is reset too, as ``torch._dynamo.explain`` does. All of it under
    dynamo's compile lock, so no compile in another thread finishes meanwhile.
    """
    import torch._dynamo as dynamo
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list, reset_code
    from torch._dynamo import convert_frame, eval_frame
    from torch._dynamo.guards import DeletedGuardManagerWrapper

    with convert_frame.compile_lock:
        others = False
        for ref in [*convert_frame.input_codes.seen, *convert_frame.output_codes.seen]:
            code = ref()
            entries = _debug_get_cache_entry_list(code) if code is not None else []
            ours = [e for e in entries if e.backend is recorder]
            live = [e for e in entries if e.backend is not recorder and not isinstance(e.guard_manager, DeletedGuardManagerWrapper)]
            others = others or bool(live)
            if ours and not live:
                reset_code(code)
                continue
            for entry in ours:
                if entry.guard_manager.extra_state is not None:
                    spent = DeletedGuardManagerWrapper("torchatlas.compile_report is done with it")
                    entry.guard_manager.extra_state.invalidate(entry, spent)
        for key, cached in list(eval_frame.cached_backends.items()):
            if cached is recorder:
                del eval_frame.cached_backends[key]
        if not others:
            dynamo.reset()

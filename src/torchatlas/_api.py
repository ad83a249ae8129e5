"""The public API: the one module that wires capture, IR, passes and renderers."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from . import _capture
from ._io import write_atomic
from ._ir import GraphBreak, GraphFormatError, GraphIR, Node, add_overlay, graph_from_json
from ._passes import GraphDiff as _GraphDiff
from ._passes import diff as diff_graphs
from ._passes import ensure_analyzed, first_nonfinite, strip_analyses
from ._render import (
    MAX_DOT_ELEMENTS,
    RENDERERS,
    DotOptions,
    GraphmlOptions,
    GraphvizNotFoundError,
    HtmlOptions,
    MermaidOptions,
    ModelExplorerOptions,
    SummaryOptions,
    TreeOptions,
    ViewerBundleMissing,
    decision_table,
    diagram_size,
    diff_graph_page,
    diff_page,
    graph_records,
    image_format,
    model_explorer_node_data,
    notebook_html,
    render_dot,
    responsive_svg,
    viewer_bundle_built,
)
from ._terminal import op_progress, status
from ._view import graph_counts

Shape = Sequence[int]
PathLike = str | os.PathLike[str]


class Graph:
    """One captured forward pass. ``graph.ir`` is the data; the methods render it.

    Every output method follows one convention: without ``path`` it returns the
    output (text, bytes or a dict); with ``path`` it writes the file atomically and
    returns its ``Path``.
    """

    def __init__(
        self, ir: GraphIR, error: BaseException | None = None, activations: dict[str, Any] | None = None
    ) -> None:
        self._captured = ir
        self._analyzed: GraphIR | None = None
        self.error = error
        """With ``trace(..., partial=True)``: the exception that stopped the forward pass (its
        traceback's frames cleared, so it keeps no activation alive)."""
        self._activations = dict(activations or {})

    @property
    def ir(self) -> GraphIR:
        """The graph with every analysis in its ``meta`` (parameters, FLOPs, memory, repeated
        blocks, dead code). Computed on first use, so ``trace`` costs one forward pass."""
        if self._analyzed is None:
            with _capture.collection_paused():  # analyses allocate per node: see collection_paused
                self._analyzed = ensure_analyzed(self._captured)
        return self._analyzed

    # -- data -------------------------------------------------------------------

    @property
    def nodes(self) -> list[Any]:
        return self.ir.nodes

    @property
    def scopes(self) -> list[Any]:
        return self.ir.scopes

    # -- run time ------------------------------------------------------------------

    @property
    def graph_breaks(self) -> list[GraphBreak]:
        """``compile_report``: where ``torch.compile`` broke the graph and why, in order, then the
        recompiles dynamo made (see ``docs/compile.md``); empty for a plain trace."""
        return self.ir.graph_breaks

    def first_nonfinite(self) -> Node | None:
        """The first op, in execution order, with a NaN or Inf in an output (needs ``stats=True``);
        None when there is none. It carries ``target``, ``source`` (file, line) and ``scope``."""
        return first_nonfinite(self.ir)

    def decisions(self, ascii: bool | None = None) -> str:
        """Each place Python read a tensor's value (an ``if``, a ``while``, a ``break``,
        ``.item()``), with its line, which ways it went and the op it read: a short table."""
        if ascii is None:
            ascii = not _can_encode(sys.stdout, "×")
        return decision_table(self.ir, ascii)

    def activation(self, key: str) -> Any:
        """An output ``save`` kept: a module path (``"fc"``; ``"fc#1"`` for its second call) or a node id."""
        if key not in self._activations:
            kept = ", ".join(list(self._activations)[:8]) or "nothing (pass save=... to trace)"
            raise KeyError(f"torchatlas: no activation kept for {key!r}; kept: {kept}")
        return self._activations[key]

    def activations(self) -> dict[str, Any]:
        """Every output ``save`` kept, by module path (``path#k`` for later calls) and node id."""
        return dict(self._activations)

    def overlay(self, name: str, values: Any, kind: str = "number", scale: str | None = None) -> Graph:
        """Attach your own number or category per op or per module call, shown by every output
        (tree, summary, diagram, page, Model Explorer) and saved with the graph.

        ``values`` maps ops or calls to values (a dict, or ``(key, value)`` pairs): the key an id
        (``"n12"``, ``"s3"``), a module path (``"layers.0.mlp"``; ``"layers.0.mlp#1"`` its second
        call), or in pairs a ``Node`` or ``Scope``.
        ``kind``: ``"number"`` (``scale`` ``"linear"`` or ``"log"``) or ``"category"`` (text).
        An overlay of the same name is replaced. Returns the graph, so calls chain."""
        self._captured = add_overlay(self._captured, name, values, kind, scale)
        if self._analyzed is not None:
            self._analyzed = add_overlay(self._analyzed, name, values, kind, scale)
        return self

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready graph document (``docs/format.md``)."""
        return self.ir.to_dict()

    def to_json(self, indent: int | None = None) -> str:
        return self.ir.to_json(indent=indent)

    def save(self, path: PathLike) -> Path:
        """Write the graph document as JSON (atomically); ``torchatlas.load`` reads it back."""
        return write_atomic(path, self.to_json())

    # -- views ------------------------------------------------------------------

    def view(self, format: str, /, path: PathLike | None = None, **options: Any) -> str | bytes | Path:
        """Any output format by name (``torchatlas.FORMATS``), with that format's options.

        Returns the output, or writes it to ``path`` and returns the path. ``format`` is
        positional only, so a format's own ``format`` option passes through:
        ``view("summary", format="markdown")``.
        """
        renderer = RENDERERS.get(format)
        if renderer is None:
            raise ValueError(f"unknown format {format!r}; expected one of {', '.join(RENDERERS)}")
        return self._emit(format, renderer.options(**options), path)

    def _emit(self, format: str, options: Any, path: PathLike | None) -> Any:
        ir = self.ir
        with _capture.collection_paused():
            value = RENDERERS[format].render(ir, options)
        return value if path is None else write_atomic(path, value)

    def tree(
        self,
        depth: int | None = None,
        ascii: bool | None = None,
        source: bool = False,
        *,
        path: PathLike | None = None,
        fold_repeats: bool = True,
    ) -> str | Path:
        """The module hierarchy with ops in execution order; branches that fork and join
        show as sibling branches, side values (``← cos, sin``) beside the calls that read
        them. ``depth`` collapses deeper module calls to one line; ``ascii`` defaults to
        whatever stdout can encode; ``source`` adds file:line; ``fold_repeats=False`` lists
        every call of a run of identical layers instead of one ``layers.0–79 ×80`` line."""
        if ascii is None:
            ascii = not _can_encode(sys.stdout, "├→×")
        options = TreeOptions(depth=depth, ascii=ascii, source=source, fold_repeats=fold_repeats)
        return self._emit("tree", options, path)

    def summary(
        self,
        depth: int | None = None,
        format: str | None = None,
        *,
        path: PathLike | None = None,
        fold_repeats: bool = True,
        wide: bool = False,
        sort: str | None = None,
    ) -> str | Path:
        """A table per module call: shapes, parameters, FLOPs/MACs, activation memory.

        ``format``: "rich" (the default on a terminal that can draw its box), "text" or "markdown".
        On a terminal, or where ``COLUMNS`` is set (a pipe, Jupyter), the columns that fit
        its width are shown (module, output shapes, params, FLOPs first) and long names are
        cut, never wrapped; ``wide=True``, a file, or a pipe without ``COLUMNS`` get every column. ``fold_repeats=False`` lists every call of a run of
        identical layers instead of one ``layers.0–79 ×80`` row. Graphs traced with
        ``profile=True`` add ``Time`` and ``% Time`` (``sort="time"``: every call, hottest
        first), with ``stats=True`` each call's output range and NaN/Inf op count.
        """
        tty = sys.stdout.isatty() and path is None and _can_encode(sys.stdout, "━─│")
        format = format or ("rich" if tty else "text")
        # COLUMNS says how wide the reader's screen is where stdout is no terminal (a pipe, Jupyter)
        fit = (tty or os.environ.get("COLUMNS", "").isdigit()) and path is None and not wide
        width = max(20, shutil.get_terminal_size((160, 24)).columns) if fit else None
        options = SummaryOptions(
            depth=depth, format=format, width=width, color=tty and format == "rich", fold_repeats=fold_repeats,  # type: ignore[arg-type]
            sort=sort,  # type: ignore[arg-type]
        )
        return self._emit("summary", options, path)

    def to_dot(self, path: PathLike | None = None, **options: Any) -> str | Path:
        """Graphviz DOT text (needs no binary). Options: the fields of ``DotOptions``."""
        return self._emit("dot", DotOptions(**options), path)

    def render(self, path: PathLike | None = None, format: str | None = None, **options: Any) -> bytes | Path:
        """Draw the diagram: to ``path`` (``.svg``, ``.png``, ``.pdf``, ``.dot``; or give ``format``),
        or, without a path, return its bytes (``format`` default ``svg``).

        Options: the fields of ``DotOptions``: ``depth`` (collapse module calls deeper than
        it into one box), ``expand_leaf_modules``, ``show_tensors``, ``show_params``,
        ``show_constants``, ``fold_repeats``, ``direction`` ("TB"/"LR"), ``theme`` ("light"/"dark"), ``legend``.
        """
        fmt = image_format(path, format) if path is not None else (format or "svg")
        dot_options = DotOptions(**options)
        with status(f"rendering {Path(path).name if path is not None else fmt}"):
            value = render_dot(self.ir, dot_options, fmt)
        return value if path is None else write_atomic(path, value)

    def to_html(self, path: PathLike | None = None, title: str | None = None, **options: Any) -> str | Path:
        """The interactive viewer as one self-contained HTML file (works offline, no server).
        Options: the view options its first view starts from (``HtmlOptions``: ``depth``,
        ``fold_repeats``, ``show_params``, ``show_constants``, ``direction``)."""
        return self._emit("html", HtmlOptions(title=title, **options), path)

    def show(self, title: str | None = None) -> Path:
        """Open the interactive viewer in the default web browser; returns the page's path.
        Where no browser can be started (a headless machine), says on stderr where the page is."""
        import tempfile
        import webbrowser

        path = Path(tempfile.mkdtemp(prefix="torchatlas-")) / "graph.html"
        self.to_html(path, title)
        try:
            opened = webbrowser.open(path.as_uri())
        except webbrowser.Error:
            opened = False
        if not opened:
            print(f"torchatlas: no web browser to open here; the viewer page is {path}", file=sys.stderr)
        return path

    def to_model_explorer(self, path: PathLike | None = None, title: str | None = None, **options: Any) -> dict[str, Any] | Path:
        """Google Model Explorer's graph JSON (module calls as namespaces, shapes as metadata);
        ``options`` are ``ModelExplorerOptions``' fields (``show_params=True``: parameters as nodes)."""
        text = self._emit("model-explorer", ModelExplorerOptions(title=title, **options), None)
        return json.loads(text) if path is None else write_atomic(path, text)

    def to_mermaid(self, path: PathLike | None = None, depth: int | None = None, **options: Any) -> str | Path:
        """A Mermaid flowchart for GitHub READMEs and issues: the diagram's boxes, folds and names
        (``MermaidOptions``: ``depth`` first; paste it inside a ```` ```mermaid ```` block)."""
        return self._emit("mermaid", MermaidOptions(depth=depth, **options), path)

    def to_graphml(self, path: PathLike | None = None) -> str | Path:
        """GraphML of every node and read (target, module path, shapes, FLOPs, overlays as attributes)."""
        return self._emit("graphml", GraphmlOptions(), path)

    def to_networkx(self) -> Any:
        """A ``networkx.MultiDiGraph`` of every node and read, with GraphML's attributes (needs networkx)."""
        try:
            import networkx
        except ImportError:
            raise ImportError("torchatlas: to_networkx needs networkx (pip install 'torchatlas[networkx]')") from None
        nodes, edges = graph_records(self.ir)
        made = networkx.MultiDiGraph(name=self.ir.meta.get("model", ""))
        made.add_nodes_from(nodes)
        made.add_edges_from(edges)
        return made

    def to_model_explorer_node_data(self, name: str | None = None, path: PathLike | None = None) -> dict[str, Any] | Path:
        """One overlay (default: the first number one) as Model Explorer's node data JSON, to load
        beside ``to_model_explorer``'s graph: each op's value, coloured by a gradient."""
        data = model_explorer_node_data(self.ir, name)
        return data if path is None else write_atomic(path, json.dumps(data))

    def _repr_html_(self) -> str | None:
        """Jupyter and VS Code notebooks show the interactive viewer inline (an iframe)."""
        try:
            return notebook_html(self.ir)
        except ViewerBundleMissing:
            return None  # falls back to _repr_svg_

    def _repr_svg_(self) -> str | None:
        """Jupyter shows the diagram; too big a graph or no ``dot`` falls back to the text repr."""
        options = DotOptions(depth=None if len(self.ir.nodes) < 400 else 2)
        if diagram_size(self.ir, options) > MAX_DOT_ELEMENTS:
            return None
        try:
            return responsive_svg(render_dot(self.ir, options, "svg").decode("utf-8"))
        except GraphvizNotFoundError:
            return None

    def __repr__(self) -> str:
        # the counts as the page's status line says them: one spelling
        return f"<torchatlas.Graph {self.ir.meta.get('model', '?')}: {graph_counts(self.ir).text}>"


def _can_encode(stream: Any, sample: str) -> bool:
    try:
        sample.encode(getattr(stream, "encoding", None) or "ascii")
        return True
    except (UnicodeEncodeError, LookupError):
        return False


def trace(
    model: Callable[..., Any],
    args: Any = (),
    kwargs: dict[str, Any] | None = None,
    *,
    level: str = "python",
    backward: bool = False,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    partial: bool = False,
    progress: bool | None = None,
    stats: bool | str = False,
    save: str | Sequence[str] | Callable[[str], bool] | None = None,
    save_device: str | torch.device | None = None,
    profile: bool = False,
    rank: int | None = None,
    fingerprint: bool = False,
) -> Graph:
    """Run ``model(*args, **kwargs)`` once and record every tensor op with its module call.

    ``args`` is a tuple of positional inputs or a single tensor. The model and torch are
    left exactly as they were, whether the forward pass returns or raises.

    * ``level="python"`` records torch functions, Tensor methods and operators as written;
      ``level="aten"`` records the ops that reach the ATen dispatcher, each linked to the
      Python op it came from (``node.meta["python_op"]``).
    * ``backward=True`` also runs backward (of ``loss_fn(output)``, default: the sum of
      the float outputs) and records its ATen ops (``node.meta["phase"]``).
    * ``partial=True``: a forward pass that fails part-way still gives the graph up to
      the failing op (marked in ``node.meta["error"]``) and ``graph.error``.
    * ``stats=True``: each op's outputs get ``node.meta["stats"]`` (min, max, mean, std,
      absmax, NaN and Inf counts, fraction of zeros), computed as the op runs; see
      ``graph.first_nonfinite()``. Only dense float and integer tensors are measured; the
      reason any other output was not is in ``node.meta["stats_skipped"]``.
      ``stats="sample"`` measures outputs over 65,536 elements on a strided sample of about
      as many (``stats["sampled"]`` says how many were read).
    * ``save="layers.0.*"`` (a glob, a list of globs, or a callable on paths) keeps detached
      copies of the outputs of matching module calls, and with a ``:`` of ops
      (``"layers.0.mlp:relu"``, ``"*:softmax"``), on ``save_device`` if given:
      ``graph.activation(path)``, ``graph.activations()``.
    * ``profile=True``: ``node.meta["time_us"]`` per op and ``scope.meta["time_us"]`` per
      module call (inclusive), measured after the trace in untraced passes of the model
      (module hooks that only read a clock; a mode that only reads a clock around each torch
      call), matched to the trace by call order; on CUDA also ``cuda_time_us``, the device
      time from ``torch.profiler``. Buffers and random state are put back after those passes.
    * ``fingerprint=True``: each op's outputs get ``node.meta["fingerprint"]`` (statistics,
      1,024 values at fixed positions, a hash of the bytes), what ``torchatlas.compare`` reads.
    * ``progress`` shows a live op counter on big traces (default: when stderr is a terminal).
    * Under a ``torch.distributed`` process group (the ``"fake"`` one runs any world size in one
      process) collectives are op nodes and DTensors keep their placements; the graph is what
      this process's rank runs (``graph.ir.meta["distributed"]``). ``rank=r`` checks that it is
      rank ``r``: a model is sharded for the rank its process group was made with.
    """
    if rank is not None:
        _capture.check_rank(rank)
    if level not in _capture.LEVELS or level == "backward":
        raise ValueError(f"torchatlas: level must be 'python' or 'aten', not {level!r}")
    if stats not in (True, False, "sample"):
        raise ValueError(f"torchatlas: stats must be True, False or 'sample', not {stats!r}")
    if backward and partial:
        raise ValueError("torchatlas: partial=True records a failing forward pass; it cannot run backward")
    args = _normalize_args(args)
    kwargs = _keyword_inputs(kwargs)
    options: dict[str, Any] = {"loss_fn": loss_fn} if backward else {}
    with op_progress(progress) as report:
        result = _capture.capture(
            model, args, kwargs, level="backward" if backward else level, partial=partial, progress=report,
            stats=stats, save=save, save_device=save_device, profile=profile, fingerprint=fingerprint, **options,
        )
    return Graph(result.ir, result.error, result.activations)


def profile(
    model: Callable[..., Any], args: Any = (), kwargs: dict[str, Any] | None = None, *, repeat: int = 5, warmup: int = 1
) -> Graph:
    """The graph of one forward pass with ``time_us`` per op and module call (on CUDA also
    ``cuda_time_us``): the model is traced once, then timed untraced, ``warmup`` rounds not
    counted and the median of ``repeat`` rounds kept; see ``trace(profile=True)``."""
    if repeat < 1 or warmup < 0:
        raise ValueError("torchatlas: profile needs repeat >= 1 and warmup >= 0")
    args = _normalize_args(args)
    result = _capture.capture(model, args, _keyword_inputs(kwargs), profile=True, profile_rounds=(repeat, warmup))
    return Graph(result.ir)


def from_fx(graph_module: torch.fx.GraphModule) -> Graph:
    """The graph of a ``torch.fx.GraphModule`` (symbolic_trace, make_fx, a compile backend's
    graph), with scopes from its ``call_module`` targets and ``nn_module_stack``."""
    return Graph(_capture.from_fx(graph_module))


def from_export(
    program: torch.export.ExportedProgram | str | os.PathLike[str],
    *,
    trust: bool = False,
    trust_pickle: bool = False,
) -> Graph:
    """The graph of a ``torch.export.ExportedProgram`` (or a ``.pt2`` file saved by
    ``torch.export.save``), with one scope per module call from ``nn_module_stack``.

    A ``.pt2`` file is read as data: the graph comes from its program's JSON, and nothing
    in the file is unpickled, evaluated, extracted or loaded (weights are not needed). It
    gives the same graph as the program in memory. An archive laid out to be read
    differently by another zip reader, or past a size cap, raises :class:`UnsafeArchiveError`
    naming the member. ``trust=True`` (or ``trust_pickle=True``) hands the file to
    ``torch.export.load`` instead, which unpickles and runs code from it: only for files you
    trust as you would trust running them.
    """
    if isinstance(program, (str, os.PathLike)):
        if not (trust or trust_pickle):
            return Graph(_capture.read_exported(program))
        program = _capture.load_exported(program)
    return Graph(_capture.from_export(program))


def compile_report(
    model: Callable[..., Any],
    args: Any = (),
    kwargs: dict[str, Any] | None = None,
    backend: str | Callable[..., Any] = "eager",
    dynamic: bool | None = None,
    *,
    more_args: Sequence[Any] = (),
) -> Graph:
    """Where ``torch.compile`` breaks the graph of ``model(*args, **kwargs)``, and why.

    Returns the eager graph (as ``trace`` gives it) with each op's compiled graph in
    ``node.meta["compile_region"]`` (None: it ran eagerly between graphs) and
    ``graph.graph_breaks``. ``more_args``: further input sets (each a tuple of positional
    inputs or a single tensor, with the same ``kwargs``), run after the first, whose guard
    failures and recompiles are reported too. The facts are dynamo's own: the model runs
    under ``torch._dynamo.optimize`` with ``backend`` and ``dynamic`` once per input set.
    It compiles in a dynamo cache region of its own and drops only what it compiled, so
    compiled code in other threads runs on (``docs/compile.md`` says what may run beside
    it); dynamo's config and the model are left as they were.
    """
    args, kwargs = _normalize_args(args), _keyword_inputs(kwargs)
    graph = trace(model, args, kwargs)  # first: a model that fails, fails as it does in trace
    input_sets = [(args, kwargs)] + [(_normalize_args(more), kwargs) for more in more_args]
    try:
        facts = _capture.compile_facts(_capture.unwrap_model(model), input_sets, backend, dynamic)
    except Exception as e:
        first_line = (str(e).strip().splitlines() or [""])[0]
        name = graph.ir.meta.get("model", type(model).__name__)
        raise _capture.TraceError(f"torchatlas: torch.compile failed on {name}: {type(e).__name__}: {first_line}") from e
    return Graph(_capture.annotate_compile(graph._captured, facts))


def trace_shapes(
    model: torch.nn.Module,
    *shapes: Shape,
    dtype: torch.dtype | Sequence[torch.dtype] = torch.float32,
    device: str | torch.device | None = None,
    high: int | None = None,
    kwargs: dict[str, Any] | None = None,
    partial: bool = False,
    level: str = "python",
    backward: bool = False,
) -> Graph:
    """Trace from input shapes alone, as torchinfo's ``input_size`` does.

    Inputs are built for you on the model's device (or ``device``): random normal
    floats, or random integers in ``[0, high)`` for integer dtypes (token ids; ``high``
    defaults to the model config's ``vocab_size`` where there is one, else 2). On the
    ``meta`` device they are meta tensors. ``level``, ``backward`` and ``partial`` are
    :func:`trace`'s.
    """
    dtypes = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * len(shapes)
    if len(dtypes) != len(shapes):
        raise ValueError(f"torchatlas: {len(shapes)} input shapes but {len(dtypes)} dtypes")
    target = torch.device(device) if device is not None else model_device(model)
    vocab = high or getattr(getattr(model, "config", None), "vocab_size", None) or 2
    inputs = tuple(random_input(tuple(s), dt, target, vocab) for s, dt in zip(shapes, dtypes))
    return trace(model, inputs, kwargs, level=level, backward=backward, partial=partial)


def random_input(
    shape: Sequence[int], dtype: torch.dtype = torch.float32, device: str | torch.device | None = None, high: int = 2
) -> torch.Tensor:
    """The input :func:`trace_shapes` makes for one shape: random normal floats, random
    integers in ``[0, high)`` (token ids), ones for ``bool``; on ``device`` (default CPU)."""
    shape = tuple(shape)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, dtype=dtype, device=device)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype, device=device)
    return torch.randint(0, high, shape, dtype=dtype, device=device)


def model_device(model: Any) -> torch.device:
    """Where a model's parameters (else its buffers) live; CPU for a model with neither."""
    if isinstance(model, torch.nn.Module):
        for t in model.parameters():
            return t.device
        for t in model.buffers():
            return t.device
    return torch.device("cpu")


def _keyword_inputs(kwargs: Any) -> dict[str, Any]:
    """``kwargs`` as a dict; anything else is most likely a second positional input."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        raise TypeError(
            f"torchatlas: the third argument is the model's keyword inputs (a dict), not a {type(kwargs).__name__}; "
            "pass several positional inputs as one tuple: trace(model, (x, mask))"
        )
    return dict(kwargs)


def _normalize_args(args: Any) -> tuple[Any, ...]:
    if isinstance(args, tuple):
        return args
    if isinstance(args, list):
        return tuple(args)
    return (args,)


class GraphDiff(_GraphDiff):
    """What changed from graph ``a`` to graph ``b`` (``torchatlas.diff``)."""

    def to_html(self, path: PathLike | None = None, title: str = "torchatlas diff", view: str | None = None) -> str | Path:
        """One self-contained page. ``view="graph"`` (the default where the viewer bundle is built):
        both graphs as one in the viewer, added boxes green, removed red, changed amber with the change
        as their subtitle, and the calls that differ listed beside it. ``view="list"``: the merged
        module-call tree alone, coloured; a click shows a call in both graphs side by side."""
        if view not in (None, "graph", "list"):
            raise ValueError(f"view must be 'graph' or 'list', not {view!r}")
        if view is None:
            view = "graph" if viewer_bundle_built() else "list"
        if view == "graph" and self.graph is not None:
            page = diff_graph_page(self.graph, self.to_dict(), title)
        else:
            page = diff_page(self.to_dict(), title)
        return page if path is None else write_atomic(path, page)


def diff(a: Graph | GraphIR, b: Graph | GraphIR) -> GraphDiff:
    """What changed from ``a`` to ``b``: module calls added and removed, shapes, parameter
    counts and FLOPs. Calls are matched by path, falling back to structure."""
    found = diff_graphs(a.ir if isinstance(a, Graph) else a, b.ir if isinstance(b, Graph) else b)
    return GraphDiff(**vars(found))


def user_location(exc: BaseException) -> str:
    """`` (file.py:12)``: where in user code (outside torch and torchatlas) ``exc`` was
    raised, for a one-line error message; ``""`` when nowhere."""
    return _capture.user_location(exc)


def load(path: PathLike) -> Graph:
    """Read a graph saved by ``Graph.save``. Malformed or future-version files raise
    ``GraphFormatError`` naming the problem; nothing is ever unpickled or evaluated.
    Analysis results in the file are not trusted: they are computed again."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise GraphFormatError(f"{path}: not a UTF-8 JSON file ({e.reason})") from None
    try:
        return Graph(strip_analyses(graph_from_json(text)))
    except GraphFormatError as e:
        raise GraphFormatError(f"{path}: {e}") from None

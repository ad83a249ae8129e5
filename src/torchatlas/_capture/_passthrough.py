"""Who reads a pass-through call's result through the call.

A module call that returns the tensor it was given (eval Dropout, Identity) becomes a node,
but the tensor object is the same one every other path holds. Its readers are told apart by
where the call's result went in the frame that made the call: stored in a variable (a reader
there reads through the call if its expression loads that variable, or one it was handed on
to by no call and no arithmetic: ``h = outputs[0]``, ``acc = acc + (h,)``, not ``y = h * 2``,
see ``_passthrough_moves``, while it still holds the tensor; one item of a tuple assignment,
``q, k = q_norm(q), k_norm(k)``, is stored so too), consumed by the enclosing expression
(only a reader whose expression contains the call, later in that run of the statement; the
tuple and dict ``f(g(x), **kw)`` packs its arguments in are that call's arguments), or
returned (then the enclosing module call, on return, delivers it to *its* caller the same
way; a helper method of the running call hands it back if its own return is it). A reader
inside a call the frame makes is followed into that call's arguments where the callee loads
the tensor under its own parameters: ``tree1(x, shortcut)`` gives its body's ``conv1(x)``
the argument ``x``, not ``shortcut``.

A reader no path of the result is seen to reach reads what the call was given only if it is
shown to: a frame that held the tensor under a name when the call was made (or in a list or
tuple a name held: HRNet's branches) runs now, and loads it for the reader under a name the
result was not bound to (``short(x)`` beside ``block(x)``), or a module call returned what the
call was given to the reader's frame (``b = ident(h); return h``), or a forward hook of a call
that was given the tensor kept it before the pass-through ran inside that call
(``_passthrough_hooked``: transformers' first hidden state, its first layer's ``args[0]``).
Any other reader got the tensor after the call, from its result: passed on under another
name (``next_kv = hidden_states``), kept by a hook in a list a decorator returns (transformers'
``output_hidden_states``). A
result that went somewhere this cannot follow (an attribute, a list kept for later) is read
through the call by every reader. Frames are told apart by the scope running the call, so
an address a dead frame leaves to a new one is never taken for it. Without instruction
positions (Python 3.10), every reader reads through the call.
"""

from __future__ import annotations

import bisect
import dis
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from . import _source
from ._passthrough_holders import Holder, holders_of, holds
from ._passthrough_hooked import HookedCalls
from ._passthrough_moves import CALLS, LOADS, STATEMENT_ENDS, STORES, assigned_on, names_of
from ._passthrough_source import argument_spans, tuple_target
from ._records import Slot

CallSite = tuple[int, Any, int]
"""(id of the calling frame, its code, the call's instruction offset)."""

STORED, RETURNED, INLINE, ESCAPED = "stored", "returned", "inline", "escaped"
_RETURNS = frozenset({"RETURN_VALUE"})
_ESCAPES = frozenset({
    "STORE_ATTR", "STORE_SUBSCR", "UNPACK_SEQUENCE", "UNPACK_EX", "COPY", "DUP_TOP", "LIST_APPEND", "SET_ADD",
    "MAP_ADD", "YIELD_VALUE", "STORE_FAST_STORE_FAST",
})
_CONTAINERS = ("BUILD_", "LIST_", "DICT_", "SET_", "MAP_")


@dataclass(slots=True)
class Delivery:
    """Where one call handed the pass-through's result to a frame."""

    guard: int | None
    """The scope that ran the frame: it must still be running for the frame to be that one."""
    frame: int
    code: Any
    offset: int
    kind: str
    names: tuple[str, ...] = ()
    superseded: bool = False
    """The module call it was returned from delivered it onward: this delivery is spent."""


@dataclass(slots=True)
class Passed:
    node: Slot
    before: Slot
    deliveries: list[Delivery]
    holders: tuple[Holder, ...] = ()
    """The user frames that held the tensor under a name when the call was made: the only
    frames where a name can hold what the call was given."""
    originals: list[Delivery] = field(default_factory=list)
    """Where a module call returned what the call was given, not its result (``b = ident(a);
    return a``), to its caller: a reader there that uses it reads ``before``."""


class _Code:
    """One code object's instructions, by offset, with their source spans."""

    def __init__(self, code: Any) -> None:
        self.instructions = list(dis.get_instructions(code))
        self._offsets = [inst.offset for inst in self.instructions]
        self.answers: dict[tuple[Any, ...], Any] = {}
        """What a question about this code answered: a loop, and the next trace, ask it again."""

    def at(self, offset: int) -> int | None:
        """The instruction running at ``offset`` (a frame's ``f_lasti`` may point into its inline caches)."""
        i = bisect.bisect_right(self._offsets, offset) - 1
        return i if i >= 0 else None

    def span(self, offset: int) -> tuple[int, int, int, int] | None:
        i = self.at(offset)
        return _span(self.instructions[i]) if i is not None else None


_CODES: weakref.WeakKeyDictionary[Any, _Code | None] = weakref.WeakKeyDictionary()
"""Code object -> its instructions: disassembling is most of a pass-through's cost, and a
forward's code runs again in the next trace. Weak, so it keeps no user code alive."""


def _code_facts(code: Any) -> _Code | None:
    facts = _CODES.get(code, False)
    if facts is False:
        facts = _CODES[code] = _Code(code) if sys.version_info >= (3, 11) else None
    return facts


def _span(inst: dis.Instruction) -> tuple[int, int, int, int] | None:
    pos = getattr(inst, "positions", None)
    if pos is None or None in (pos.lineno, pos.end_lineno, pos.col_offset, pos.end_col_offset):
        return None
    return pos.lineno, pos.col_offset, pos.end_lineno, pos.end_col_offset


def _contains(outer: tuple[int, int, int, int], inner: tuple[int, int, int, int]) -> bool:
    return (outer[0], outer[1]) <= (inner[0], inner[1]) and (inner[2], inner[3]) <= (outer[2], outer[3])


class PassThroughs:
    """The pass-through nodes of one capture level and where their results went."""

    def __init__(
        self, running_scopes: Callable[[], Sequence[int]], call_sites: Mapping[int, CallSite] | None = None
    ) -> None:
        self._running = running_scopes
        self._call_sites = {} if call_sites is None else call_sites  # the tracker's own, filled as calls start
        self._by_tensor: dict[int, tuple[Any, list[Passed]]] = {}
        self.nodes: set[int] = set()
        # id(code) -> (code, its facts), for this trace: a plain dict beside the weak one
        self._code_seen: dict[int, tuple[Any, _Code | None]] = {}
        self.hooked = HookedCalls()
        """The tensors given to module calls whose hooks may keep them."""

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def clear(self) -> None:
        self._by_tensor.clear()
        self.nodes.clear()
        self._code_seen.clear()
        self.hooked.clear()

    def _chain(self, t: Any) -> list[Passed]:
        """The pass-through calls that returned ``t`` since it was last written, first to latest
        (empty for a tensor none returned: another at the address of a dead one included)."""
        entry = self._by_tensor.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else []

    def latest(self, t: Any) -> Slot | None:
        """The node of the latest pass-through call that returned ``t``, or None."""
        chain = self._chain(t)
        return chain[-1].node if chain else None

    # -- recording ----------------------------------------------------------------------

    def add(self, t: Any, node: Slot, before: Slot, guard: int | None, site: CallSite | None) -> None:
        """The call that ran in ``guard`` at ``site`` returned ``t`` unchanged, as ``node``."""
        chain = self._chain(t)
        if chain and before != chain[0].before and all(p.node != before for p in chain):
            chain = []  # written since: the earlier calls' results are gone
        holders = holders_of(t, sys._getframe(1), guard, self._frames_made_by()) if site is not None else ()
        chain.append(Passed(node, before, [self._delivery(guard, site)], holders))
        self._by_tensor[id(t)] = (weakref.ref(t), chain)
        self.nodes.add(node[0])

    def returned(
        self, t: Any, value: Slot, scope: int, guard: int | None, site: CallSite | None
    ) -> None:
        """Module call ``scope`` returned ``t`` read as pass-through ``value``: its caller got it.
        A container it came in (a tuple, a ModelOutput) is followed by variable: one assigned from
        the variable that holds it (``h = outputs[0]``) holds it too."""
        passed = self._find(t, value)
        if passed is None:
            return
        for delivery in passed.deliveries:
            if delivery.guard == scope:
                delivery.superseded = True
        delivery = self._delivery(guard, site)
        if site is None:
            delivery.kind = RETURNED  # the model's own result: every later reader got it
        passed.deliveries.append(delivery)

    def returned_original(self, t: Any, value: Slot, guard: int | None, site: CallSite | None) -> None:
        """A module call returned ``t`` as ``value``, what its first pass-through call was given
        (the call's return loads the tensor under a name no result was bound to): its caller got that."""
        chain = self._chain(t)
        if not chain or chain[0].before != value or site is None:
            return
        chain[0].originals.append(self._delivery(guard, site))

    def _delivery(self, guard: int | None, site: CallSite | None) -> Delivery:
        if site is None:
            return Delivery(guard, 0, None, 0, ESCAPED)
        frame, code, offset = site
        kind, names = self._consumer(code, offset)
        return Delivery(guard, frame, code, offset, kind, names)

    def _facts(self, code: Any) -> _Code | None:
        seen = self._code_seen.get(id(code))
        if seen is None or seen[0] is not code:
            seen = self._code_seen[id(code)] = (code, _code_facts(code))
        return seen[1]

    def _consumer(self, code: Any, offset: int) -> tuple[str, tuple[str, ...]]:
        """Where the result of the call at ``offset`` went: the instructions that follow it."""
        facts = self._facts(code)
        if facts is None:
            return ESCAPED, ()
        key = ("consumer", offset)  # a call site answers the same each time it runs
        known = facts.answers.get(key)
        if known is None:
            known = facts.answers[key] = _consumer_of(facts, code, offset)
        return known

    # -- reading ------------------------------------------------------------------------

    def _find(self, t: Any, value: Slot) -> Passed | None:
        return next((p for p in reversed(self._chain(t)) if p.node == value), None)

    def resolve(self, t: Any, value: Slot, returning: int | None = None) -> Slot:
        """The value a reader running now reads when ``t`` holds pass-through ``value``:
        ``value`` if the reader got the call's result, else what the call was given.
        ``returning``: the reader is module call ``returning``'s return."""
        chain = self._chain(t)
        if not chain or chain[-1].node != value:
            return value
        running = set(self._running())
        if returning is None and not running:
            returning = 0  # the model's result, read after its call: what the root call returned
        frames = _Frames(sys._getframe(1))
        # Latest first: ``z = ident(drop(x))`` (a chain) and ``y = drop(x); z = ident(x)`` (siblings).
        for passed in reversed(chain):
            if any(self._reads_through(d, running, frames, returning, t) for d in passed.deliveries):
                return passed.node
        first = chain[0]
        if any(self._reads_through(d, running, frames, returning, t) for d in first.originals):
            return first.before
        # No path of the result is seen to reach the reader. The reader reads what the call was
        # given only if a frame that held it then loads it now under a name the result is not
        # bound to (``short(x)`` beside ``block(x)``); anywhere else (a hook's list, a tuple of
        # hidden states built by a decorator) the tensor was passed on after the call: its result,
        # unless a hook of a call that was given the tensor kept it before the pass-through ran.
        if self._reads_before(chain, frames, t, returning, running):
            return chain[0].before
        kept = self.hooked.kept(t, [passed.node for passed in chain])
        return kept if kept is not None else chain[-1].node

    def _frames_made_by(self) -> dict[int, int]:
        """Id of each frame that made a module call running now -> the call running that frame."""
        running = self._running()
        made_by = {}
        for outer, inner in zip(running, running[1:]):
            site = self._call_sites.get(inner)
            if site is not None:
                made_by[site[0]] = outer
        return made_by

    def _reads_before(
        self, chain: list[Passed], frames: _Frames, t: Any, returning: int | None, running: set[int]
    ) -> bool:
        """A holder of the tensor (see ``Passed.holders``) running now loads it, for the reader,
        under a name that holds it and that no delivery of the result bound."""
        seen: set[int] = set()
        for passed in chain:
            for key, code, names, guard in passed.holders:
                if key in seen:
                    continue
                seen.add(key)
                # A frame whose call has returned left its address to the next (CvT's next layer).
                frame = frames.get(key) if guard is None or guard in running else None
                if frame is not None and frame.f_code is code:
                    if self._loads_original(frame, chain, frames, t):
                        return True
                elif returning is not None and self._returns_original(chain, returning, key, code, names):
                    return True
        return False

    def _returns_original(
        self, chain: list[Passed], returning: int, key: int, code: Any, names: tuple[str, ...]
    ) -> bool:
        """Module call ``returning`` ran the frame ``key`` that held the tensor as ``names``: a
        ``return`` of its code loads one of them (or a variable assigned from one), no result."""
        facts = self._facts(code)
        if facts is None:
            return False
        made = [d for p in chain for d in p.deliveries if d.guard == returning and d.frame == key and d.code is code]
        if not made:
            return False
        start = facts.at(made[0].offset)
        results = {n for d in made if d.kind == STORED for n in d.names}
        for i, inst in enumerate(facts.instructions):
            span = _span(inst) if inst.opname in _RETURNS else None
            if span is None:
                continue
            moved = set(assigned_on(facts.instructions, start, i, names))
            held = moved - set(assigned_on(facts.instructions, start, i, tuple(results)))
            if held and _loads(facts, i, span, tuple(held), anywhere=True):
                return True
        return False

    def _loads_original(self, frame: Any, chain: list[Passed], frames: _Frames, t: Any) -> bool:
        facts = self._facts(frame.f_code)
        i = facts.at(frame.f_lasti) if facts is not None else None
        reader = _span(facts.instructions[i]) if i is not None else None
        if reader is None:
            return False
        spans = [reader]
        arguments = self._arguments_read(frames.chain, frame, t)
        if arguments is not None:
            spans = argument_spans(frame.f_code, reader, arguments) or spans
        results: set[str] = set()
        for passed in chain:
            for d in passed.deliveries:
                if d.frame == id(frame) and d.code is frame.f_code:
                    if d.kind == INLINE and i > (facts.at(d.offset) or 0) and facts.span(d.offset) is not None and any(
                        _direct(facts, i, span, facts.span(d.offset)) for span in spans
                    ):
                        return False  # the reader reads the call's result inline
                    if d.kind == STORED:
                        results.update(assigned_on(facts.instructions, facts.at(d.offset), i, d.names))
        held = frame.f_locals
        return any(
            name not in results and holds(held.get(name), t)
            for name in _loaded_in(facts, i, spans)
        )

    def _reads_through(
        self, d: Delivery, running: set[int], frames: _Frames, returning: int | None, t: Any
    ) -> bool:
        if d.kind == ESCAPED and not d.superseded:
            return True
        frame = frames.get(d.frame) if d.guard in running else None
        if frame is not None and frame.f_code is d.code:
            got = self._reader_got(d, frame.f_lasti, self._arguments_read(frames.chain, frame, t))
            if got and d.kind == STORED:
                # The reader loads a variable the result was stored in: only if it holds the
                # tensor still (``h = norm(h); h = attn(h)[0]; residual + h`` reads ``residual``).
                return self._still_held(d, frame, t)
            return got
        if d.guard is not None and d.guard == returning:
            return self._returned_by_code(d, anywhere=True)
        if d.guard in running and not d.superseded:
            # A helper function of the running call (``forward_features``) has returned: the
            # caller got the result if the helper's own return is it.
            return self._returned_by_code(d, anywhere=False)
        return not d.superseded and d.kind == RETURNED

    def _still_held(self, d: Delivery, frame: Any, t: Any) -> bool:
        facts = self._facts(d.code)
        i = facts.at(frame.f_lasti)
        key = ("assigned", d.offset, d.names, i)  # a loop reads the same way each pass
        names = facts.answers.get(key)
        if names is None:
            names = facts.answers[key] = assigned_on(facts.instructions, facts.at(d.offset), i, d.names)
        held = frame.f_locals
        # A variable rebound to another tensor holds none of this one; any other value (a
        # ModelOutput, a nested container) may hold it.
        return any(name in held and not (isinstance(held[name], Tensor) and held[name] is not t) for name in names)

    def _arguments_read(self, frames: list[Any], caller: Any, t: Any) -> Arguments | None:
        """Which arguments of the call ``caller`` makes now the code reading reads, where its
        callee's frame loads ``t`` only under its own parameters (``conv1(x)`` in
        ``forward(self, x, shortcut)``); None where it loads ``t`` under another name
        (``next_kv = hidden_states``) or none, the call's every argument."""
        callee = _callee(frames, caller)
        facts = self._facts(callee.f_code) if callee is not None else None
        if facts is None:
            return None
        key = ("names read", callee.f_lasti)
        if key not in facts.answers:
            i = facts.at(callee.f_lasti)
            span = _span(facts.instructions[i]) if i is not None else None
            facts.answers[key] = _loaded_in(facts, i, [span]) if span is not None else ()
        held = callee.f_locals
        return _as_arguments(callee.f_code, [n for n in facts.answers[key] if held.get(n) is t])

    def _reader_got(self, d: Delivery, offset: int, arguments: Arguments | None) -> bool:
        """The frame that got the result now runs the instruction at ``offset``: does it use it?
        ``arguments``: which of that call's arguments the callee reads, where known."""
        if d.kind in (RETURNED, ESCAPED):
            return d.kind == ESCAPED
        facts = self._facts(d.code)
        i = facts.at(offset) if facts is not None else None
        if i is None:
            return True
        key = ("got", d.offset, d.kind, d.names, i, arguments)  # a loop reads the same way each pass
        known = facts.answers.get(key)
        if known is None:
            known = facts.answers[key] = _got(facts, d, i, arguments)
        return known

    def _returned_by_code(self, d: Delivery, anywhere: bool) -> bool:
        """The frame has returned: does a ``return`` of its code carry the result (``anywhere``
        in what it returns, else as the value returned, or in a tuple of them)?"""
        if d.kind in (RETURNED, ESCAPED):
            return True
        facts = self._facts(d.code)
        if facts is None:
            return True
        key = ("returned", d.offset, d.kind, d.names, anywhere)
        known = facts.answers.get(key)
        if known is None:
            known = facts.answers[key] = _returns_it(facts, d, anywhere)
        return known


def _consumer_of(facts: _Code, code: Any, offset: int) -> tuple[str, tuple[str, ...]]:
    """Where the result of the call at ``offset`` went (see ``PassThroughs._consumer``)."""
    i = facts.at(offset)
    if i is None or i + 1 >= len(facts.instructions):
        return ESCAPED, ()
    call_span = facts.span(offset)
    following = facts.instructions[i + 1]
    if following.opname in STORES:
        return STORED, names_of(following)
    if following.opname in _RETURNS:
        return RETURNED, ()
    if following.opname in _ESCAPES or call_span is None:
        return ESCAPED, ()
    # Consumed by an enclosing expression; one that builds a container, unless it is
    # returned, may carry it anywhere.
    contained = False
    following = facts.instructions[i + 1 : i + 400]
    # ``f(g(x), **kw)`` packs its arguments into a tuple and a dict spanning the call itself:
    # arguments of that call, not a container that may carry the result anywhere.
    packed = {_span(inst) for inst in following if inst.opname == "CALL_FUNCTION_EX"}
    for inst in following:
        if inst.opname in STATEMENT_ENDS:
            if inst.opname in STORES and not contained:
                # ``q, k = self.q_norm(q), self.k_norm(k)``: stored, as one item of a tuple
                target = tuple_target(code, call_span)
                if target is not None:
                    return STORED, (target,)
            return (ESCAPED if contained and inst.opname not in _RETURNS else INLINE), ()
        span = _span(inst)
        if (
            span is not None and _contains(span, call_span) and inst.opname.startswith(_CONTAINERS)
            and span not in packed
        ):
            contained = True
    return ESCAPED, ()


def _returns_it(facts: _Code, d: Delivery, anywhere: bool) -> bool:
    """Whether a ``return`` of ``d``'s code carries the result it delivered (see ``_returned_by_code``)."""
    delivered = facts.span(d.offset)
    for i, inst in enumerate(facts.instructions):
        if inst.opname not in _RETURNS:
            continue
        span = _span(inst)
        if span is None:
            return True
        # A module call that returned this tensor: a return that holds the result anywhere (in a
        # tuple, a ModelOutput built by a call) returned it.
        if d.kind == INLINE and delivered is not None:
            if _contains(span, delivered) if anywhere else _direct(facts, i, span, delivered):
                return True
        # Stored: a return that loads the variable, or one assigned from it since (``c = h``,
        # ``acc = acc + (h,)``), as a reader in the frame would.
        held = assigned_on(facts.instructions, facts.at(d.offset), i, d.names) if d.kind == STORED else ()
        if held and _loads(facts, i, span, held, anywhere=anywhere):
            return True
    return False


def _got(facts: _Code, d: Delivery, i: int, arguments: Arguments | None) -> bool:
    """The instruction at index ``i`` of the frame ``d`` delivered to reads the call's result
    (through one of ``arguments`` of the call it makes, where known)."""
    reader = _span(facts.instructions[i])
    if reader is None:
        return True
    spans = [reader]
    if arguments is not None:
        spans = argument_spans(d.code, reader, arguments) or spans
    delivered = facts.span(d.offset) if d.kind == INLINE else None
    if delivered is not None and i <= (facts.at(d.offset) or 0):
        return False  # the call's own site run again (a loop): it reads its arguments, not its result
    names = assigned_on(facts.instructions, facts.at(d.offset), i, d.names) if d.kind == STORED else ()
    for span in spans:
        if d.kind == INLINE:
            if delivered is not None and _direct(facts, i, span, delivered):
                return True
        elif _loads(facts, i, span, names):
            return True
    return False


Arguments = tuple[tuple[int, ...], tuple[str, ...]]
"""(positions, keywords) of a call's arguments the callee reads."""


_CALL_MACHINERY = frozenset({"_call_impl", "_wrapped_call_impl"})
"""Frames between a line calling a module and its ``forward`` (torch's, and our stand-in)."""


def _callee(frames: list[Any], caller: Any) -> Any:
    """The frame of the function ``caller`` is calling now, if it is the user's (or None)."""
    k = next((k for k, f in enumerate(frames) if f is caller), 0)
    for frame in reversed(frames[:k]):
        if frame.f_code.co_name in _CALL_MACHINERY and _source.is_library_file(frame.f_code.co_filename):
            continue
        return None if _source.is_library_file(frame.f_code.co_filename) else frame
    return None


def _as_arguments(code: Any, names: list[str]) -> Arguments | None:
    """``names``, all parameters of ``code``, as the (positions, keywords) of the call that
    passed them; None if one is not a parameter (or there are none)."""
    parameters = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    read = set(names) - {"self"}  # the module the code belongs to, not a tensor argument
    if not read or not read <= set(parameters):
        return None
    bound = 1 if parameters and parameters[0] == "self" else 0
    positions = tuple(sorted(parameters.index(n) - bound for n in read if parameters.index(n) < code.co_argcount))
    return positions, tuple(sorted(read))


def _loaded_in(facts: _Code, reader: int | None, spans: list[tuple[int, int, int, int]]) -> tuple[str, ...]:
    """The variables the instruction at index ``reader`` loads directly as operands within ``spans``."""
    if reader is None:
        return ()
    found: list[str] = []
    for inst in facts.instructions[:reader]:
        if inst.opname in LOADS:
            inner = _span(inst)
            if inner is not None and any(_direct(facts, reader, span, inner) for span in spans):
                found += [n for n in names_of(inst) if n not in found]
    return tuple(found)


def _direct(facts: _Code, reader: int, span: tuple[int, int, int, int], inner: tuple[int, int, int, int]) -> bool:
    """The code at ``inner`` is an operand of the reader at index ``reader`` (spanning ``span``),
    not inside another call among its operands, whose result is a value of its own."""
    if not _contains(span, inner):
        return False
    for inst in facts.instructions[:reader]:
        if inst.opname in CALLS:
            call = _span(inst)
            if call is not None and call not in (span, inner) and _contains(span, call) and _contains(call, inner):
                return False
    return True


def _loads(
    facts: _Code, reader: int, span: tuple[int, int, int, int], names: tuple[str, ...], anywhere: bool = False
) -> bool:
    """The reader at index ``reader`` loads one of ``names`` as an operand (``anywhere`` in its span)."""
    for inst in facts.instructions[:reader]:
        if inst.opname in LOADS and any(n in names for n in names_of(inst)):
            inner = _span(inst)
            if inner is None:
                continue
            if _contains(span, inner) if anywhere else _direct(facts, reader, span, inner):
                return True
    return False


class _Frames:
    """The frames running now, newest first (``chain``), walked only as far as a lookup needs:
    the frame a pass-through's result went to is most often a few frames up."""

    __slots__ = ("chain", "_by_id", "_next")

    def __init__(self, frame: Any) -> None:
        self.chain: list[Any] = []
        self._by_id: dict[int, Any] = {}
        self._next = frame

    def get(self, key: int) -> Any:
        """The running frame whose ``id`` is ``key``, else None."""
        found = self._by_id.get(key)
        while found is None and self._next is not None:
            frame = self._next
            self._next = frame.f_back
            self.chain.append(frame)
            self._by_id[id(frame)] = frame
            if id(frame) == key:
                found = frame
        return found

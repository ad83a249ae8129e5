"""Which variables hand a tensor on (``_passthrough``): read from a function's bytecode, the
variables a statement assigns the tensor itself to, or a container holding it.

``c = h``, ``c = outputs[0]``, ``acc = acc + (h,)`` and ``c = acc[-1]`` hand it on; ``c = h * 2``
and ``c = x @ h`` make another tensor, and so do calls. Each statement's value stack is followed just far enough
to tell these apart; a statement with anything else in it is taken to hand the tensor on if it
loads a variable holding it and calls nothing.
"""

from __future__ import annotations

import dis

STORES = frozenset({"STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL"})
LOADS = frozenset({
    "LOAD_FAST", "LOAD_NAME", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_CLOSURE", "LOAD_FAST_CHECK",
    "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW", "LOAD_FAST_BORROW_LOAD_FAST_BORROW",
})
CALLS = frozenset({"CALL", "CALL_FUNCTION_EX", "CALL_KW"})
STATEMENT_ENDS = frozenset({"POP_TOP", "RETURN_VALUE", "RETURN_CONST"}) | STORES

HOLDS, CONTAINER = "holds", "container"
"""What a stack entry or a variable holds of the tensor: the tensor or something with it in (a
call's result may be either), or a tuple or list the statement built with it in."""
_OPERATORS = frozenset({"BINARY_OP", "COMPARE_OP", "UNARY_NEGATIVE", "UNARY_INVERT", "UNARY_NOT"})
_BUILDS = frozenset({"BUILD_TUPLE", "BUILD_LIST"})
_JOINS = frozenset({"+", "+=", "*", "*="})
"""Operators that join or repeat sequences, and so keep a container's items."""


def names_of(inst: dis.Instruction) -> tuple[str, ...]:
    value = inst.argval
    return tuple(value) if isinstance(value, tuple) else (value,)


def assigned_on(
    instructions: list[dis.Instruction], start: int | None, reader: int, names: tuple[str, ...]
) -> tuple[str, ...]:
    """``names``, and each variable a statement between the call at index ``start`` (and the
    store of its result, which follows it) and ``reader`` hands the tensor they hold on to
    (straight-line code: a later loop pass keeps ``names``)."""
    if start is None or start + 1 >= reader:
        return names
    held = dict.fromkeys(names, HOLDS)
    statement = _Statement()
    for inst in instructions[start + 2 : reader]:
        if inst.opname in STORES:
            kind = statement.stored()
            if kind is not None:
                # Never dropped when rebound: the code between may not have run (an ``if``), and
                # a variable rebound to another tensor does not hold this one anyway.
                held.setdefault(inst.argval, kind)
            statement = _Statement()
        elif inst.opname in STATEMENT_ENDS:
            statement = _Statement()
        else:
            statement.run(inst, held)
    return tuple(held)


class _Statement:
    """One statement's value stack, as far as it is followed (``stack`` is None past that)."""

    def __init__(self) -> None:
        self.stack: list[str | None] | None = []
        self.loads = self.calls = False

    def run(self, inst: dis.Instruction, held: dict[str, str]) -> None:
        op = inst.opname
        if op in LOADS:
            found = [held.get(n) for n in names_of(inst)]
            self.loads = self.loads or any(found)
            self._push(*found)
        elif op in CALLS:
            self.calls, self.stack = True, None
        elif op == "LOAD_CONST":
            self._push(None)
        elif op in _BUILDS and isinstance(inst.arg, int):
            items = self._pop(inst.arg)
            self._push(CONTAINER if items and any(items) else None)
        elif op in _OPERATORS or op == "BINARY_SUBSCR":
            operands = self._pop(1 if op.startswith("UNARY") else 2)
            if operands is None:
                return
            if op == "BINARY_SUBSCR" or (op == "BINARY_OP" and inst.argrepr == "[]"):
                self._push(HOLDS if operands[0] else None)  # an item of what holds it
            elif op == "BINARY_OP" and inst.argrepr in _JOINS and CONTAINER in operands:
                self._push(CONTAINER)  # ``acc + (h,)``
            else:
                self._push(None)  # arithmetic: another tensor (``h * 2``, ``x @ h``)
        elif op not in ("NOP", "RESUME", "CACHE", "EXTENDED_ARG"):
            self.stack = None

    def stored(self) -> str | None:
        """What the value the statement stores holds of the tensor, if any."""
        if self.stack is not None and len(self.stack) == 1:
            return self.stack[0]
        return HOLDS if self.loads and not self.calls else None

    def _push(self, *kinds: str | None) -> None:
        if self.stack is not None:
            self.stack.extend(kinds)

    def _pop(self, n: int) -> list[str | None] | None:
        if self.stack is None or len(self.stack) < n:
            self.stack = None
            return None
        items = self.stack[len(self.stack) - n :]
        del self.stack[len(self.stack) - n :]
        return items

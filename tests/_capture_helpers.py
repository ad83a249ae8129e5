"""Reading a captured graph as plain data: ops in order and who feeds whom.

Values are labelled so that tests can state a graph by hand: ``op3`` is the fourth
op, ``op3.1`` its second output, ``input:args[0]``, ``param:l.weight``,
``buffer:bn.running_mean`` and ``constant`` name the leaves.
"""

from __future__ import annotations

from torchatlas import GraphIR


def load_coolcnn():
    """The bundled example module (``CoolCNN`` and ``example_input``)."""
    from torchatlas import _example

    return _example


def op_ids(ir: GraphIR) -> dict[str, int]:
    return {n.id: k for k, n in enumerate(ir.ops())}


def value_label(ir: GraphIR, node_id: str, slot: int = 0) -> str:
    node = ir.node(node_id)
    if node.kind == "op":
        k = op_ids(ir)[node_id]
        return f"op{k}" if slot == 0 else f"op{k}.{slot}"
    if node.kind == "constant":
        return "constant"
    return f"{node.kind}:{node.path}"


def wiring(ir: GraphIR) -> list[tuple[str, tuple[str, ...]]]:
    """Each op in execution order as (target, labels of the values it read)."""
    return [
        (n.target, tuple(value_label(ir, r.node, r.slot) for r in n.inputs))
        for n in ir.ops()
    ]


def computed_wiring(ir: GraphIR) -> list[tuple[str, tuple[str, ...]]]:
    """:func:`wiring` without the pass-through nodes of module calls that returned their input.

    This is the data flow a tracer that sees only tensor ops (make_fx, torch.export) records:
    a reader of a passed-through value reads what the pass-through node read.
    """
    ops = [n for n in ir.ops() if not n.meta.get("passthrough")]
    number = {n.id: k for k, n in enumerate(ops)}
    through = {n.id: n.inputs[0] for n in ir.ops() if n.meta.get("passthrough")}

    def label(ref) -> str:
        while ref.node in through:
            ref = through[ref.node]
        node = ir.node(ref.node)
        if node.kind == "op":
            k = number[ref.node]
            return f"op{k}" if ref.slot == 0 else f"op{k}.{ref.slot}"
        return "constant" if node.kind == "constant" else f"{node.kind}:{node.path}"

    return [(n.target, tuple(label(r) for r in n.inputs)) for n in ops]


def targets(ir: GraphIR) -> list[str]:
    return [n.target for n in ir.ops()]


def outputs(ir: GraphIR) -> dict[str, str]:
    """Output path -> label of the value returned there."""
    return {
        n.path: value_label(ir, n.inputs[0].node, n.inputs[0].slot) for n in ir.nodes if n.kind == "output"
    }


def ops_in(ir: GraphIR, path: str) -> list[str]:
    """Targets of the ops recorded directly in the module calls at ``path``."""
    scope_ids = {s.id for s in ir.scopes if s.path == path}
    return [n.target for n in ir.ops() if n.scope in scope_ids]


def leaf_labels(ir: GraphIR) -> list[str]:
    return [value_label(ir, n.id) for n in ir.nodes if n.kind in ("input", "param", "buffer", "constant")]

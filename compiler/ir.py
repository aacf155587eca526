"""Graph IR: tensors and ops. A graph is data only; `reference.py` executes it in
numpy, the phases compile it. Tensor kinds: input (streamed from the host per run),
param (weights, streamed once, resident in their homes), act (on-device only),
output (read back by the host)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .target import DTYPE_BYTES

KINDS = ("input", "param", "act", "output")


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str              # "f16" | "fp8" (e4m3) | "f32"
    kind: str
    # scale of FP8 data: value = stored * scale; a tuple for a tensor of the Repeat body
    # (a sequence or an activation) holds one scale per iteration (member): see member()
    scale: float | tuple[float, ...] = 1.0

    @property
    def nbytes(self) -> int:
        n = DTYPE_BYTES[self.dtype]
        for d in self.shape:
            n *= d
        return n


def member(scale, i: int) -> float:
    """Iteration i's scale: entry i of a per-member tuple, or the one scalar."""
    return scale[i] if isinstance(scale, tuple) else scale


@dataclass(frozen=True)
class Op:
    kind: str                       # "matmul"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple = ()               # sorted (key, value) pairs: hashable and deterministic

    def attr(self, name: str, default=None):
        return dict(self.attrs).get(name, default)

    def at(self, i: int) -> "Op":
        """The op as iteration i runs it: a per-member `scale` attr (tuple) resolved."""
        if not isinstance(self.attr("scale"), tuple):
            return self
        return Op(self.kind, self.inputs, self.outputs,
                  tuple((k, member(v, i) if k == "scale" else v) for k, v in self.attrs))


@dataclass(frozen=True)
class Repeat:
    """Ops [first, stop) are a loop body run `count` times (stop 0: to the end; the
    default body is the whole op list); the ops before it run once before, those
    after once after. `carried` pairs each body output with the body input it feeds in
    the next iteration (after the last, the output's value is the input's: ops after
    the body read it there). A sequence is a parameter with one member per iteration:
    its tensor shape is a member's, its data is stacked [count, *shape]."""
    count: int
    carried: tuple[tuple[str, str], ...]
    sequences: tuple[str, ...]
    first: int = 0
    stop: int = 0

    def span(self, nops: int) -> tuple[int, int]:
        return self.first, self.stop or nops


@dataclass
class Graph:
    name: str
    tensors: dict[str, Tensor] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    repeat: Repeat | None = None
    meta: dict = field(default_factory=dict)   # model facts for metrics (e.g. ignored_tensors)

    def body(self) -> tuple[int, int]:
        """Op index range [first, stop) of the Repeat body (all ops without a Repeat)."""
        return self.repeat.span(len(self.ops)) if self.repeat else (0, len(self.ops))

    def add(self, t: Tensor) -> Tensor:
        if t.name in self.tensors:
            raise ValueError(f"tensor {t.name!r} defined twice")
        if t.kind not in KINDS:
            raise ValueError(f"tensor {t.name!r}: kind {t.kind!r} not one of {KINDS}")
        self.tensors[t.name] = t
        return t

    def op(self, kind: str, inputs, outputs, **attrs) -> Op:
        for n in (*inputs, *outputs):
            if n not in self.tensors:
                raise ValueError(f"op {kind}: unknown tensor {n!r}")
        o = Op(kind, tuple(inputs), tuple(outputs), tuple(sorted(attrs.items())))
        self.ops.append(o)
        return o

    def consumers(self, name: str) -> list[int]:
        return [i for i, o in enumerate(self.ops) if name in o.inputs]

    def of_kind(self, kind: str) -> list[Tensor]:
        return [t for t in self.tensors.values() if t.kind == kind]

"""The rewrite engine every pass is written on: patterns (`Pat`), rule sets (`Rules`) and `graph_rewrite`.

A pass is data: a list of `(Pat, fn)` pairs. `fn` receives the pattern's named captures as keyword
arguments (and `ctx=` when it declares a parameter named `ctx`) and returns the replacement UOp, or
None when the rule does not apply after all. `graph_rewrite` applies a rule set to a whole graph
until no rule matches anywhere, visiting each node once per call (UOps are hash-consed, so a shared
subgraph is one node and is rewritten once), with an explicit stack so graph depth is unbounded.

  rules = Rules([
    (Pat.var("x") + Pat.const(dtypes.index, 0), lambda x: x),
    (Pat(Ops.MUL, src=(Pat.var("x"), Pat.cvar("c")), commutative=True), fold_mul),
  ])
  new_sink = graph_rewrite(sink, rules, bottom_up=True)
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, Iterator, Mapping

from uopc.dtype import DType
from uopc.ops import GroupOp, Ops
from uopc.uop import UOp, _arg_key

Binds = dict[str, UOp]
_ANY = object()  # "arg not constrained": None is a real arg value


def _as_set(x) -> frozenset | None:
  if x is None: return None
  return frozenset(x) if isinstance(x, (set, frozenset, tuple, list)) else frozenset((x,))


class Pat:
  """A pattern over UOps.

  op: an Ops or a set of them; dtype: a DType or a set (a vector dtype matches its scalar too);
  arg: a value (compared like hash-consing does: 1 is not True, 0.0 is not -0.0) or a predicate on the arg;
  src: None (any sources), a tuple of Pats (exactly these, or a prefix of the sources when `rest=True`),
       or a single Pat that every source must match (any number of sources);
  commutative: for a binary op of GroupOp.Commutative, also try the sources in the other order;
  name: capture the matched UOp under this name; a name used twice must bind the same UOp;
  where: a predicate on the matched UOp for anything else (its shape, its number of sources, ...).
  """
  __slots__ = ("ops", "dtypes", "arg", "src", "rest", "commutative", "name", "where", "_one_op")

  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: "Pat | tuple[Pat, ...] | None" = None, arg: Any = _ANY, name: str | None = None,
               rest: bool = False, commutative: bool = False, where: Callable[[UOp], bool] | None = None):
    self.ops, self.dtypes, self.arg, self.src = _as_set(op), _as_set(dtype), arg, src
    self.rest, self.commutative, self.name, self.where = rest, commutative, name, where
    # a single op is checked by identity: hashing an Enum member runs Python code
    self._one_op = next(iter(self.ops)) if self.ops is not None and len(self.ops) == 1 else None
    if rest and not isinstance(src, tuple): raise ValueError("rest=True needs a tuple of source patterns")
    if commutative and not (isinstance(src, tuple) and len(src) == 2):
      raise ValueError("commutative=True needs a pair of source patterns")

  # ---- constructors ----------------------------------------------------------------------------
  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> "Pat":
    """Any UOp (of `dtype` when given), captured as `name`."""
    return Pat(dtype=dtype, name=name)

  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> "Pat":
    """Any CONST (of `dtype` when given), captured as `name`."""
    return Pat(Ops.CONST, dtype, name=name)

  @staticmethod
  def const(dtype: DType | Iterable[DType] | None, value: Any, name: str | None = None) -> "Pat":
    """A CONST equal to `value`. Numeric equality, so `Pat.const(FLOATS, 1)` matches 1.0;
    bools only match bools, and 0 matches both zeros of a float."""
    is_bool = isinstance(value, bool)
    return Pat(Ops.CONST, dtype, arg=lambda a: isinstance(a, bool) == is_bool and a == value, name=name)

  def alu(self, op: Ops, *others: "Pat", name: str | None = None) -> "Pat":
    """The pattern `op(self, *others)`; binary commutative ops match either order."""
    return Pat(op, src=(self,) + others, name=name, commutative=op in GroupOp.Commutative and len(others) == 1)

  def __add__(self, other: "Pat") -> "Pat": return self.alu(Ops.ADD, other)
  def __mul__(self, other: "Pat") -> "Pat": return self.alu(Ops.MUL, other)
  def __floordiv__(self, other: "Pat") -> "Pat": return self.alu(Ops.IDIV, other)
  def __mod__(self, other: "Pat") -> "Pat": return self.alu(Ops.MOD, other)
  def __and__(self, other: "Pat") -> "Pat": return self.alu(Ops.AND, other)
  def __or__(self, other: "Pat") -> "Pat": return self.alu(Ops.OR, other)
  def __xor__(self, other: "Pat") -> "Pat": return self.alu(Ops.XOR, other)

  # ---- matching --------------------------------------------------------------------------------
  def match(self, u: UOp, binds: Binds | None = None) -> Iterator[Binds]:
    """Every way `u` matches, as the captures of each (several only with commutative patterns)."""
    if not self._node_ok(u): return
    if self.arg is not _ANY and not self._arg_matches(u.arg): return
    binds = {} if binds is None else binds
    if self.name is not None:
      if (bound := binds.get(self.name)) is not None:
        if bound is not u: return
      else: binds = {**binds, self.name: u}
    if self.where is not None and not self.where(u): return
    if self.src is None: yield binds
    elif isinstance(self.src, Pat): yield from _match_seq((self.src,) * len(u.src), u.src, binds)
    else: yield from self._match_tuple(u, binds)

  def _node_ok(self, u: UOp) -> bool:
    if self._one_op is not None: op_ok = u.op is self._one_op
    else: op_ok = self.ops is None or u.op in self.ops
    return op_ok and (self.dtypes is None or u.dtype in self.dtypes or u.dtype.scalar in self.dtypes)

  def could_match(self, u: UOp) -> bool:
    """A cheap necessary condition for a match (op, dtype, arity and the sources' ops and dtypes),
    so most rules are rejected without starting the full match."""
    if not self._node_ok(u): return False
    if not isinstance(self.src, tuple): return True
    pats, srcs = self.src, u.src
    if len(srcs) != len(pats) and not (self.rest and len(srcs) >= len(pats)): return False
    for p, s in zip(pats, srcs):  # a loop, not all(genexpr): closing a generator early raises GeneratorExit in it
      if not p._node_ok(s): break
    else: return True
    return self.commutative and len(srcs) == 2 and pats[0]._node_ok(srcs[1]) and pats[1]._node_ok(srcs[0])

  def _arg_matches(self, arg: Any) -> bool:
    return self.arg(arg) if callable(self.arg) else _arg_key(arg) == _arg_key(self.arg)

  def _match_tuple(self, u: UOp, binds: Binds) -> Iterator[Binds]:
    pats, srcs = self.src, u.src
    if len(srcs) != len(pats) and not (self.rest and len(srcs) >= len(pats)): return
    yield from _match_seq(pats, srcs, binds)
    if self.commutative and u.op in GroupOp.Commutative and len(srcs) == 2 and srcs[0] is not srcs[1]:
      yield from _match_seq(pats, (srcs[1], srcs[0]), binds)

  def __repr__(self) -> str:
    ops = "|".join(sorted(o.name for o in self.ops)) if self.ops else "*"
    return f"Pat({ops}{f' name={self.name!r}' if self.name else ''})"


def _match_seq(pats: tuple[Pat, ...], srcs: tuple[UOp, ...], binds: Binds) -> Iterator[Binds]:
  if not pats:
    yield binds
    return
  for b in pats[0].match(srcs[0], binds): yield from _match_seq(pats[1:], srcs[1:], b)


class Rules:
  """An ordered list of (Pat, fn) rules, indexed by op. The first rule whose fn returns a UOp wins."""

  def __init__(self, rules: list[tuple[Pat, Callable[..., UOp | None]]]):
    self.rules = list(rules)
    self._wants_ctx = [("ctx" in inspect.signature(fn).parameters) for _, fn in self.rules]
    self._by_op: dict[Ops, list[int]] = {}

  def __add__(self, other: "Rules") -> "Rules": return Rules(self.rules + other.rules)
  def __len__(self) -> int: return len(self.rules)

  def _candidates(self, op: Ops) -> list[int]:
    """The rules whose pattern could match a node of `op`, in rule order (computed once per op)."""
    if (hit := self._by_op.get(op)) is None:
      hit = self._by_op[op] = [i for i, (p, _) in enumerate(self.rules) if p.ops is None or op in p.ops]
    return hit

  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    """One rewrite step at `u`: the first rule result that is a different UOp, else None."""
    for i in self._candidates(u.op):
      pat, fn = self.rules[i]
      if not pat.could_match(u): continue
      for binds in pat.match(u):
        r = fn(**binds, ctx=ctx) if self._wants_ctx[i] else fn(**binds)
        if r is not None and r is not u: return r
    return None


def substitute(root: UOp, mapping: Mapping[UOp, UOp]) -> UOp:
  """`root` with every node in `mapping` replaced once, sharing untouched subgraphs. One pass, not a
  rewrite to a fixed point: a replacement is used as given, never substituted into (Callify relies on
  it: an argument may itself be a PARAM equal to another formal of the body)."""
  done: dict[UOp, UOp] = {}
  for u in root.toposort():
    done[u] = mapping.get(u) or (u.replace(src=tuple(done[s] for s in u.src)) if u.src else u)
  return done[root]


def graph_rewrite(sink: UOp, rules: Rules, bottom_up: bool = False, ctx: Any = None) -> UOp:
  """Rewrite the graph under `sink` until no rule of `rules` matches any node; returns the new root.

  Top-down (the default): rewrite a node until no rule applies to it, then its sources.
  Bottom-up: rewrite the sources first, then the node (with its new sources); a rule's result is
  rewritten again in the same way, until no rule applies. Either way, a node whose sources changed is
  rebuilt and offered to the rules again, so the result is a fixed point of the whole rule set."""
  return _Rewrite(rules, bottom_up, ctx).run(sink)


class _Rewrite:
  """One graph_rewrite call. `done` maps each visited node to its final form (and each final form to
  itself, so a result met again is not walked again); `entered` holds nodes whose rewrite started:
  meeting one again before it is done means the rules build a node out of its own rewrite (a loop)."""

  def __init__(self, rules: Rules, bottom_up: bool, ctx: Any):
    self.rules, self.bottom_up, self.ctx = rules, bottom_up, ctx
    self.done: dict[UOp, UOp] = {}
    self.entered: set[UOp] = set()

  def run(self, root: UOp) -> UOp:
    # stack entries (node, stage, current form): stage 0 enters a node, 1 rebuilds it from its
    # rewritten sources, 2 links it to the result of the node it was rewritten into
    stack: list[tuple[UOp, int, UOp]] = [(root, 0, root)]
    while stack:
      n, stage, cur = stack.pop()
      if stage == 0:
        if n in self.done: continue
        if n in self.entered: raise RuntimeError(f"graph_rewrite: rules rewrite a node into one containing itself: {n}")
        self.entered.add(n)
        if not self.bottom_up:
          cur = self._node_fixed_point(n)
          if cur in self.done:
            self._finish(n, cur, self.done[cur])
            continue
        stack.append((n, 1, cur))
        stack.extend((s, 0, s) for s in reversed(cur.src) if s not in self.done)
      elif stage == 1:
        new_src = tuple(self.done[s] for s in cur.src)
        if new_src != cur.src: nxt = UOp(cur.op, cur.dtype, new_src, cur.arg, cur.tag)
        elif not self.bottom_up or (nxt := self._step(cur)) is None:
          self._finish(n, cur, cur)
          continue
        stack.append((n, 2, nxt))
        stack.append((nxt, 0, nxt))
      else: self._finish(n, cur, self.done[cur])
    return self.done[root]

  def _step(self, u: UOp) -> UOp | None: return self.rules.rewrite(u, self.ctx)

  def _node_fixed_point(self, u: UOp) -> UOp:
    """Top-down: apply rules at `u` alone until none applies (or the result is a node already done)."""
    seen = {u}
    while u not in self.done and (r := self._step(u)) is not None:
      if r in seen: raise RuntimeError(f"graph_rewrite: rules loop at {r}")
      seen.add(r)
      u = r
    return u

  def _finish(self, n: UOp, cur: UOp, result: UOp) -> None:
    for u in (n, cur, result): self.done[u] = result

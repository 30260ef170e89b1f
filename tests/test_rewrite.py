"""The rewrite engine: each Pat feature, Rules dispatch and composition, graph_rewrite's traversal orders,
fixed point, caching of shared subgraphs, deep graphs and loop detection."""
import pytest

from uopc.dtype import dtypes
from uopc.ops import Ops
from uopc.rewrite import Pat, Rules, graph_rewrite
from uopc.uop import UOp

I = dtypes.index
F = dtypes.float32


def var(name: str, dt=I) -> UOp: return UOp(Ops.DEFINE_VAR, dt, (), (name, 0, 10))
def c(v, dt=I) -> UOp: return UOp.const(dt, v)


X, Y = var("x"), var("y")


def matches(pat: Pat, u: UOp) -> list[dict]: return list(pat.match(u))


# ---- Pat ----------------------------------------------------------------------------------------------
def test_op_and_op_set():
  add = X.alu(Ops.ADD, Y)
  assert matches(Pat(Ops.ADD), add) == [{}]
  assert matches(Pat(Ops.MUL), add) == []
  assert matches(Pat({Ops.MUL, Ops.ADD}), add) == [{}]
  assert matches(Pat(), add) == [{}]


def test_dtype_and_dtype_set_and_vector_scalar():
  assert matches(Pat(dtype=I), X) == [{}]
  assert matches(Pat(dtype=F), X) == []
  assert matches(Pat(dtype={F, I}), X) == [{}]
  vec = UOp(Ops.STACK, F.vec(4), (c(1.0, F),) * 4)
  assert matches(Pat(dtype=F), vec) == [{}]
  assert matches(Pat(dtype=F.vec(2)), vec) == []


def test_arg_value_is_strict_and_arg_predicate():
  assert matches(Pat(Ops.CONST, arg=1), c(1)) == [{}]
  assert matches(Pat(Ops.CONST, arg=1), c(True, dtypes.bool)) == []  # 1 is not True
  assert matches(Pat(Ops.CONST, arg=0.0), c(-0.0, F)) == []          # 0.0 is not -0.0
  assert matches(Pat(Ops.CONST, arg=None), c(1)) == []
  assert matches(Pat(Ops.CONST, arg=lambda a: a > 5), c(7)) == [{}]
  assert matches(Pat(Ops.CONST, arg=lambda a: a > 5), c(3)) == []


def test_const_and_cvar():
  assert matches(Pat.const(F, 1), c(1.0, F)) == [{}]  # numeric equality across int/float
  assert matches(Pat.const(I, 1), c(2)) == []
  assert matches(Pat.const(None, 1), c(True, dtypes.bool)) == []
  assert matches(Pat.const(dtypes.bool, True), c(True, dtypes.bool)) == [{}]
  assert matches(Pat.const(F, 1), c(1)) == []  # dtype filter
  assert matches(Pat.cvar("k"), c(3)) == [{"k": c(3)}]
  assert matches(Pat.cvar("k"), X) == []
  assert matches(Pat.cvar("k", F), c(3)) == []


def test_exact_src_tuple():
  add = X.alu(Ops.ADD, c(1))
  assert matches(Pat(Ops.ADD, src=(Pat.var("a"), Pat.cvar("b"))), add) == [{"a": X, "b": c(1)}]
  assert matches(Pat(Ops.ADD, src=(Pat.cvar("b"), Pat.var("a"))), add) == []
  assert matches(Pat(Ops.ADD, src=(Pat.var("a"),)), add) == []  # wrong length


def test_src_prefix_with_rest():
  buf = UOp(Ops.PARAM, F.ptr(), (), (0, "a"))
  idx = UOp(Ops.INDEX, F.ptr(), (buf, X))
  gated = UOp(Ops.LOAD, F, (idx, c(0.0, F), X.alu(Ops.CMPLT, c(3))))
  plain = UOp(Ops.LOAD, F, (idx,))
  pat = Pat(Ops.LOAD, src=(Pat(Ops.INDEX, name="i"),), rest=True)
  assert matches(pat, gated) == [{"i": idx}] and matches(pat, plain) == [{"i": idx}]
  assert matches(Pat(Ops.LOAD, src=(Pat(Ops.INDEX),)), gated) == []


def test_src_any_number_of():
  every_const = Pat(Ops.STACK, src=Pat(Ops.CONST))
  assert matches(every_const, UOp(Ops.STACK, I.vec(3), (c(1), c(2), c(3)))) == [{}]
  assert matches(every_const, UOp(Ops.STACK, I.vec(2), (c(1), X))) == []
  assert matches(Pat(Ops.SINK, src=Pat(Ops.CONST)), UOp(Ops.SINK)) == [{}]  # zero sources


def test_commutative_tries_both_orders_only_when_asked():
  add = c(1).alu(Ops.ADD, X)
  const_right = (Pat.var("a"), Pat.cvar("b"))
  assert matches(Pat(Ops.ADD, src=const_right), add) == []
  assert matches(Pat(Ops.ADD, src=const_right, commutative=True), add) == [{"a": X, "b": c(1)}]
  both = matches(Pat(Ops.ADD, src=(Pat.var("a"), Pat.var("b")), commutative=True), X.alu(Ops.ADD, Y))
  assert both == [{"a": X, "b": Y}, {"a": Y, "b": X}]


def test_commutative_ignored_for_non_commutative_op():
  sub = c(1).alu(Ops.IDIV, X)
  assert matches(Pat(Ops.IDIV, src=(Pat.var("a"), Pat.cvar("b")), commutative=True), sub) == []


def test_operator_sugar_is_commutative_for_commutative_ops():
  assert matches(Pat.var("a") + Pat.cvar("b"), c(2).alu(Ops.ADD, X)) == [{"a": X, "b": c(2)}]
  assert matches(Pat.var("a") // Pat.cvar("b"), c(2).alu(Ops.IDIV, X)) == []


def test_same_name_binds_same_uop():
  twice = Pat(Ops.ADD, src=(Pat.var("a"), Pat.var("a")))
  assert matches(twice, X.alu(Ops.ADD, X)) == [{"a": X}]
  assert matches(twice, X.alu(Ops.ADD, Y)) == []
  nested = (Pat.var("a") // Pat.var("b")) * Pat.var("b")
  assert len(matches(nested, X.alu(Ops.IDIV, c(4)).alu(Ops.MUL, c(4)))) == 1
  assert matches(nested, X.alu(Ops.IDIV, c(4)).alu(Ops.MUL, c(8))) == []


def test_where_predicate():
  two_srcs = Pat(where=lambda u: len(u.src) == 2, name="u")
  assert matches(two_srcs, X.alu(Ops.ADD, Y)) == [{"u": X.alu(Ops.ADD, Y)}]
  assert matches(two_srcs, X) == []


def test_bad_pattern_shapes_are_refused():
  with pytest.raises(ValueError): Pat(Ops.ADD, src=Pat(), rest=True)
  with pytest.raises(ValueError): Pat(Ops.ADD, src=(Pat(),), commutative=True)


# ---- Rules --------------------------------------------------------------------------------------------
def test_first_matching_rule_wins_and_none_falls_through():
  rules = Rules([(Pat(Ops.ADD), lambda: None), (Pat(Ops.ADD), lambda: c(1)), (Pat(Ops.ADD), lambda: c(2))])
  assert rules.rewrite(X.alu(Ops.ADD, Y)) is c(1)
  assert rules.rewrite(X.alu(Ops.MUL, Y)) is None


def test_rule_returning_its_input_is_no_rewrite():
  assert Rules([(Pat(Ops.ADD, name="u"), lambda u: u)]).rewrite(X.alu(Ops.ADD, Y)) is None


def test_rules_indexed_by_op_try_only_candidates():
  tried = []
  def spy(name):
    return lambda u: tried.append(name)
  rules = Rules([(Pat(Ops.MUL, name="u"), spy("mul")), (Pat({Ops.ADD, Ops.MAX}, name="u"), spy("add|max")),
                 (Pat(name="u"), spy("any"))])
  rules.rewrite(X.alu(Ops.ADD, Y))
  assert tried == ["add|max", "any"]


def test_rules_compose_with_plus():
  a = Rules([(Pat(Ops.ADD), lambda: c(1))])
  b = Rules([(Pat(Ops.MUL), lambda: c(2))])
  both = a + b
  assert len(both) == 2
  assert both.rewrite(X.alu(Ops.ADD, Y)) is c(1) and both.rewrite(X.alu(Ops.MUL, Y)) is c(2)
  assert a.rewrite(X.alu(Ops.MUL, Y)) is None  # the operands are unchanged


def test_ctx_passed_to_rules_that_ask():
  seen = []
  def with_ctx(u, ctx): ctx.append(u.op)
  def without_ctx(u): seen.append("plain")
  rules = Rules([(Pat(Ops.ADD, name="u"), with_ctx), (Pat(Ops.ADD, name="u"), without_ctx)])
  log: list = []
  graph_rewrite(X.alu(Ops.ADD, Y), rules, ctx=log)
  assert log == [Ops.ADD] and seen == ["plain"]


# ---- graph_rewrite -------------------------------------------------------------------------------------
ADD_ZERO = Rules([(Pat.var("x") + Pat.const(I, 0), lambda x: x)])


def test_rewrites_to_a_fixed_point_through_rebuilt_parents():
  # 1 -> 2 at the leaves; only then does the rebuilt ADD(2, 2) match the second rule
  rules = Rules([(Pat.const(I, 1), lambda: c(2)), (Pat(Ops.ADD, src=(Pat.const(I, 2), Pat.const(I, 2))), lambda: c(4))])
  g = UOp(Ops.SINK, dtypes.void, (c(1).alu(Ops.ADD, c(1)),))
  for bottom_up in (False, True):
    assert graph_rewrite(g, rules, bottom_up=bottom_up) is UOp(Ops.SINK, dtypes.void, (c(4),))


def test_result_of_a_rule_is_rewritten_again():
  rules = Rules([(Pat(Ops.MUL, src=(Pat.var("x"), Pat.const(I, 2))), lambda x: x.alu(Ops.ADD, c(0)).alu(Ops.ADD, c(0)))]) + ADD_ZERO
  for bottom_up in (False, True):
    assert graph_rewrite(X.alu(Ops.MUL, c(2)), rules, bottom_up=bottom_up) is X


def visit_order(bottom_up: bool) -> list:
  log: list = []
  def record(u, ctx): ctx.append(u.arg if u.op is Ops.DEFINE_VAR else u.op)
  graph_rewrite(X.alu(Ops.ADD, Y).alu(Ops.MUL, Y), Rules([(Pat(name="u"), record)]), bottom_up=bottom_up, ctx=log)
  return log


def test_top_down_visits_node_before_sources():
  assert visit_order(False) == [Ops.MUL, Ops.ADD, ("x", 0, 10), ("y", 0, 10)]


def test_bottom_up_visits_sources_before_node():
  assert visit_order(True) == [("x", 0, 10), ("y", 0, 10), Ops.ADD, Ops.MUL]


def test_top_down_rewrites_before_looking_below():
  # top-down sees the original parent and rewrites it whole; bottom-up first rewrites the child
  rules = Rules([(Pat(Ops.MUL, src=(Pat(Ops.ADD), Pat.var())), lambda: c(7)), (Pat(Ops.ADD), lambda: c(1))])
  g = X.alu(Ops.ADD, Y).alu(Ops.MUL, Y)
  assert graph_rewrite(g, rules) is c(7)
  assert graph_rewrite(g, rules, bottom_up=True) is c(1).alu(Ops.MUL, Y)


@pytest.mark.parametrize("bottom_up", [False, True])
def test_shared_subgraph_rewritten_once(bottom_up):
  shared = X.alu(Ops.ADD, Y)
  g = UOp(Ops.SINK, dtypes.void, tuple(shared.alu(Ops.MUL, c(k)) for k in range(50)))
  calls = []
  def count(u, ctx):
    if u is shared: ctx.append(u)
  graph_rewrite(g, Rules([(Pat(Ops.ADD, name="u"), count)]), bottom_up=bottom_up, ctx=calls)
  assert len(calls) == 1


def test_diamond_is_rewritten_consistently():
  shared = X.alu(Ops.ADD, c(0))
  g = shared.alu(Ops.MUL, shared)
  assert graph_rewrite(g, ADD_ZERO) is X.alu(Ops.MUL, X)


@pytest.mark.parametrize("bottom_up", [False, True])
def test_deep_chain_of_100k_nodes(bottom_up):
  u = X
  for i in range(100_000): u = u.alu(Ops.ADD, c(0)) if i % 2 else c(0).alu(Ops.ADD, u)
  assert graph_rewrite(u, ADD_ZERO, bottom_up=bottom_up) is X


@pytest.mark.parametrize("bottom_up", [False, True])
def test_deep_chain_rebuilt_without_rewriting(bottom_up):
  u = X
  for i in range(100_000): u = u.alu(Ops.MUL, c(i % 3))
  rules = Rules([(Pat(Ops.DEFINE_VAR), lambda: Y)])
  out = graph_rewrite(u, rules, bottom_up=bottom_up)
  leaf = out
  while leaf.src: leaf = leaf.src[0]
  assert leaf is Y and out.src[1] is u.src[1] and out.op is Ops.MUL


def test_rule_loop_is_an_error_not_a_hang():
  ping_pong = Rules([(Pat.const(I, 1), lambda: c(2)), (Pat.const(I, 2), lambda: c(1))])
  with pytest.raises(RuntimeError):
    graph_rewrite(c(1), ping_pong)
  grows = Rules([(Pat(Ops.DEFINE_VAR, name="x"), lambda x: x.alu(Ops.ADD, c(0)))])
  with pytest.raises(RuntimeError):
    graph_rewrite(X.alu(Ops.MUL, c(3)), grows, bottom_up=True)


def test_untouched_graph_is_returned_as_is():
  g = X.alu(Ops.ADD, Y).alu(Ops.MUL, c(3))
  for bottom_up in (False, True): assert graph_rewrite(g, ADD_ZERO, bottom_up=bottom_up) is g


def test_tag_survives_rebuild():
  tagged = UOp(Ops.MUL, I, (X.alu(Ops.ADD, c(0)), Y), tag="keep")
  assert graph_rewrite(tagged, ADD_ZERO) is UOp(Ops.MUL, I, (X, Y), tag="keep")

"""Values in the LLVM renderer: conversions (CAST, BITCAST, bfloat16 rounding) and arithmetic (ALU ops,
MULACC, comparisons, transcendentals through intrinsics, floor division, THREEFRY), as `_Arithmetic`, a
base of uopc/targets/llvm/render.py's `_Kernel`, whose module docstring states the semantics they keep
(SPEC-NOTES': wrapping integers, truncating IDIV/MOD, no FP contraction, each float16/bfloat16 result
rounded once).
"""
from __future__ import annotations

from uopc.dtype import DType, dtypes
from uopc.ops import FUSED, Ops
from uopc.targets.llvm.types import bits_of, is_signed, mem_type, reg_type
from uopc.uop import UOp

_INTRINSIC = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.POW: "pow"}
_AMDGPU_TRANSCENDENTALS = {Ops.SQRT: {"half", "float", "double"}, Ops.EXP2: {"half", "float"},
                           Ops.LOG2: {"half", "float"}}

# Integer instructions per op: (signed, unsigned); bool uses the unsigned one.
_INT_BINARY = {Ops.ADD: ("add", "add"), Ops.SUB: ("sub", "sub"), Ops.MUL: ("mul", "mul"),
               Ops.IDIV: ("sdiv", "udiv"), Ops.DIV: ("sdiv", "udiv"), Ops.MOD: ("srem", "urem"),
               Ops.XOR: ("xor", "xor"), Ops.OR: ("or", "or"), Ops.AND: ("and", "and"),
               Ops.SHL: ("shl", "shl"), Ops.SHR: ("ashr", "lshr")}
_BOOL_BINARY = {Ops.ADD: "or", Ops.SUB: "xor", Ops.MUL: "and", Ops.MAX: "or", Ops.XOR: "xor", Ops.OR: "or", Ops.AND: "and"}
_FLOAT_BINARY = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.DIV: "fdiv"}
# Comparisons: (signed icmp, unsigned icmp, fcmp). CMPGE/CMPLE are NOT of a CMPLT (seed 000), hence
# unordered; CMPEQ is NOT CMPNE, hence ordered.
_COMPARE = {Ops.CMPLT: ("slt", "ult", "olt"), Ops.CMPNE: ("ne", "ne", "une"), Ops.CMPGT: ("sgt", "ugt", "ogt"),
            Ops.CMPGE: ("sge", "uge", "uge"), Ops.CMPLE: ("sle", "ule", "ule"), Ops.CMPEQ: ("eq", "eq", "oeq")}
# ops whose bfloat16 result must be rounded: the rest (MAX, NEG, TRUNC, WHERE, ...) give representable values
_ROUNDING = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.DIV, Ops.RECIP, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW})
THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _splat(lit: str, ty: str) -> str:
  """The constant `lit` of the scalar of `ty` in every lane when `ty` is a vector type."""
  if not ty.startswith("<"): return lit
  count, _, scalar = ty[1:-1].partition(" x ")
  return "<" + ", ".join(f"{scalar} {lit}" for _ in range(int(count))) + ">"


def _retype(ty: str, scalar: str) -> str:
  """`ty` with its scalar replaced: (<4 x float>, i32) -> <4 x i32>."""
  if not ty.startswith("<"): return scalar
  return f"<{ty[1:-1].partition(' x ')[0]} x {scalar}>"


def _scalar_type(ty: str) -> str:
  """The lane type of `ty`: <4 x half> -> half; a scalar type is its own."""
  return ty[1:-1].partition(" x ")[2] if ty.startswith("<") else ty


def _float_one(ty: str) -> str: return "0xH3C00" if _scalar_type(ty) == "half" else "0x3FF0000000000000"


class _Arithmetic:
  """The conversion and arithmetic methods of the LLVM renderer's `_Kernel` (which provides `value`,
  `val`, `fail`, `intrinsic`, `amdgpu` and the rest of its state)."""

  def bf16_from_bits(self, bits: str, dt: DType) -> str:
    fty = reg_type(dt)
    wide = self.value(f"zext {_retype(fty, 'i16')} {bits} to {_retype(fty, 'i32')}")
    high = self.value(f"shl {_retype(fty, 'i32')} {wide}, {_splat('16', _retype(fty, 'i32'))}")
    return self.value(f"bitcast {_retype(fty, 'i32')} {high} to {fty}")

  def bf16_to_bits(self, val: str, dt: DType) -> str:
    """The 16 bits of an exactly representable bfloat16 register."""
    fty = reg_type(dt)
    ity = _retype(fty, "i32")
    word = self.value(f"bitcast {fty} {val} to {ity}")
    high = self.value(f"lshr {ity} {word}, {_splat('16', ity)}")
    return self.value(f"trunc {ity} {high} to {_retype(fty, 'i16')}")

  def round_bf16(self, val: str, fty: str) -> str:
    """float -> the nearest bfloat16 value (ties to even), still a float; NaN stays NaN (made quiet)."""
    ity = _retype(fty, "i32")
    word = self.value(f"bitcast {fty} {val} to {ity}")
    low = self.value(f"lshr {ity} {word}, {_splat('16', ity)}")
    odd = self.value(f"and {ity} {low}, {_splat('1', ity)}")
    bias = self.value(f"add {ity} {odd}, {_splat('32767', ity)}")
    rounded = self.value(f"add {ity} {word}, {bias}")
    quiet = self.value(f"or {ity} {word}, {_splat('4194304', ity)}")
    nan = self.value(f"fcmp uno {fty} {val}, {val}")
    chosen = self.value(f"select {_retype(fty, 'i1')} {nan}, {ity} {quiet}, {ity} {rounded}")
    top = self.value(f"and {ity} {chosen}, {_splat('-65536', ity)}")
    return self.value(f"bitcast {ity} {top} to {fty}")

  def f64_to_bf16(self, val: str, count: int) -> str:
    """double -> bfloat16 rounded once: first to float rounding to odd (so that no tie is made that
    the double did not have), then to bfloat16 to nearest even."""
    dty, fty = reg_type(dtypes.float64.vec(count)), reg_type(dtypes.float32.vec(count))
    ity = _retype(fty, "i32")
    near = self.value(f"fptrunc {dty} {val} to {fty}")
    back = self.value(f"fpext {fty} {near} to {dty}")
    inexact = self.value(f"fcmp one {dty} {back}, {val}")
    overshoot = self.value(f"fcmp ogt {dty} {self.intrinsic(dty, 'fabs', [(dty, back)], dty)}, "
                           f"{self.intrinsic(dty, 'fabs', [(dty, val)], dty)}")
    word = self.value(f"bitcast {fty} {near} to {ity}")
    step = self.value(f"zext {_retype(fty, 'i1')} {overshoot} to {ity}")
    down = self.value(f"sub {ity} {word}, {step}")
    odd = self.value(f"or {ity} {down}, {_splat('1', ity)}")
    chosen = self.value(f"select {_retype(fty, 'i1')} {inexact}, {ity} {odd}, {ity} {word}")
    return self.round_bf16(self.value(f"bitcast {ity} {chosen} to {fty}"), fty)

  # ---- casts --------------------------------------------------------------------------------------
  def cast(self, u: UOp) -> str:
    src, dst = u.src[0].dtype, u.dtype
    if src.count != dst.count: raise self.fail(u, f"CAST from {src} to {dst} changes the vector width")
    return self.convert(self.val(u.src[0]), src, dst)

  def convert(self, x: str, src: DType, dst: DType) -> str:
    s, d = src.scalar, dst.scalar
    sty, dty = reg_type(src), reg_type(dst)
    if s is d: return x
    if d is dtypes.bool:
      if s.is_float(): return self.value(f"fcmp une {sty} {x}, zeroinitializer")
      return self.value(f"icmp ne {sty} {x}, zeroinitializer")
    if d is dtypes.bfloat16: return self.to_bf16(x, src)
    if not s.is_float() and not d.is_float():  # ints and bool
      if bits_of(s) == bits_of(d): return x
      if bits_of(s) > bits_of(d): return self.value(f"trunc {sty} {x} to {dty}")
      return self.value(f"{'sext' if is_signed(s) else 'zext'} {sty} {x} to {dty}")
    if not s.is_float(): return self.value(f"{'sitofp' if is_signed(s) else 'uitofp'} {sty} {x} to {dty}")
    if not d.is_float(): return self.value(f"{'fptosi' if is_signed(d) else 'fptoui'} {sty} {x} to {dty}")
    if sty == dty: return x  # bfloat16 -> float32: already a float
    widen = {"half": 16, "float": 32, "double": 64}
    return self.value(f"{'fpext' if widen[_scalar_type(sty)] < widen[_scalar_type(dty)] else 'fptrunc'} {sty} {x} to {dty}")

  def to_bf16(self, x: str, src: DType) -> str:
    s, n = src.scalar, src.count
    fty = reg_type(dtypes.float32.vec(n))
    if s is dtypes.float64: return self.f64_to_bf16(x, n)
    if s.is_float(): return self.round_bf16(self.convert(x, src, dtypes.float32.vec(n)), fty)
    if bits_of(s) <= 16: return self.round_bf16(self.convert(x, src, dtypes.float32.vec(n)), fty)  # exact in float
    # wider ints: to double (exact up to 53 bits), then rounded once
    return self.f64_to_bf16(self.convert(x, src, dtypes.float64.vec(n)), n)

  def bitcast(self, u: UOp) -> str:
    src, dst = u.src[0].dtype, u.dtype
    if src.itemsize != dst.itemsize or dtypes.bool in (src.scalar, dst.scalar):
      raise self.fail(u, f"BITCAST from {src} to {dst}: sizes differ or bool has no bit layout")
    bits = self.bits_of_value(self.val(u.src[0]), src)
    sty, dty = self.bits_type(src), self.bits_type(dst)
    if sty != dty: bits = self.value(f"bitcast {sty} {bits} to {dty}")
    return self.bf16_from_bits(bits, dst) if dst.scalar is dtypes.bfloat16 else bits

  def bits_type(self, dt: DType) -> str: return mem_type(dt) if dt.scalar is dtypes.bfloat16 else reg_type(dt)

  def bits_of_value(self, x: str, dt: DType) -> str:
    return self.bf16_to_bits(x, dt) if dt.scalar is dtypes.bfloat16 else x

  # ---- ALU ----------------------------------------------------------------------------------------
  def alu(self, u: UOp) -> str:
    op, dt = u.op, u.src[0].dtype
    if op in _COMPARE: return self.compare(op, u.src[0], u.src[1])
    if op is Ops.WHERE:
      return self.value(f"select {self.typed(u.src[0])}, {self.typed(u.src[1])}, {self.typed(u.src[2])}")
    if op is Ops.NOT:  # logical on bool (CMPNE(x, True)), bitwise on ints: both flip every bit
      if dt.scalar.is_float(): raise self.fail(u, f"NOT is not defined on {dt}")
      return self.value(f"xor {self.typed(u.src[0])}, {_splat('-1' if dt.scalar is not dtypes.bool else 'true', reg_type(dt))}", "alu")
    if op is Ops.MULACC: return self.mulacc(u)
    if op is Ops.THREEFRY: return self.threefry(u)
    if op in (Ops.FLOORDIV, Ops.FLOORMOD): return self.floor_divmod(u)
    args = [self.val(s) for s in u.src]
    if len(args) == 2 and op in (Ops.SHL, Ops.SHR) and u.src[1].dtype is not dt:
      args[1] = self.convert(args[1], u.src[1].dtype, dt)
    return self.arith(op, dt, *args, u=u)

  def mulacc(self, u: UOp) -> str:
    """a * b + c (rounded once by llvm.fma where it is {"fused"}); on float16/bfloat16 computed in float32
    and rounded once, like any one op."""
    dt = u.dtype
    if u.arg == FUSED and dt.scalar.is_float():
      wide = dt if dt.scalar not in (dtypes.float16, dtypes.bfloat16) else dtypes.float32.vec(dt.count)
      ty = reg_type(wide)
      args = [(ty, self.val(s) if wide is dt else self.convert(self.val(s), dt, wide)) for s in u.src]
      out = self.intrinsic(ty, "fma", args, ty)
      return out if wide is dt else self.convert(out, wide, dt)
    if dt.scalar not in (dtypes.float16, dtypes.bfloat16):
      prod = self.arith(Ops.MUL, dt, self.val(u.src[0]), self.val(u.src[1]), u=u)
      return self.arith(Ops.ADD, dt, prod, self.val(u.src[2]), u=u)
    wide = dtypes.float32.vec(dt.count)
    a, b, c = (self.convert(self.val(s), dt, wide) for s in u.src)
    total = self.arith(Ops.ADD, wide, self.arith(Ops.MUL, wide, a, b, u=u), c, u=u)
    return self.convert(total, wide, dt)

  def arith(self, op: Ops, dt: DType, *args: str, u: UOp) -> str:
    ty = reg_type(dt)
    s = dt.scalar
    if s.is_float():
      out = self.float_op(op, ty, args, u)
      return self.round_bf16(out, ty) if s is dtypes.bfloat16 and op in _ROUNDING else out
    if s is dtypes.bool and op in _BOOL_BINARY: return self.value(f"{_BOOL_BINARY[op]} {ty} {args[0]}, {args[1]}")
    if op in (Ops.IDIV, Ops.DIV, Ops.MOD) and is_signed(s): return self.signed_divmod(op, ty, *args)
    if op in _INT_BINARY: return self.value(f"{_INT_BINARY[op][0 if is_signed(s) else 1]} {ty} {args[0]}, {args[1]}", "alu")
    if op is Ops.MAX:
      gt = self.value(f"icmp {'sgt' if is_signed(s) else 'ugt'} {ty} {args[0]}, {args[1]}")
      return self.value(f"select {_retype(ty, 'i1')} {gt}, {ty} {args[0]}, {ty} {args[1]}", "alu")
    if op is Ops.NEG: return self.value(f"sub {ty} {_splat('0', ty)}, {args[0]}", "alu") if s is not dtypes.bool else args[0]
    if op is Ops.TRUNC: return args[0]
    raise self.fail(u, f"{op.name} is not defined on {dt}")

  def float_op(self, op: Ops, ty: str, args: tuple[str, ...], u: UOp) -> str:
    if op in _FLOAT_BINARY: return self.value(f"{_FLOAT_BINARY[op]} {ty} {args[0]}, {args[1]}", "alu")
    if op is Ops.MAX: return self.intrinsic(ty, "maximum", [(ty, args[0]), (ty, args[1])], ty)
    if op is Ops.NEG: return self.value(f"fneg {ty} {args[0]}", "alu")
    if op is Ops.RECIP: return self.value(f"fdiv {ty} {_splat(_float_one(ty), ty)}, {args[0]}", "alu")
    if op is Ops.TRUNC: return self.intrinsic(ty, "trunc", [(ty, args[0])], ty)
    if op in _INTRINSIC: return self.transcendental(op, ty, args, u)
    raise self.fail(u, f"{op.name} is not defined on floats")

  def transcendental(self, op: Ops, ty: str, args: tuple[str, ...], u: UOp) -> str:
    scalar = _scalar_type(ty)
    if self.amdgpu and scalar not in _AMDGPU_TRANSCENDENTALS.get(op, ()):
      raise self.fail(u, f"{op.name} on {u.dtype} has no AMDGPU lowering within 2 ULP; it needs Instruction "
                         "Selection's decomposition")
    if scalar == "half" and not self.amdgpu:  # computed in float, rounded once
      fty = _retype(ty, "float")
      wide = [self.value(f"fpext {ty} {a} to {fty}") for a in args]
      out = self.intrinsic(fty, _INTRINSIC[op], [(fty, a) for a in wide], fty)
      return self.value(f"fptrunc {fty} {out} to {ty}", "alu")
    return self.intrinsic(ty, _INTRINSIC[op], [(ty, a) for a in args], ty)

  def compare(self, op: Ops, a: UOp, b: UOp) -> str:
    signed, unsigned, ordered = _COMPARE[op]
    ty = reg_type(a.dtype)
    rhs = self.val(b)
    if a.dtype.scalar.is_float(): return self.value(f"fcmp {ordered} {ty} {self.val(a)}, {rhs}", "alu")
    return self.value(f"icmp {signed if is_signed(a.dtype) else unsigned} {ty} {self.val(a)}, {rhs}", "alu")

  def signed_divmod(self, op: Ops, ty: str, a: str, b: str) -> str:
    """sdiv/srem, except that MIN / -1 wraps to MIN (and MIN % -1 is 0) instead of trapping, as the C
    target does: a divisor of -1 is replaced by 1 and the quotient negated."""
    minus_one = self.value(f"icmp eq {ty} {b}, {_splat('-1', ty)}")
    safe = self.value(f"select {_retype(ty, 'i1')} {minus_one}, {ty} {_splat('1', ty)}, {ty} {b}")
    if op is Ops.MOD: return self.value(f"srem {ty} {a}, {safe}", "alu")
    q = self.value(f"sdiv {ty} {a}, {safe}")
    negated = self.value(f"sub {ty} {_splat('0', ty)}, {q}")
    return self.value(f"select {_retype(ty, 'i1')} {minus_one}, {ty} {negated}, {ty} {q}", "alu")

  def floor_divmod(self, u: UOp) -> str:
    """Floor division and modulo: truncating results adjusted by one when the remainder's sign differs."""
    dt = u.src[0].dtype
    ty = reg_type(dt)
    a, b = self.val(u.src[0]), self.val(u.src[1])
    if dt.scalar.is_float() or dt.scalar is dtypes.bool: raise self.fail(u, f"{u.op.name} is not defined on {dt}")
    if not is_signed(dt): return self.value(f"{'udiv' if u.op is Ops.FLOORDIV else 'urem'} {ty} {a}, {b}", "alu")
    q = self.signed_divmod(Ops.IDIV, ty, a, b)
    r = self.signed_divmod(Ops.MOD, ty, a, b)
    sign = self.value(f"xor {ty} {r}, {b}")
    differ = self.value(f"icmp slt {ty} {sign}, {_splat('0', ty)}")
    nonzero = self.value(f"icmp ne {ty} {r}, {_splat('0', ty)}")
    adjust = self.value(f"and {_retype(ty, 'i1')} {differ}, {nonzero}")
    if u.op is Ops.FLOORDIV:
      step = self.value(f"zext {_retype(ty, 'i1')} {adjust} to {ty}")
      return self.value(f"sub {ty} {q}, {step}", "alu")
    fixed = self.value(f"add {ty} {r}, {b}")
    return self.value(f"select {_retype(ty, 'i1')} {adjust}, {ty} {fixed}, {ty} {r}", "alu")

  def threefry(self, u: UOp) -> str:
    """Threefry-2x32, 20 rounds, exactly as SPEC-NOTES states it, on the 32-bit halves of x and key
    (in every lane of a vector)."""
    if u.dtype.scalar is not dtypes.uint64: raise self.fail(u, "THREEFRY is defined on uint64")
    wty = reg_type(u.dtype)
    ity = _retype(wty, "i32")
    def op(code: str, a: str, b: str, ty: str = ity) -> str: return self.value(f"{code} {ty} {a}, {b}")
    def k(value: int, ty: str = ity) -> str: return _splat(str(value), ty)
    halves = []
    for s in u.src[:2]:
      lo = self.value(f"trunc {wty} {self.val(s)} to {ity}")
      hi = self.value(f"trunc {wty} {op('lshr', self.val(s), k(32, wty), wty)} to {ity}")
      halves.append((lo, hi))
    (x0, x1), (k0, k1) = halves
    ks = (k1, op("xor", op("xor", k0, k1), k(466688986)), k0)
    x = [op("add", x0, ks[2]), op("add", x1, ks[0])]
    for i in range(5):
      for r in THREEFRY_ROTATIONS[i % 2]:
        x[0] = op("add", x[0], x[1])
        x[1] = op("xor", x[0], op("or", op("shl", x[1], k(r)), op("lshr", x[1], k(32 - r))))
      x[0] = op("add", x[0], ks[i % 3])
      x[1] = op("add", op("add", x[1], ks[(i + 1) % 3]), k(i + 1))
    hi = op("shl", self.value(f"zext {ity} {x[1]} to {wty}"), k(32, wty), wty)
    return self.value(f"or {wty} {hi}, {self.value(f'zext {ity} {x[0]} to {wty}')}", "alu")

"""The CPU benchmark's workloads: one uopc program, its inputs, a float64 reference, and the same
computation written the ordinary way in numpy and in tinygrad.

The `.uop` programs come from the generator of tests/test_tensor_programs.py (`Func` and its
builders), so the benchmark measures the programs the tests check. Every implementation's result is
checked against the float64 reference before it is timed; the tolerances are error bounds of
float32 arithmetic, not fudge factors:
- sums of K float32 products (gemm, convolution) may be off by gamma_K * sum|terms| (Higham's forward
  error bound for any summation order, gamma_K = K u / (1 - K u), u = 2**-24);
- the reductions sum values in {-1, 0, 1}: every partial sum is an integer of magnitude at most 2**24,
  exact in float32 in any order, so the sums must be exact;
- an elementwise add rounds once: it must equal the float64 sum rounded to float32.
An in-place workload's program stores into its first input (x = x + y), as numpy's `x += y` and
tinygrad's `x.assign(..)` do; every column then works on copies of the inputs, and only the first
call's result is checked (later calls keep updating x).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_tensor_programs import Func, conv2d, gemm, layernorm, np_conv2d, np_layernorm, np_softmax, softmax  # noqa: E402

U = 2.0 ** -24  # unit roundoff of float32
LN_EPS = 1e-5


@dataclass(frozen=True)
class Tolerance:
  """|got - want| <= atol + rtol * |want|, elementwise; atol may be an array (a per-element bound)."""
  rtol: float = 0.0
  atol: Any = 0.0


@dataclass(frozen=True)
class Workload:
  group: str
  name: str
  program: Func                                    # the uopc program; its non-output PARAMs take `inputs` in slot order
  inputs: Callable[[np.random.Generator], list[np.ndarray]]
  reference: Callable[..., np.ndarray]             # float64 result from the inputs
  tolerance: Callable[..., Tolerance]              # from the inputs
  numpy: Callable[..., np.ndarray]                 # float32 numpy, as a numpy user writes it
  tinygrad: Callable[..., Any]                     # on tinygrad Tensors, returns a Tensor
  work: float                                      # bytes moved or flops, for `unit`
  unit: str                                        # "GB/s" or "GFLOP/s"
  in_place: bool = False                           # the program, numpy and tinygrad write the first input


def count(n: int) -> str: return f"{n >> 20}M" if n % (1 << 20) == 0 else str(n)


def gamma(k: int) -> float: return k * U / (1 - k * U)


def f64(*xs: np.ndarray) -> list[np.ndarray]: return [x.astype(np.float64) for x in xs]


def normal(*shapes):
  return lambda rng: [rng.standard_normal(s, dtype=np.float32) for s in shapes]


def normal_and_small(n: int):
  """x normal, y in [-1/2, 1/2]: x = (x*y + x)*y + 1 repeated in place then converges (|y(y+1)| < 1)
  instead of overflowing to inf."""
  return lambda rng: [rng.standard_normal(n, dtype=np.float32), rng.uniform(-0.5, 0.5, n).astype(np.float32)]


def ternary(shape):
  """Values in {-1, 0, 1}: float32 sums of them are exact in any order (see the module docstring)."""
  return lambda rng: [rng.integers(-1, 2, shape).astype(np.float32)]


# ---- uopc programs the test generator has no builder for ------------------------------------------------
def elementwise_add(n: int) -> Func:
  f = Func("add")
  x, y, out = f.param("x", (n,)), f.param("y", (n,)), f.param("out", (n,), out=True)
  f.store(out, f.op("ADD", x, y))
  return f


def mul_add_chain(n: int) -> Func:
  """out = (x*y + x)*y + 1: four dependent ops that one fused kernel does in one pass."""
  f = Func("chain")
  x, y, out = f.param("x", (n,)), f.param("y", (n,)), f.param("out", (n,), out=True)
  f.store(out, f.op("ADD", f.op("MUL", f.op("ADD", f.op("MUL", x, y), x), y), f.const(1.0)))
  return f


def add_in_place(n: int) -> Func:
  f = Func("addi")
  x, y = f.param("x", (n,)), f.param("y", (n,))
  f.store(x, f.op("ADD", x, y))
  return f


def mul_add_chain_in_place(n: int) -> Func:
  f = Func("chaini")
  x, y = f.param("x", (n,)), f.param("y", (n,))
  f.store(x, f.op("ADD", f.op("MUL", f.op("ADD", f.op("MUL", x, y), x), y), f.const(1.0)))
  return f


def np_chain_in_place(x, y):
  x[...] = (x * y + x) * y + np.float32(1)
  return x


def total_sum(n: int) -> Func:
  f = Func("total")
  x, out = f.param("x", (n,)), f.param("out", (1,), out=True)
  f.store(out, f.reduce(x, "ADD", (0,)))
  return f


def row_sums(r: int, c: int) -> Func:
  f = Func("rowsum")
  x, out = f.param("x", (r, c)), f.param("out", (r,), out=True)
  f.store(out, f.reshape(f.reduce(x, "ADD", (1,)), (r,)))
  return f


# ---- numpy implementations (float32) ----------------------------------------------------------------------
def np32_softmax(x):
  e = np.exp(x - x.max(1, keepdims=True))
  return e / e.sum(1, keepdims=True)


def np32_layernorm(x, g, b):
  xc = x - x.mean(1, keepdims=True)
  return xc / np.sqrt((xc * xc).mean(1, keepdims=True) + np.float32(LN_EPS)) * g + b


def np32_conv2d(x, w, bias, p):
  """im2col (a window view, copied by tensordot) and one BLAS matmul."""
  o, c, kh, kw = w.shape
  windows = sliding_window_view(np.pad(x, ((0, 0), (p, p), (p, p))), (kh, kw), axis=(1, 2))  # (c, oh, ow, kh, kw)
  return np.tensordot(w, windows, axes=([1, 2, 3], [0, 3, 4])) + bias[:, None, None]


def conv_bound(x, w, bias, p):
  """gamma_K * sum|terms| of each output: K = c*kh*kw products plus the bias."""
  k = w.shape[1] * w.shape[2] * w.shape[3] + 1
  return Tolerance(atol=gamma(k) * np_conv2d(*f64(np.abs(x), np.abs(w), np.abs(bias)), p))


# ---- the list ------------------------------------------------------------------------------------------------
def elementwise(n: int) -> list[Workload]:
  return [
    Workload("elementwise", f"add {count(n)}", elementwise_add(n), normal((n,), (n,)),
             lambda x, y: (x.astype(np.float64) + y).astype(np.float32), lambda x, y: Tolerance(),
             lambda x, y: x + y, lambda x, y: x + y, 3 * 4 * n, "GB/s"),
    Workload("elementwise", f"(x*y+x)*y+1 {count(n)}", mul_add_chain(n), normal((n,), (n,)),
             lambda x, y: (lambda x, y: (x * y + x) * y + 1)(*f64(x, y)), lambda x, y: Tolerance(1e-5, 1e-5),
             lambda x, y: (x * y + x) * y + np.float32(1), lambda x, y: (x * y + x) * y + 1, 3 * 4 * n, "GB/s"),
    Workload("elementwise", f"add {count(n)} in place", add_in_place(n), normal((n,), (n,)),
             lambda x, y: (x.astype(np.float64) + y).astype(np.float32), lambda x, y: Tolerance(),
             lambda x, y: np.add(x, y, out=x), lambda x, y: x.assign(x + y), 3 * 4 * n, "GB/s", in_place=True),
    Workload("elementwise", f"(x*y+x)*y+1 {count(n)} in place", mul_add_chain_in_place(n), normal_and_small(n),
             lambda x, y: (lambda x, y: (x * y + x) * y + 1)(*f64(x, y)), lambda x, y: Tolerance(1e-5, 1e-5),
             np_chain_in_place, lambda x, y: x.assign((x * y + x) * y + 1), 3 * 4 * n, "GB/s", in_place=True),
  ]


def rows(n: int, d: int) -> list[Workload]:
  return [
    Workload("rows", f"softmax {n}x{d}", softmax(n, d), normal((n, d)), lambda x: np_softmax(x.astype(np.float64)),
             lambda x: Tolerance(1e-4, 1e-7), np32_softmax, lambda x: x.softmax(-1), 2 * 4 * n * d, "GB/s"),
    Workload("rows", f"layernorm {n}x{d}", layernorm(n, d, LN_EPS), normal((n, d), (d,), (d,)),
             lambda x, g, b: np_layernorm(*f64(x, g, b), LN_EPS), lambda x, g, b: Tolerance(1e-4, 1e-4),
             np32_layernorm, lambda x, g, b: x.layernorm(-1, LN_EPS) * g + b, 2 * 4 * n * d, "GB/s"),
  ]


def reductions(n: int, r: int, c: int) -> list[Workload]:
  return [
    Workload("reduce", f"sum {count(n)}", total_sum(n), ternary((n,)), lambda x: x.astype(np.float64).sum(keepdims=True),
             lambda x: Tolerance(), lambda x: x.sum(keepdims=True), lambda x: x.sum().reshape(1), 4 * n, "GB/s"),
    Workload("reduce", f"row sums {r}x{c}", row_sums(r, c), ternary((r, c)), lambda x: x.astype(np.float64).sum(1),
             lambda x: Tolerance(), lambda x: x.sum(1), lambda x: x.sum(1), 4 * r * c, "GB/s"),
  ]


def gemms(sizes) -> list[Workload]:
  return [Workload("gemm", f"gemm {s}", gemm(s, s, s), normal((s, s), (s, s)), lambda a, b: np.matmul(*f64(a, b)),
                   lambda a, b, s=s: Tolerance(atol=gamma(s) * np.matmul(*f64(np.abs(a), np.abs(b)))),
                   lambda a, b: a @ b, lambda a, b: a @ b, 2 * s ** 3, "GFLOP/s") for s in sizes]


def gemm_shape(m: int, k: int, n: int) -> Workload:
  """C = A @ B of float32 (m x k) and (k x n): a gemm of a real model's shape (ragged ones too)."""
  return Workload("gemm", f"gemm {m}x{k}x{n}", gemm(m, k, n), normal((m, k), (k, n)), lambda a, b: np.matmul(*f64(a, b)),
                  lambda a, b: Tolerance(atol=gamma(k) * np.matmul(*f64(np.abs(a), np.abs(b)))),
                  lambda a, b: a @ b, lambda a, b: a @ b, 2 * m * k * n, "GFLOP/s")


def batched_gemm_shape(h: int, m: int, k: int, n: int) -> Workload:
  """C[i] = A[i] @ B[i] of float32 for h heads (attention's products)."""
  f = Func("bgemm")
  a, b, c = f.param("a", (h, m, k)), f.param("b", (h, k, n)), f.param("c", (h, m, n), out=True)
  f.store(c, f.reshape(f.reduce(f.op("MUL", f.reshape(a, (h, m, k, 1)), f.reshape(b, (h, 1, k, n))), "ADD", (2,)), (h, m, n)))
  return Workload("gemm", f"gemm {h}x{m}x{k}x{n}", f, normal((h, m, k), (h, k, n)), lambda a, b: np.matmul(*f64(a, b)),
                  lambda a, b: Tolerance(atol=gamma(k) * np.matmul(*f64(np.abs(a), np.abs(b)))),
                  lambda a, b: a @ b, lambda a, b: a @ b, 2 * h * m * k * n, "GFLOP/s")


def half_gemm(s: int) -> Workload:
  """C = float(A) @ float(B) for float16 A and B (float32 sums): the GPU bench's tensor-core gemm."""
  f = Func("hgemm")
  a, b, c = f.param("a", (s, s), "f16"), f.param("b", (s, s), "f16"), f.param("c", (s, s), out=True)
  f.store(c, f.matmul(f.cast(a, "f32"), f.cast(b, "f32"), s, s, s))
  def inputs(rng): return [x.astype(np.float16) for x in normal((s, s), (s, s))(rng)]
  return Workload("gemm", f"gemm {s} f16", f, inputs, lambda a, b: np.matmul(*f64(a, b)),
                  lambda a, b: Tolerance(atol=gamma(s) * np.matmul(*f64(np.abs(a), np.abs(b)))),
                  lambda a, b: np.matmul(a.astype(np.float32), b.astype(np.float32)), lambda a, b: a.float() @ b.float(), 2 * s ** 3, "GFLOP/s")


def convolutions(c: int, hw: int, o: int) -> list[Workload]:
  flops = 2 * o * c * 9 * hw * hw
  return [Workload("conv", f"conv3x3 {c}x{hw}x{hw}->{o}", conv2d(c, hw, hw, o, 3, 3, 1),
                   normal((c, hw, hw), (o, c, 3, 3), (o,)), lambda x, w, b: np_conv2d(*f64(x, w, b), 1),
                   lambda x, w, b: conv_bound(x, w, b, 1), lambda x, w, b: np32_conv2d(x, w, b, 1),
                   lambda x, w, b: x.unsqueeze(0).conv2d(w, b, padding=1).squeeze(0), flops, "GFLOP/s")]


# float32 gemms of real models whose axes have few factors of two: ViT-B's 197 tokens, GPT-2's 50257 logits for 64
# tokens, ImageNet's 1000 classes, a 1031-wide layer (M x K x N)
RAGGED_GEMMS = ((197, 768, 3072), (64, 768, 50257), (1000, 768, 1000), (1024, 768, 1031))


# ... and one token through GPT-2's layers and logits (a matrix-vector product: no second axis to tile)
GEMV_GEMMS = ((1, 768, 3072), (1, 3072, 768), (1, 768, 50257))


# ... and ViT-B's attention products (12 heads of q @ k^T and of p @ v; H x M x K x N)
ATTENTION_GEMMS = ((12, 197, 64, 197), (12, 197, 197, 64))


# ResNet's later stages at batch 1: 3x3 convolutions of small images (C x HW x HW -> C)
RESNET_CONVS = ((128, 28), (256, 14), (512, 7))


def resnet_convs() -> list[Workload]:
  return [replace(w, group="resnet") for c, hw in RESNET_CONVS for w in convolutions(c, hw, c)]


def ragged_gemms() -> list[Workload]:
  return [replace(gemm_shape(*s), group="ragged") for s in RAGGED_GEMMS] + [replace(gemm_shape(*s), group="gemv") for s in GEMV_GEMMS] + \
         [replace(batched_gemm_shape(*s), group="attention") for s in ATTENTION_GEMMS]


def all_workloads() -> list[Workload]:
  return [*elementwise(1 << 24), *rows(4096, 1024), *reductions(1 << 24, 4096, 4096),
          *gemms((256, 512, 1024, 2048)), *ragged_gemms(), *convolutions(64, 56, 64), *resnet_convs()]

"""Real-model programs written with tinygrad's own Tensor methods, each a plain function of its inputs and
weights (so every tensor it reads is a named PARAM of the exported entry, in argument order).

`programs(scale)` gives them at their real shapes (`"real"`: GPT-2 small, ResNet-18, a LLaMA-style MLP)
or at small ones (`"small"`, for the tests): the same code, other sizes. `export_models.py` writes the
real ones as `.uop` files; `tests/bench/bench_models.py` times them; the tests check them against
tinygrad.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from tinygrad import Tensor, dtypes


_TG = {"float32": dtypes.float32, "float16": dtypes.float16, "int32": dtypes.int32}


@dataclass(frozen=True)
class Program:
  name: str
  fn: Callable
  inputs: tuple[tuple[str, tuple[int, ...], str], ...]  # (argument name, shape, numpy dtype) in order

  def examples(self) -> list[Tensor]:
    return [Tensor.empty(*shape, dtype=_TG[dt]) for _, shape, dt in self.inputs]

  def arrays(self, seed: int = 0) -> list[np.ndarray]:
    """Inputs a model sees: unit-scale activations, weights scaled by 1/sqrt(fan-in), indices in range."""
    rng, out = np.random.default_rng(seed), []
    for name, shape, dt in self.inputs:
      if np.dtype(dt).kind in "iu": out.append(rng.integers(0, _index_bound(self, name), shape).astype(dt))
      else:
        scale = 1.0 if name in ("x", "q", "k", "v", "logits", "a") or len(shape) < 2 else 1.0 / np.sqrt(shape[-2] if name.startswith("w") else shape[-1])
        out.append((rng.standard_normal(shape) * scale).astype(dt))
    return out


def _index_bound(p: Program, name: str) -> int:
  """Indices address the first axis of the table they index (embedding) or the classes (labels)."""
  other = next(shape for n, shape, _ in p.inputs if n in ("table", "logits"))
  return other[0] if name == "idx" else other[-1]


# ---- the programs -----------------------------------------------------------------------------------------
def layer_norm(x, g, b, eps=1e-5): return x.layernorm(eps=eps) * g + b


def causal_attention(x, w_qkv, b_qkv, w_proj, b_proj, heads: int):
  t, d = x.shape
  q, k, v = (x @ w_qkv + b_qkv).reshape(t, 3, heads, d // heads).permute(1, 2, 0, 3)  # 3 x [heads, t, hd]
  att = q.scaled_dot_product_attention(k, v, is_causal=True)                        # [heads, t, hd]
  return att.permute(1, 0, 2).reshape(t, d) @ w_proj + b_proj


def mlp_gelu(x, w_fc, b_fc, w_out, b_out): return (x @ w_fc + b_fc).gelu() @ w_out + b_out


def gpt2_block(x, ln1_g, ln1_b, w_qkv, b_qkv, w_proj, b_proj, ln2_g, ln2_b, w_fc, b_fc, w_out, b_out):
  heads = 12 if x.shape[1] % 12 == 0 else 2
  h = x + causal_attention(layer_norm(x, ln1_g, ln1_b), w_qkv, b_qkv, w_proj, b_proj, heads)
  return h + mlp_gelu(layer_norm(h, ln2_g, ln2_b), w_fc, b_fc, w_out, b_out)


def attention(x, w_qkv, b_qkv, w_proj, b_proj): return causal_attention(x, w_qkv, b_qkv, w_proj, b_proj, 12 if x.shape[1] % 12 == 0 else 2)
def qkv_projection(x, w_qkv, b_qkv): return x @ w_qkv + b_qkv
def gelu(x): return x.gelu()


def batchnorm_eval(x, mean, var, g, b, eps=1e-5):
  shape = (1, -1, 1, 1)
  return (x - mean.reshape(shape)) * (var.reshape(shape) + eps).rsqrt() * g.reshape(shape) + b.reshape(shape)


def resnet_basic_block(x, w1, m1, v1, g1, b1, w2, m2, v2, g2, b2):
  h = batchnorm_eval(x.conv2d(w1, padding=1), m1, v1, g1, b1).relu()
  return (batchnorm_eval(h.conv2d(w2, padding=1), m2, v2, g2, b2) + x).relu()


def group_norm(x, g, b, groups=8, eps=1e-5):  # a diffusion U-Net's normalization: statistics over (channel group, y, x)
  n, c, h, w = x.shape
  y = x.reshape(n, groups, -1).layernorm(eps=eps).reshape(n, c, h, w)
  return y * g.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)


def upsample_bilinear(x): return x.interpolate((x.shape[2] * 2, x.shape[3] * 2), mode="linear")  # a U-Net / FPN decoder's


def conv3x3(x, w): return x.conv2d(w, padding=1)
def rms_norm(x, g, eps=1e-6): return x * (x.square().mean(-1, keepdim=True) + eps).rsqrt() * g
def swiglu(x, w_gate, w_up, w_down): return ((x @ w_gate).silu() * (x @ w_up)) @ w_down
def argmax(x): return x.argmax(-1)
def embedding(idx, table): return table[idx]
def cross_entropy(logits, labels): return logits.sparse_categorical_crossentropy(labels)
def cumsum(x): return x.cumsum(-1)
def max_pool(x): return x.max_pool2d((3, 3), stride=2)
def max_pool_padded(x): return x.max_pool2d((3, 3), stride=2, padding=1)  # ResNet's first pooling
def global_avg_pool(x): return x.mean((2, 3))
def softmax(x): return x.softmax(-1)
def half_matmul(a, b): return a.matmul(b, dtype=dtypes.float)


def programs(scale: str = "real") -> list[Program]:
  real = scale == "real"
  T, D, H = (64, 768, 3072) if real else (5, 24, 48)           # GPT-2 small: 768 wide, MLP 4x
  C, S = (64, 56) if real else (4, 9)                            # ResNet-18's first stage
  R, F = (32, 2048) if real else (3, 16)                         # LLaMA-style MLP
  N, K, E = (64, 1000, 64) if real else (4, 10, 3)               # classes/rows, embedding width
  f, i = "float32", "int32"
  def lin(name, n_in, n_out): return ((f"w_{name}", (n_in, n_out), f), (f"b_{name}", (n_out,), f))
  blk = (("x", (T, D), f), ("ln1_g", (D,), f), ("ln1_b", (D,), f), *lin("qkv", D, 3 * D), *lin("proj", D, D),
         ("ln2_g", (D,), f), ("ln2_b", (D,), f), *lin("fc", D, H), *lin("out", H, D))
  def bn(k): return tuple((f"{n}{k}", (C,), f) for n in "mvgb")
  res = (("x", (1, C, S // 4, S // 4), f), ("w1", (C, C, 3, 3), f), *bn(1)[:2], ("g1", (C,), f), ("b1", (C,), f),
         ("w2", (C, C, 3, 3), f), *bn(2)[:2], ("g2", (C,), f), ("b2", (C,), f))
  return [
    Program("gpt2_block", gpt2_block, blk),
    Program("gpt2_attention", attention, (("x", (T, D), f), *lin("qkv", D, 3 * D), *lin("proj", D, D))),
    Program("gpt2_mlp", mlp_gelu, (("x", (T, D), f), *lin("fc", D, H), *lin("out", H, D))),
    Program("gpt2_qkv", qkv_projection, (("x", (T, D), f), *lin("qkv", D, 3 * D))),
    Program("gpt2_layernorm", layer_norm, (("x", (T, D), f), ("g", (D,), f), ("b", (D,), f))),
    Program("gelu", gelu, (("x", (T * 2, H), f),)),
    Program("resnet_basic_block", resnet_basic_block, res),
    Program("conv3x3", conv3x3, (("x", (1, C, S // 2, S // 2), f), ("w", (C, C, 3, 3), f))),
    Program("max_pool", max_pool, (("x", (1, C, S, S), f),)),
    Program("group_norm", group_norm, (("x", (2, C, S // 2 + 4, S // 2 + 4), f), ("g", (C,), f), ("b", (C,), f))),
    Program("max_pool_padded", max_pool_padded, (("x", (1, C, 2 * S, 2 * S), f),)),
    Program("upsample_bilinear", upsample_bilinear, (("x", (1, C // 2, S + 8, S + 8), f),)),
    Program("global_avg_pool", global_avg_pool, (("x", (1, 8 * C, 7, 7), f),)),
    Program("llama_rmsnorm", rms_norm, (("x", (R, F), f), ("g", (F,), f))),
    Program("llama_swiglu", swiglu, (("x", (R, F), f), ("w_gate", (F, F * 11 // 4), f), ("w_up", (F, F * 11 // 4), f),
                                     ("w_down", (F * 11 // 4, F), f))),
    Program("argmax", argmax, (("x", (N, K), f),)),
    Program("embedding", embedding, (("idx", (N // 2,), i), ("table", (K, E), f))),
    Program("cross_entropy", cross_entropy, (("logits", (N // 2, K), f), ("labels", (N // 2,), i))),
    Program("cumsum", cumsum, (("x", (N, K), f),)),
    Program("softmax", softmax, (("x", (N * 4, K), f),)),
    Program("half_matmul", half_matmul, (("a", (4 * N, 4 * N), "float16"), ("b", (4 * N, 4 * N), "float16"))),
  ]

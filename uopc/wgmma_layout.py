"""Where sm_90a's `wgmma.mma_async` reads an operand in shared memory, from its matrix descriptor: the
emulator's model of the hardware (uopc/emulator.py), written from the PTX ISA's definitions alone
("Asynchronous Warpgroup Level Matrix ...": Shared Memory Matrix Layout, Canonical Layouts, Matrix
Descriptor Format) and deliberately not from uopc.stages.tc_staging's _Layout, which it checks.

The unit of the layouts is a 16-byte chunk (T = 16 / itemsize elements). A swizzled row is `swizzle`
bytes (W = swizzle / 16 chunks: 8, 4 or 2); 8 such rows form the swizzle atom. In elements, where i runs
along M (A) or N (B) and j along K:

  K-major  ((8,m),(T,2k)):((W T,SBO),(1,T))        i % 8 picks the row, i // 8 the atom (SBO apart);
                                                   j runs along the row (LBO unused: K fits one row)
  MN-major ((T,W,m),(8,k)):((1,T,LBO),(W T,SBO))   i % (W T) runs along the row, i // (W T) the panel
                                                   (LBO apart); j % 8 picks the row, j // 8 the atom (SBO apart)

added to the descriptor's start address, and then swizzled (CuTe's Swizzle<log2 W, 4, 3> on byte
addresses): bits [4, 4 + log2 W) of the address, the chunk, are XORed with bits [7, 7 + log2 W). The
swizzle acts on the absolute shared address; that is the hardware's with the descriptor's base offset 0,
which holds where every atom starts at a multiple of 8 rows' bytes (the renderer aligns the tiles to 1024
bytes, and addresses here are relative to the tile's start, so alignment is preserved).
"""
from __future__ import annotations

import numpy as np

from uopc.stages.warpgroup_mma import Operand

CHUNK = 16  # bytes: the layouts' "128-bit element"
K = 16      # the K extent of one m64nNk16 instruction


def byte_addresses(op: Operand, start: int, mn: int, itemsize: int) -> np.ndarray:
  """(mn, K) array: the byte address of the operand's element (i along M or N, j along K) for a descriptor
  `op` whose start address is `start` (bytes). ValueError where the descriptor cannot be encoded."""
  if op.swizzle not in (32, 64, 128): raise ValueError(f"no {op.swizzle}-byte swizzle mode")
  if start % CHUNK or op.leading % CHUNK or op.stride % CHUNK:
    raise ValueError(f"start {start}, leading {op.leading}, stride {op.stride}: not multiples of {CHUNK} bytes")
  if not 0 <= start < 1 << 18 or not 0 <= op.leading < 1 << 18 or not 0 <= op.stride < 1 << 18:
    raise ValueError("an address or offset past the descriptor's 18 bits")
  if not op.mn_major and K * itemsize > op.swizzle: raise ValueError(f"K-major: {K} elements do not fit one {op.swizzle}-byte row")
  width = op.swizzle // itemsize  # elements of a row (W T)
  i, j = np.arange(mn)[:, None], np.arange(K)[None, :]
  if op.mn_major: off = (i % width) * itemsize + (i // width) * op.leading + (j % 8) * op.swizzle + (j // 8) * op.stride
  else: off = (i % 8) * op.swizzle + (i // 8) * op.stride + j * itemsize
  addr = start + off
  return addr ^ ((addr >> 3) & ((op.swizzle // CHUNK - 1) << 4))

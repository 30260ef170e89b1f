# issue 26, part 2: GCC 12.2 at -O2 miscompiled the reversed sum (164 instead of 120)
def reversed_sum(x0):
  return x0.flip(0).sum()


INPUTS = [np.arange(16, dtype=np.float32)]

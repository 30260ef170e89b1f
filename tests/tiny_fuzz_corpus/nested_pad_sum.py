# issue 26, part 1: a reduction over a PAD of another reduction; the inner accumulator was shared by the
# unrolled lanes of the outer one (42 instead of 21)
def nested_pad_sum(x0):
  return x0.sum(1).pad(((2, 1),)).sum(0)


INPUTS = [np.array([[1, 2, 3], [4, 5, 6]], np.float32)]

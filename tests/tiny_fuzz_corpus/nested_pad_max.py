# issue 26, part 1: with a max outer reduce the lanes' data was lost (1.5 instead of 15)
def nested_pad_max(x0):
  return x0.sum(1).pad(((2, 1),), value=1.5).max(0)


INPUTS = [np.array([[1, 2, 3], [4, 5, 6]], np.float32)]

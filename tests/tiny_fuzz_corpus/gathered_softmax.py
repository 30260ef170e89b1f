# random-seed fuzz (UOPC_TINY_FUZZ_SEED=589917149, batch 25): the softmax's sum, drawn into the gather's loop,
# was summed once per index (outputs divided by 1, 2, 3)
def gathered_softmax(x0, x1):
  return x0.softmax(0)[x1]


INPUTS = [np.array([[0.3844175934791565], [0.5360000133514404], [-1.583670735359192], [1.0108556747436523], [-0.7603189945220947]], np.float32),
          np.array([-5, 1, -2], np.int32)]

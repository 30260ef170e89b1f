"""uopc: an ahead-of-time compiler for the UOp IR.

The Python API of the tinygrad front end (needs tinygrad 0.14; imported on first use):
  uopc.export(fn, *example_inputs, name=None, input_names=None, weights=None) -> str   one `func` entry
  uopc.export_module([(fn, example_inputs[, name]), ...], weights=None) -> str         several entries
  uopc.function                                                                        seed 000's @function
"""
__version__ = "0.1.0"
__all__ = ["export", "export_module", "function", "__version__"]


def __getattr__(name: str):
  if name in ("export", "export_module", "function"):
    from uopc.frontend import tinygrad
    return getattr(tinygrad, name)
  raise AttributeError(f"module 'uopc' has no attribute {name!r}")

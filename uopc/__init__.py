"""uopc: an ahead-of-time compiler for the UOp IR."""
__version__ = "0.1.0"

"""The grammar of the textual UOp IR, shipped inside the package as uopc.grammar (see README.md)."""

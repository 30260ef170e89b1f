"""AMD target: LLVM IR renderer, AMD ISA and HSA code objects through llvmlite, HIP launcher."""

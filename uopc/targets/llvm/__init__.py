"""LLVM IR renderer shared by `-t llvm` (the host CPU through llvmlite) and `-t amd` (AMDGPU)."""

"""C target: renders linearized kernels to C99 with GCC/Clang vector extensions."""

"""CUDA target: PTX renderer, fatbin, launcher."""

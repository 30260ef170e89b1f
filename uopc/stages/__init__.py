"""The lowering pipeline of seed 000, one module per stage."""

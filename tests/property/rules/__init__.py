"""Alternative verify rules that are lossless but are not chain sampling (test fixtures, not oracles)."""

"""Tile IR rewrites the compiler driver runs before partitioning: common-subexpression elimination (`cse`),
rank squeezing (`squeeze`), fp8 promotion (`promote`) and accumulator-initialisation hoisting (`acc_init`)."""

"""Small dense matrices: arithmetic, transpose, determinant, inverse and linear solves.

Entries may be ints, floats or ``fractions.Fraction``; with Fractions every result is exact.
"""

from matrix.core import Matrix, MatrixError, identity, zeros
from matrix.linalg import determinant, inverse, rank, solve, trace

__all__ = ["Matrix", "MatrixError", "determinant", "identity", "inverse", "rank", "solve", "trace", "zeros"]

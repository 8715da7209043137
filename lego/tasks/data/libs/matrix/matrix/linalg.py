"""Linear algebra by Gaussian elimination (exact with Fractions)."""

from fractions import Fraction

from matrix.core import Matrix, MatrixError, identity


def trace(m):
    if not m.is_square():
        raise MatrixError("trace needs a square matrix")
    return sum(m[i, i] for i in range(m.shape[0]))


def _to_fractions(m):
    return [[Fraction(x) for x in row] for row in m.rows]


def _pivot_row(rows, col, start):
    """Index of the first row at or below ``start`` with a non-zero entry in ``col``."""
    for r in range(start, len(rows)):
        if rows[r][col] != 0:
            return r
    return None


def determinant(m):
    """The determinant, by elimination; a row swap flips the sign."""
    if not m.is_square():
        raise MatrixError("determinant needs a square matrix")
    rows = _to_fractions(m)
    size = len(rows)
    det = Fraction(1)
    for col in range(size):
        pivot = _pivot_row(rows, col, col)
        if pivot is None:
            return Fraction(0)
        if pivot != col:
            rows[col], rows[pivot] = rows[pivot], rows[col]
            det = -det
        det *= rows[col][col]
        for r in range(col + 1, size):
            factor = rows[r][col] / rows[col][col]
            rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col])]
    return det


def rank(m):
    """The number of linearly independent rows."""
    rows = _to_fractions(m)
    n_rows, n_cols = m.shape
    current = 0
    for col in range(n_cols):
        if current == n_rows:
            break
        pivot = _pivot_row(rows, col, current)
        if pivot is None:
            continue
        rows[current], rows[pivot] = rows[pivot], rows[current]
        for r in range(current + 1, n_rows):
            factor = rows[r][col] / rows[current][col]
            rows[r] = [a - factor * b for a, b in zip(rows[r], rows[current])]
        current += 1
    return current


def inverse(m):
    """The inverse by Gauss-Jordan elimination on ``[m | I]``."""
    if not m.is_square():
        raise MatrixError("only square matrices have inverses")
    size = m.shape[0]
    rows = [left + right for left, right in zip(_to_fractions(m), _to_fractions(identity(size)))]
    for col in range(size):
        pivot = _pivot_row(rows, col, col)
        if pivot is None:
            raise MatrixError("matrix is singular")
        rows[col], rows[pivot] = rows[pivot], rows[col]
        lead = rows[col][col]
        rows[col] = [x / lead for x in rows[col]]
        for r in range(size):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col])]
    return Matrix([row[size:] for row in rows])


def solve(m, rhs):
    """The vector ``x`` with ``m @ x == rhs`` (``rhs`` a list), for a non-singular square ``m``."""
    if m.shape[0] != len(rhs):
        raise MatrixError(f"right-hand side has {len(rhs)} entries, expected {m.shape[0]}")
    column = Matrix([[v] for v in rhs])
    return (inverse(m) @ column).column(0)

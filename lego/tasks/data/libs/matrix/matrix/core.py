"""The :class:`Matrix` type and its elementwise and product arithmetic."""


class MatrixError(ValueError):
    """Shapes do not match, or the matrix is singular where an inverse is needed."""


class Matrix:
    """An immutable ``rows x cols`` matrix stored as a tuple of row tuples."""

    def __init__(self, rows):
        rows = [tuple(r) for r in rows]
        if not rows or not rows[0]:
            raise MatrixError("a matrix needs at least one row and one column")
        width = len(rows[0])
        for index, row in enumerate(rows):
            if len(row) != width:
                raise MatrixError(f"row {index} has {len(row)} entries, expected {width}")
        self._rows = tuple(rows)

    @property
    def shape(self):
        return len(self._rows), len(self._rows[0])

    @property
    def rows(self):
        return [list(r) for r in self._rows]

    def is_square(self):
        rows, cols = self.shape
        return rows == cols

    def __getitem__(self, position):
        row, col = position
        return self._rows[row][col]

    def __eq__(self, other):
        if not isinstance(other, Matrix):
            return NotImplemented
        return self._rows == other._rows

    def __hash__(self):
        return hash(self._rows)

    def __repr__(self):
        return f"Matrix({self.rows!r})"

    def row(self, index):
        return list(self._rows[index])

    def column(self, index):
        return [r[index] for r in self._rows]

    def transpose(self):
        rows, cols = self.shape
        return Matrix([[self._rows[r][c] for r in range(rows)] for c in range(cols)])

    def _elementwise(self, other, op):
        if self.shape != other.shape:
            raise MatrixError(f"shapes {self.shape} and {other.shape} differ")
        return Matrix([[op(a, b) for a, b in zip(ra, rb)] for ra, rb in zip(self._rows, other._rows)])

    def __add__(self, other):
        return self._elementwise(other, lambda a, b: a + b)

    def __sub__(self, other):
        return self._elementwise(other, lambda a, b: a - b)

    def scale(self, factor):
        return Matrix([[factor * x for x in r] for r in self._rows])

    def __neg__(self):
        return self.scale(-1)

    def __matmul__(self, other):
        rows, inner = self.shape
        other_rows, cols = other.shape
        if inner != other_rows:
            raise MatrixError(f"cannot multiply {self.shape} by {other.shape}")
        return Matrix(
            [[sum(self._rows[i][k] * other._rows[k][j] for k in range(inner)) for j in range(cols)] for i in range(rows)]
        )

    def __pow__(self, exponent):
        """Integer power by repeated squaring; ``m ** 0`` is the identity."""
        if not self.is_square():
            raise MatrixError("only square matrices have powers")
        if exponent < 0:
            raise MatrixError("negative powers need inverse(); not supported by **")
        result = identity(self.shape[0])
        base = self
        while exponent > 0:
            if exponent % 2 == 1:
                result = result @ base
            base = base @ base
            exponent //= 2
        return result

    def map(self, func):
        return Matrix([[func(x) for x in r] for r in self._rows])

    def submatrix(self, skip_row, skip_col):
        """The matrix without one row and one column (a minor's matrix)."""
        return Matrix(
            [[x for c, x in enumerate(r) if c != skip_col] for i, r in enumerate(self._rows) if i != skip_row]
        )


def zeros(rows, cols):
    return Matrix([[0] * cols for _ in range(rows)])


def identity(size):
    return Matrix([[1 if r == c else 0 for c in range(size)] for r in range(size)])

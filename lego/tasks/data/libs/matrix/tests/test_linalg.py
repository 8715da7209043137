from fractions import Fraction

import pytest

from matrix import Matrix, MatrixError, determinant, identity, inverse, rank, solve, trace


def test_trace():
    assert trace(Matrix([[1, 2], [3, 4]])) == 5


def test_trace_nonsquare():
    with pytest.raises(MatrixError):
        trace(Matrix([[1, 2]]))


def test_det_2x2():
    assert determinant(Matrix([[1, 2], [3, 4]])) == -2


def test_det_3x3():
    assert determinant(Matrix([[2, 0, 1], [1, 3, 2], [1, 1, 2]])) == 6


def test_det_needs_swap():
    assert determinant(Matrix([[0, 1], [1, 0]])) == -1


def test_det_singular():
    assert determinant(Matrix([[1, 2], [2, 4]])) == 0


def test_det_identity():
    assert determinant(identity(4)) == 1


def test_det_1x1():
    assert determinant(Matrix([[7]])) == 7


def test_det_nonsquare():
    with pytest.raises(MatrixError):
        determinant(Matrix([[1, 2]]))


def test_rank_full():
    assert rank(Matrix([[1, 2], [3, 4]])) == 2


def test_rank_deficient():
    assert rank(Matrix([[1, 2, 3], [2, 4, 6], [1, 0, 1]])) == 2


def test_rank_zero_column_first():
    assert rank(Matrix([[0, 1], [0, 2]])) == 1


def test_rank_wide():
    assert rank(Matrix([[1, 0, 2], [0, 1, 3]])) == 2


def test_rank_tall():
    assert rank(Matrix([[1], [2], [3]])) == 1


def test_inverse():
    assert inverse(Matrix([[4, 7], [2, 6]])) == Matrix(
        [[Fraction(3, 5), Fraction(-7, 10)], [Fraction(-1, 5), Fraction(2, 5)]]
    )


def test_inverse_times_matrix_is_identity():
    m = Matrix([[2, 1, 0], [1, 3, 1], [0, 1, 4]])
    assert inverse(m) @ m == identity(3)


def test_inverse_needs_swap():
    assert inverse(Matrix([[0, 1], [1, 0]])) == Matrix([[0, 1], [1, 0]])


def test_inverse_singular():
    with pytest.raises(MatrixError):
        inverse(Matrix([[1, 2], [2, 4]]))


def test_solve():
    assert solve(Matrix([[2, 1], [1, 3]]), [3, 5]) == [Fraction(4, 5), Fraction(7, 5)]


def test_solve_3x3():
    m = Matrix([[1, 1, 1], [0, 2, 5], [2, 5, -1]])
    assert solve(m, [6, -4, 27]) == [5, 3, -2]


def test_solve_wrong_rhs():
    with pytest.raises(MatrixError):
        solve(Matrix([[1, 0], [0, 1]]), [1, 2, 3])

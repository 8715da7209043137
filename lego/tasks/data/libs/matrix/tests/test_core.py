import pytest

from matrix import Matrix, MatrixError, identity, zeros


def test_shape():
    assert Matrix([[1, 2, 3], [4, 5, 6]]).shape == (2, 3)


def test_ragged_rejected():
    with pytest.raises(MatrixError):
        Matrix([[1, 2], [3]])


def test_empty_rejected():
    with pytest.raises(MatrixError):
        Matrix([])


def test_getitem():
    assert Matrix([[1, 2], [3, 4]])[1, 0] == 3


def test_row_and_column():
    m = Matrix([[1, 2], [3, 4]])
    assert m.row(0) == [1, 2] and m.column(1) == [2, 4]


def test_transpose():
    assert Matrix([[1, 2, 3], [4, 5, 6]]).transpose() == Matrix([[1, 4], [2, 5], [3, 6]])


def test_add():
    assert Matrix([[1, 2]]) + Matrix([[10, 20]]) == Matrix([[11, 22]])


def test_sub():
    assert Matrix([[5, 5]]) - Matrix([[1, 2]]) == Matrix([[4, 3]])


def test_add_shape_mismatch():
    with pytest.raises(MatrixError):
        Matrix([[1, 2]]) + Matrix([[1], [2]])


def test_scale():
    assert Matrix([[1, -2]]).scale(3) == Matrix([[3, -6]])


def test_neg():
    assert -Matrix([[1, -2]]) == Matrix([[-1, 2]])


def test_matmul():
    a = Matrix([[1, 2], [3, 4]])
    b = Matrix([[5, 6], [7, 8]])
    assert a @ b == Matrix([[19, 22], [43, 50]])


def test_matmul_rectangular():
    a = Matrix([[1, 2, 3]])
    b = Matrix([[1], [2], [3]])
    assert a @ b == Matrix([[14]])


def test_matmul_mismatch():
    with pytest.raises(MatrixError):
        Matrix([[1, 2]]) @ Matrix([[1, 2]])


def test_identity():
    assert identity(2) == Matrix([[1, 0], [0, 1]])


def test_zeros():
    assert zeros(2, 3) == Matrix([[0, 0, 0], [0, 0, 0]])


def test_pow():
    assert Matrix([[1, 1], [1, 0]]) ** 5 == Matrix([[8, 5], [5, 3]])


def test_pow_zero():
    assert Matrix([[2, 3], [4, 5]]) ** 0 == identity(2)


def test_pow_one():
    assert Matrix([[2, 3], [4, 5]]) ** 1 == Matrix([[2, 3], [4, 5]])


def test_pow_negative():
    with pytest.raises(MatrixError):
        Matrix([[1, 0], [0, 1]]) ** -1


def test_pow_nonsquare():
    with pytest.raises(MatrixError):
        Matrix([[1, 2]]) ** 2


def test_map():
    assert Matrix([[1, 2]]).map(lambda x: x * x) == Matrix([[1, 4]])


def test_submatrix():
    m = Matrix([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    assert m.submatrix(1, 0) == Matrix([[2, 3], [8, 9]])


def test_is_square():
    assert Matrix([[1]]).is_square() and not Matrix([[1, 2]]).is_square()


def test_repr():
    assert repr(Matrix([[1, 2]])) == "Matrix([[1, 2]])"

// Eigen leaves (<ckpt/eigen.hpp>): matrices, arrays, vectors, maps and tensors of every
// dtype, in both storage orders, checked against numpy reading what ckpt wrote (the
// element at numpy's index [i, j] is the one at Eigen's (i, j)) and against numpy
// writing what ckpt reads.
#include "support.hpp"

#if __has_include(<ckpt/eigen.hpp>) && __has_include(<Eigen/Core>)
#include <ckpt/eigen.hpp>

#include <complex>

namespace eigen_test {

namespace fs = std::filesystem;
using Eigen::Dynamic;
using Eigen::RowMajor;

// The value every element holds: its index read as decimal digits, plus one ([1,2] ->
// 13), so that numpy computes it from np.indices alone. Bools alternate.
template <class E>
E value_at(std::span<const Eigen::Index> at) {
  long v = 0;
  for (auto i : at) v = v * 10 + static_cast<long>(i);
  if constexpr (std::is_same_v<E, bool>) {
    long sum = 0;
    for (auto i : at) sum += static_cast<long>(i);
    return sum % 2 == 1;
  } else if constexpr (std::is_same_v<E, std::complex<float>> || std::is_same_v<E, std::complex<double>>) {
    using R = typename E::value_type;
    return E(static_cast<R>(v + 1), -static_cast<R>(v + 1));
  } else {
    return static_cast<E>(static_cast<float>(v + 1));
  }
}

// Matrices, arrays and vectors of shape [rows, cols] (a vector: [n]).
template <class D>
D make_dense(Eigen::Index rows, Eigen::Index cols) {
  D d;
  d.resize(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j) {
      const std::array<Eigen::Index, 2> ij{i, j};
      const std::array<Eigen::Index, 1> k{D::IsVectorAtCompileTime ? i + j : 0};
      d(i, j) = D::IsVectorAtCompileTime ? value_at<typename D::Scalar>(k) : value_at<typename D::Scalar>(ij);
    }
  return d;
}

// Every element of a tensor, visited with its index.
template <class T, class F>
void for_each_index(const T& t, F&& f) {
  constexpr auto N = static_cast<std::size_t>(T::NumIndices);
  std::array<Eigen::Index, N> at{};
  for (Eigen::Index n = 0; n < t.size(); ++n) {
    f(at);
    for (std::size_t k = N; k-- > 0;) {
      if (++at[k] < t.dimension(static_cast<Eigen::Index>(k))) break;
      at[k] = 0;
    }
  }
}
template <class T>
void fill_tensor(T& t) {
  for_each_index(t, [&](const auto& at) { t(at) = value_at<typename T::Scalar>(at); });
}
template <class T>
bool same_tensor(const T& a, const T& b) {
  for (int k = 0; k < static_cast<int>(T::NumIndices); ++k)
    if (a.dimension(k) != b.dimension(k)) return false;
  bool same = true;
  for_each_index(a, [&](const auto& at) { same = same && a(at) == b(at); });
  return same;
}

struct Everything {
  Eigen::MatrixXf cm;                                                   // column-major, dynamic
  Eigen::Matrix<double, Dynamic, Dynamic, RowMajor> rm;                 // row-major, dynamic
  Eigen::Matrix3d fixed;                                                // column-major, fixed
  Eigen::Matrix<std::int32_t, 2, 3, RowMajor> fixed_rm;                 // row-major, fixed
  Eigen::Matrix<float, Dynamic, 3> half_fixed;                          // rows dynamic, cols fixed
  Eigen::VectorXd v;
  Eigen::RowVectorXf rv;
  Eigen::Array<std::int16_t, Dynamic, Dynamic> arr;
  Eigen::Array<bool, 3, 4> mask;
  Eigen::Array<std::int8_t, Dynamic, Dynamic> i8;
  Eigen::Matrix<std::int64_t, Dynamic, Dynamic> i64;
  Eigen::Array<std::uint8_t, Dynamic, 1> u8;
  Eigen::Matrix<std::uint16_t, Dynamic, Dynamic> u16;
  Eigen::Matrix<std::uint32_t, Dynamic, Dynamic, RowMajor> u32;
  Eigen::Matrix<std::uint64_t, Dynamic, Dynamic> u64;
  Eigen::Matrix<std::complex<float>, 2, 2> c64;
  Eigen::Matrix<std::complex<double>, Dynamic, Dynamic> c128;
  Eigen::Matrix<Eigen::half, Dynamic, Dynamic> f16;
  Eigen::Matrix<Eigen::bfloat16, Dynamic, Dynamic> bf16;
  Eigen::MatrixXf empty;                                                // [0, 3]
  Eigen::Tensor<float, 3> t3;                                           // column-major
  Eigen::Tensor<std::int32_t, 4, RowMajor> t4;
  Eigen::Tensor<double, 4> t4cm;
  Eigen::Tensor<double, 0> t0;
  Eigen::TensorFixedSize<std::int16_t, Eigen::Sizes<2, 3, 4>> tf;
  xt::xtensor<float, 2> x;                                              // beside an xtensor
};

Everything make_everything() {
  Everything e;
  e.cm = make_dense<Eigen::MatrixXf>(3, 4);
  e.rm = make_dense<decltype(e.rm)>(4, 3);
  e.fixed = make_dense<Eigen::Matrix3d>(3, 3);
  e.fixed_rm = make_dense<decltype(e.fixed_rm)>(2, 3);
  e.half_fixed = make_dense<decltype(e.half_fixed)>(5, 3);
  e.v = make_dense<Eigen::VectorXd>(7, 1);
  e.rv = make_dense<Eigen::RowVectorXf>(1, 6);
  e.arr = make_dense<decltype(e.arr)>(4, 5);
  e.mask = make_dense<decltype(e.mask)>(3, 4);
  e.i8 = make_dense<decltype(e.i8)>(3, 2);
  e.i64 = make_dense<decltype(e.i64)>(2, 5);
  e.u8 = make_dense<decltype(e.u8)>(9, 1);
  e.u16 = make_dense<decltype(e.u16)>(3, 3);
  e.u32 = make_dense<decltype(e.u32)>(2, 4);
  e.u64 = make_dense<decltype(e.u64)>(4, 2);
  e.c64 = make_dense<decltype(e.c64)>(2, 2);
  e.c128 = make_dense<decltype(e.c128)>(3, 2);
  e.f16 = make_dense<decltype(e.f16)>(2, 3);
  e.bf16 = make_dense<decltype(e.bf16)>(3, 2);
  e.empty.resize(0, 3);
  e.t3.resize(2, 3, 4);
  fill_tensor(e.t3);
  e.t4.resize(2, 3, 2, 3);
  fill_tensor(e.t4);
  e.t4cm.resize(3, 1, 2, 4);
  fill_tensor(e.t4cm);
  e.t0() = 1.0;
  fill_tensor(e.tf);
  e.x = {{1.5f, 2.5f}, {3.5f, 4.5f}};
  return e;
}

void check_equal(const Everything& a, const Everything& b) {
  CHECK(a.cm == b.cm);
  CHECK(a.rm == b.rm);
  CHECK(a.fixed == b.fixed);
  CHECK(a.fixed_rm == b.fixed_rm);
  CHECK(a.half_fixed == b.half_fixed);
  CHECK(a.v == b.v);
  CHECK(a.rv == b.rv);
  CHECK((a.arr == b.arr).all());
  CHECK((a.mask == b.mask).all());
  CHECK((a.i8 == b.i8).all());
  CHECK(a.i64 == b.i64);
  CHECK((a.u8 == b.u8).all());
  CHECK(a.u16 == b.u16);
  CHECK(a.u32 == b.u32);
  CHECK(a.u64 == b.u64);
  CHECK(a.c64 == b.c64);
  CHECK(a.c128 == b.c128);
  CHECK(a.f16 == b.f16);
  CHECK(a.bf16 == b.bf16);
  CHECK(b.empty.rows() == 0);
  CHECK(b.empty.cols() == 3);
  CHECK(same_tensor(a.t3, b.t3));
  CHECK(same_tensor(a.t4, b.t4));
  CHECK(same_tensor(a.t4cm, b.t4cm));
  CHECK(a.t0() == b.t0());
  CHECK(same_tensor(a.tf, b.tf));
  CHECK(a.x == b.x);
}

// numpy's view of the checkpoint (the repository's Python reader), each leaf compared
// with the values computed from np.indices: prints "path dtype shape ok|WRONG".
const char* py_check = R"(
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import ckpt
ck = ckpt.open(sys.argv[1])
for path in ck.paths():
    leaf = ck.info(path)
    a = np.asarray(ck.read(path))
    if leaf.dtype in ('none', 'string'):
        continue
    idx = np.indices(a.shape) if a.ndim else np.zeros((0,), dtype=np.int64)
    v = np.zeros(a.shape, dtype=np.int64)
    for d in range(a.ndim):
        v = v * 10 + idx[d]
    if leaf.dtype == 'bool':
        expected = (idx.sum(axis=0) % 2 == 1) if a.ndim else np.array(False)
    elif leaf.dtype.startswith('complex'):
        expected = (v + 1) - 1j * (v + 1)
    else:
        expected = v + 1
    ok = path == 'x' or (a.shape == tuple(leaf.shape) and np.array_equal(a, expected))
    print(path, leaf.dtype, list(a.shape), 'ok' if ok else 'WRONG ' + repr(a.tolist()))
)";

TEST_CASE("eigen: every kind and dtype round-trips, and numpy reads each with its shape, row-major") {
  test::TempDir tmp;
  const Everything e = make_everything();
  ckpt::save(tmp / "c", e);
  check_equal(e, ckpt::restore<Everything>(tmp / "c"));
  // restore_into existing values of the right shape, through the native leaf table
  Everything into = make_everything();
  into.cm.setZero();
  into.t3.setZero();
  ckpt::restore_into(tmp / "c", into);
  check_equal(e, into);

  // sys.argv[1] and [2]: the checkpoint and the reader's directory (the runner splits at spaces)
  const std::string out = test::python(py_check, (tmp / "c").string() + " " + std::string(CKPT_SOURCE_DIR) + "/python");
  INFO(out);
  CHECK(out.find("WRONG") == std::string::npos);
  for (const char* line : {"cm float32 [3, 4] ok", "rm float64 [4, 3] ok", "fixed float64 [3, 3] ok",
                           "fixed_rm int32 [2, 3] ok", "half_fixed float32 [5, 3] ok", "v float64 [7] ok",
                           "rv float32 [6] ok", "arr int16 [4, 5] ok", "mask bool [3, 4] ok", "i8 int8 [3, 2] ok",
                           "i64 int64 [2, 5] ok", "u8 uint8 [9] ok", "u16 uint16 [3, 3] ok", "u32 uint32 [2, 4] ok",
                           "u64 uint64 [4, 2] ok", "c64 complex64 [2, 2] ok", "c128 complex128 [3, 2] ok",
                           "f16 float16 [2, 3] ok", "bf16 bfloat16 [3, 2] ok", "empty float32 [0, 3] ok",
                           "t3 float32 [2, 3, 4] ok", "t4 int32 [2, 3, 2, 3] ok", "t4cm float64 [3, 1, 2, 4] ok",
                           "t0 float64 [] ok", "tf int16 [2, 3, 4] ok"})
    CHECK_MESSAGE(out.find(line) != std::string::npos, line);
}

// What numpy writes (a safetensors file built by hand from C-order arrays), read into
// column-major targets.
const char* py_write = R"(
import json, struct, sys
import numpy as np
arrays = {}
def val(shape):
    v = np.zeros(shape, dtype=np.int64)
    for d, i in enumerate(np.indices(shape)):
        v = v * 10 + i
    return v + 1
arrays['m'] = ('F32', val((3, 5)).astype('<f4'))
arrays['t'] = ('F64', val((2, 3, 4)).astype('<f8'))
arrays['i'] = ('I32', val((4, 2)).astype('<i4'))
header, blobs, at = {}, [], 0
for name, (dt, a) in arrays.items():
    b = np.ascontiguousarray(a).tobytes()
    header[name] = {'dtype': dt, 'shape': list(a.shape), 'data_offsets': [at, at + len(b)]}
    blobs.append(b)
    at += len(b)
h = json.dumps(header).encode()
h += b' ' * (-len(h) % 8)
with open(sys.argv[1], 'wb') as f:
    f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
)";

struct FromNumpy {
  Eigen::MatrixXf m;
  Eigen::Tensor<double, 3> t;
  Eigen::Matrix<std::int64_t, Dynamic, Dynamic> i;  // int32 in the file: a widening cast
};

TEST_CASE("eigen: arrays numpy wrote in C order read into column-major matrices and tensors") {
  test::TempDir tmp;
  test::python(py_write, tmp / "np.safetensors");
  const auto r = ckpt::restore<FromNumpy>(tmp / "np.safetensors");
  CHECK(r.m == make_dense<Eigen::MatrixXf>(3, 5));
  Eigen::Tensor<double, 3> t(2, 3, 4);
  fill_tensor(t);
  CHECK(same_tensor(r.t, t));
  CHECK(r.i == make_dense<Eigen::Matrix<std::int64_t, Dynamic, Dynamic>>(4, 2));
}

TEST_CASE("eigen: restore_into a Map or a TensorMap writes into the mapped memory, strides included") {
  test::TempDir tmp;
  struct Saved {
    Eigen::MatrixXd a;
    Eigen::Matrix<float, Dynamic, Dynamic, RowMajor> b;
    Eigen::Tensor<float, 3> t;
  } saved{make_dense<Eigen::MatrixXd>(3, 4), make_dense<decltype(Saved::b)>(2, 3), {}};
  saved.t.resize(2, 2, 3);
  fill_tensor(saved.t);
  ckpt::save(tmp / "c", saved);

  std::vector<double> a_mem(12, -1.0);
  std::vector<float> b_mem(2 * 5, -1.0f);  // a 2x3 window of a 2x5 column-major buffer: outer stride 2
  std::vector<float> t_mem(12, -1.0f);
  struct Maps {
    Eigen::Map<Eigen::MatrixXd> a;
    Eigen::Map<Eigen::MatrixXf, 0, Eigen::OuterStride<>> b;
    Eigen::TensorMap<Eigen::Tensor<float, 3>> t;
  } maps{{a_mem.data(), 3, 4}, {b_mem.data(), 2, 3, Eigen::OuterStride<>(2)}, {t_mem.data(), 2, 2, 3}};
  ckpt::restore_into(tmp / "c", maps);
  CHECK(Eigen::Map<Eigen::MatrixXd>(a_mem.data(), 3, 4) == saved.a);
  CHECK(maps.b == saved.b);
  CHECK(b_mem[6] == -1.0f);  // past the window: untouched
  CHECK(b_mem[1] == saved.b(1, 0));
  Eigen::Tensor<float, 3> t = Eigen::TensorMap<Eigen::Tensor<float, 3>>(t_mem.data(), 2, 2, 3);
  CHECK(same_tensor(t, saved.t));
  // A Map saves what it views: a strided window of a larger buffer.
  ckpt::save(tmp / "maps", maps);
  CHECK(ckpt::restore<Saved>(tmp / "maps").b == saved.b);

  // A Map of another shape cannot be resized: an error naming the path; nothing written.
  std::vector<double> small(6, -1.0);
  struct Wrong {
    Eigen::Map<Eigen::MatrixXd> a;
  } wrong{{small.data(), 2, 3}};
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", wrong, {.partial = true}), ckpt::ShapeMismatchError,
                    "a: shape [3,4] in checkpoint, [2,3] in target (an Eigen::Map");
  CHECK(small == std::vector<double>(6, -1.0));
  struct Const {
    Eigen::Map<const Eigen::MatrixXd> a;
  } constant{{a_mem.data(), 3, 4}};
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", constant, {.partial = true}), ckpt::Error, "a: cannot restore into an Eigen::Map of const");
}

TEST_CASE("eigen: lazy leaves, allocate<T>, dtype casts and a column-major restore in pieces") {
  test::TempDir tmp;
  struct Saved {
    Eigen::MatrixXf w;
    Eigen::Tensor<float, 2> big;  // 1000 x 700 floats: several 1 MiB pieces, cut mid-row
    Eigen::Matrix<std::int64_t, Dynamic, Dynamic> n;
    Eigen::Tensor<float, 3> cube;  // 40 x 100 x 90: pieces cut mid-row and mid-slice
  } saved{make_dense<Eigen::MatrixXf>(4, 3), Eigen::Tensor<float, 2>(1000, 700),
          make_dense<Eigen::Matrix<std::int64_t, Dynamic, Dynamic>>(2, 3), Eigen::Tensor<float, 3>(40, 100, 90)};
  for (Eigen::Index i = 0; i < 1000; ++i)
    for (Eigen::Index j = 0; j < 700; ++j) saved.big(i, j) = static_cast<float>(i * 700 + j);
  for_each_index(saved.cube, [&](const auto& at) { saved.cube(at) = static_cast<float>((at[0] * 100 + at[1]) * 90 + at[2]); });
  ckpt::save(tmp / "c", saved);

  struct Lazy {
    ckpt::lazy<Eigen::MatrixXf> w;
    ckpt::lazy<Eigen::Tensor<float, 2>> big;
    Eigen::Matrix<std::int64_t, Dynamic, Dynamic> n;
    Eigen::Tensor<float, 3> cube;
  };
  const auto l = ckpt::restore<Lazy>(tmp / "c");
  CHECK_FALSE(l.w.loaded());
  CHECK(l.w.shape() == ckpt::Shape{4, 3});
  CHECK(l.w.get() == saved.w);
  CHECK(same_tensor(l.big.get(), saved.big));

  // allocate: shapes from the metadata, zeros; restore_into then fills the same memory
  auto a = ckpt::allocate<Saved>(tmp / "c");
  CHECK(a.w.rows() == 4);
  CHECK(a.w.cols() == 3);
  CHECK(a.w.isZero());
  CHECK(a.big.dimension(0) == 1000);
  CHECK(a.big.dimension(1) == 700);
  const float* w_data = a.w.data();
  ckpt::restore_into(tmp / "c", a);
  CHECK(a.w.data() == w_data);
  CHECK(a.w == saved.w);

  // casts: float32 into double and int64 into int32 (each value fits); a budget makes
  // the column-major leaf arrive in pieces
  struct Wider {
    Eigen::MatrixXd w;
    Eigen::Tensor<double, 2> big;
    Eigen::Matrix<std::int32_t, Dynamic, Dynamic> n;
    Eigen::Tensor<double, 3> cube;
  };
  const auto w = ckpt::restore<Wider>(tmp / "c", {.max_memory = std::uint64_t{3} << 20});
  CHECK(w.w == saved.w.cast<double>());
  Eigen::Tensor<double, 2> big_d = saved.big.cast<double>();
  CHECK(same_tensor(w.big, big_d));
  CHECK(w.n == saved.n.cast<std::int32_t>());
  Eigen::Tensor<double, 3> cube_d = saved.cube.cast<double>();
  CHECK(same_tensor(w.cube, cube_d));
  CHECK(same_tensor(l.cube, saved.cube));
  // narrowing a float needs restore_dtype
  struct Narrow {
    Eigen::Matrix<Eigen::half, Dynamic, Dynamic> w;
  };
  CHECK_THROWS_CKPT(ckpt::restore<Narrow>(tmp / "c", {.partial = true}), ckpt::DtypeMismatchError, "w: dtype float32 in checkpoint, float16");
  const auto h = ckpt::restore<Narrow>(tmp / "c", {.partial = true, .restore_dtype = ckpt::dtype::float16});
  CHECK(h.w == saved.w.cast<Eigen::half>());
}

TEST_CASE("eigen: a shape that does not fit a fixed-size type is an error naming the path") {
  test::TempDir tmp;
  struct Saved {
    Eigen::MatrixXf m;
    Eigen::VectorXf v;
    Eigen::Tensor<float, 3> t;
  } saved{make_dense<Eigen::MatrixXf>(2, 4), make_dense<Eigen::VectorXf>(5, 1), Eigen::Tensor<float, 3>(2, 2, 2)};
  saved.t.setZero();
  ckpt::save(tmp / "c", saved);
  struct Fixed {
    Eigen::Matrix3f m;
  };
  CHECK_THROWS_CKPT(ckpt::restore<Fixed>(tmp / "c", {.partial = true}), ckpt::ShapeMismatchError,
                    "m: shape [2,4] in checkpoint, [3,3] in target (an Eigen type of fixed size)");
  struct ColsFixed {
    Eigen::Matrix<float, Dynamic, 3> m;
  };
  CHECK_THROWS_CKPT(ckpt::restore<ColsFixed>(tmp / "c", {.partial = true}), ckpt::ShapeMismatchError, "m: shape [2,4] in checkpoint, [any,3]");
  struct Bounded {
    Eigen::Matrix<float, Dynamic, 1, 0, 4, 1> v;
  };
  CHECK_THROWS_CKPT(ckpt::restore<Bounded>(tmp / "c", {.partial = true}), ckpt::ShapeMismatchError, "v: shape [5] in checkpoint, at most [4]");
  struct RankTwo {
    Eigen::MatrixXf v;
  };
  CHECK_THROWS_CKPT(ckpt::restore<RankTwo>(tmp / "c", {.partial = true}), ckpt::ShapeMismatchError, "v: rank 1 (shape [5]) in checkpoint, rank 2");
  struct FixedTensor {
    Eigen::TensorFixedSize<float, Eigen::Sizes<2, 2, 3>> t;
  };
  CHECK_THROWS_CKPT(ckpt::restore<FixedTensor>(tmp / "c", {.partial = true}), ckpt::ShapeMismatchError,
                    "t: shape [2,2,2] in checkpoint, [2,2,3] in target");
  // restore_into a dynamic matrix that already has another shape
  Saved other{Eigen::MatrixXf::Zero(3, 3), {}, {}};
  CHECK_THROWS_CKPT(ckpt::restore_into(tmp / "c", other), ckpt::ShapeMismatchError, "m: shape [2,4] in checkpoint, [3,3]");
}

}  // namespace eigen_test

#endif

// A test-only stand-in for <metal_stdlib>: enough of the Metal Shading Language, spelled in C++17,
// for `clang++ -x c++ -std=c++17 -fsyntax-only -Wall -Werror -I tests/metal -include
// tests/metal/metal_stub.h K.metal` to check the syntax and the types of what uopc renders for Metal
// on a machine without Xcode.
//
// What the check catches:
// - C++ syntax errors, undeclared names, unused variables (-Wall), wrong argument counts;
// - attributes: `[[buffer(n)]]`, `[[threadgroup_position_in_grid]]` and friends are macros that
//   become `clang::annotate(...)`, so a misspelled attribute is still an unknown attribute (an error);
// - `as_type<T>(x)` between types of different sizes (a static_assert, as Metal's compiler says);
// - vector types: Metal's 2-, 3- and 4-element vectors of every scalar, built from scalars or by an
//   explicit conversion `float4(int4)`, subscripts and .xyzw members, component-wise operators and
//   comparisons giving bool vectors; `c ? a : b` with a vector condition does not compile (Metal
//   needs select()), nor does an implicit conversion between vector types.
//
// What it does not catch (Metal's own compiler on macOS does):
// - address spaces: `device`, `constant`, `threadgroup` and `thread` are empty macros. (clang's
//   address_space attribute would check them, but C++ classes, which half and the vectors are here,
//   cannot be assigned or copied in a non-default address space.) Their placement is still parsed;
// - `half` and `bfloat` are 2-byte classes that convert to and from float, with their own + - * /;
//   a mixed half/float operation is ambiguous here (Metal computes it in float); Metal's literal
//   suffixes (1.0h) do not exist here (uopc writes half(1.0f) instead);
// - integer promotion: C++ and Metal agree (char + char is int), which the renderer relies on;
// - attribute placement and argument-table rules, function-constant and resource limits, and the
//   precision of the math library (declared, never defined: this header is for -fsyntax-only).
#pragma once

#define kernel extern "C"
#define device
#define constant
#define threadgroup
#define thread

#define buffer(n) clang::annotate("buffer", n)
#define threadgroup_position_in_grid clang::annotate("threadgroup_position_in_grid")
#define thread_position_in_threadgroup clang::annotate("thread_position_in_threadgroup")
#define thread_position_in_grid clang::annotate("thread_position_in_grid")

#define NAN __builtin_nanf("")
#define INFINITY __builtin_inff()

#include <type_traits>

namespace metal {
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;

template <int Kind> struct float16_storage {  // Kind 0: IEEE half, 1: bfloat
  unsigned short bits;
  float16_storage() = default;
  float16_storage(float);
  operator float() const;
  // half op half is half in Metal (a mixed half/float operation is ambiguous here: uopc writes none)
  friend float16_storage operator+(float16_storage, float16_storage);
  friend float16_storage operator-(float16_storage, float16_storage);
  friend float16_storage operator*(float16_storage, float16_storage);
  friend float16_storage operator/(float16_storage, float16_storage);
  friend float16_storage operator-(float16_storage);
};
typedef float16_storage<0> half;
typedef float16_storage<1> bfloat;

template <class T, int N> struct vec_members;
template <class T> struct vec_members<T, 2> { T x, y; };
template <class T> struct vec_members<T, 3> { T x, y, z, pad_; };  // a 3-vector is as big as a 4-vector
template <class T> struct vec_members<T, 4> { T x, y, z, w; };

template <class T, int N> struct vec : vec_members<T, N> {
  typedef T scalar;
  vec() = default;
  explicit vec(T broadcast);
  template <class... A, class = std::enable_if_t<sizeof...(A) == N && (std::is_convertible_v<A, T> && ...)>>
  vec(A... lanes);
  template <class U> explicit vec(vec<U, N> other);
  T &operator[](int lane);
  T operator[](int lane) const;
};

template <class T> using same_t = typename std::common_type<T>::type;  // blocks deduction from a scalar operand

#define METAL_STUB_BINARY(OP, R)                                                             \
  template <class T, int N> vec<R, N> operator OP(vec<T, N>, vec<T, N>);                  \
  template <class T, int N> vec<R, N> operator OP(vec<T, N>, same_t<T>);                  \
  template <class T, int N> vec<R, N> operator OP(same_t<T>, vec<T, N>);
METAL_STUB_BINARY(+, T) METAL_STUB_BINARY(-, T) METAL_STUB_BINARY(*, T) METAL_STUB_BINARY(/, T)
METAL_STUB_BINARY(%, T) METAL_STUB_BINARY(&, T) METAL_STUB_BINARY(|, T) METAL_STUB_BINARY(^, T)
METAL_STUB_BINARY(<<, T) METAL_STUB_BINARY(>>, T) METAL_STUB_BINARY(&&, bool) METAL_STUB_BINARY(||, bool)
METAL_STUB_BINARY(<, bool) METAL_STUB_BINARY(>, bool) METAL_STUB_BINARY(<=, bool) METAL_STUB_BINARY(>=, bool)
METAL_STUB_BINARY(==, bool) METAL_STUB_BINARY(!=, bool)
#undef METAL_STUB_BINARY
template <class T, int N> vec<T, N> operator-(vec<T, N>);
template <class T, int N> vec<T, N> operator~(vec<T, N>);
template <class T, int N> vec<bool, N> operator!(vec<T, N>);

#define METAL_STUB_VECTORS(T)                                                                 \
  typedef vec<T, 2> T##2;                                                                    \
  typedef vec<T, 3> T##3;                                                                    \
  typedef vec<T, 4> T##4;
METAL_STUB_VECTORS(bool) METAL_STUB_VECTORS(char) METAL_STUB_VECTORS(uchar) METAL_STUB_VECTORS(short)
METAL_STUB_VECTORS(ushort) METAL_STUB_VECTORS(int) METAL_STUB_VECTORS(uint) METAL_STUB_VECTORS(long)
METAL_STUB_VECTORS(ulong) METAL_STUB_VECTORS(half) METAL_STUB_VECTORS(bfloat) METAL_STUB_VECTORS(float)
#undef METAL_STUB_VECTORS

// Relational functions give bool for a scalar and a bool vector for a vector, as in Metal.
template <class T> struct bool_like { typedef bool type; };
template <class T, int N> struct bool_like<vec<T, N>> { typedef vec<bool, N> type; };
template <class T> typename bool_like<T>::type isnan(T);
template <class T> typename bool_like<T>::type isunordered(T, T);
template <class T> T select(T if_false, T if_true, typename bool_like<T>::type condition);

// One type for all operands, as Metal's overloads want: max(float, int) does not compile.
template <class T> T max(T, T);
template <class T> T min(T, T);
template <class T> T trunc(T);
template <class T> T fma(T, T, T);
namespace precise {
template <class T> T sqrt(T);
template <class T> T exp2(T);
template <class T> T log2(T);
template <class T> T sin(T);
template <class T> T pow(T, T);
}  // namespace precise

template <class T, class U> T as_type(U value) {
  static_assert(sizeof(T) == sizeof(U), "as_type needs types of the same size");
  return *reinterpret_cast<T *>(&value);
}

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2 };
void threadgroup_barrier(mem_flags);
}  // namespace metal

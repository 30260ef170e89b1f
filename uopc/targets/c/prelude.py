"""The C prelude: includes, types and helpers emitted once at the top of every generated C file.

Generated from tables so that every scalar dtype gets the same helpers; the text is fixed (no input
depends on it), so two builds give the same file.
"""
from __future__ import annotations

from uopc.dtype import INTS, DType, dtypes

# C spelling of each scalar dtype. float16/bfloat16 values are carried as their 16 bits and
# converted to float for arithmetic; bool vectors use uint8_t lanes holding 0 or 1.
C_SCALAR: dict[DType, str] = {
  dtypes.bool: "bool", dtypes.int8: "int8_t", dtypes.int16: "int16_t", dtypes.int32: "int32_t",
  dtypes.int64: "int64_t", dtypes.uint8: "uint8_t", dtypes.uint16: "uint16_t", dtypes.uint32: "uint32_t",
  dtypes.uint64: "uint64_t", dtypes.float16: "uopc_half", dtypes.bfloat16: "uopc_bfloat16",
  dtypes.float32: "float", dtypes.float64: "double", dtypes.index: "int64_t",
}
VECTOR_LANES = (2, 4, 8, 16, 32)  # vector_size needs a power of two; other counts use the next one up


def vector_type_name(scalar: DType, lanes: int) -> str:
  return f"uopc_{'int64' if scalar is dtypes.index else scalar.name}x{lanes}"


def _lane_type(scalar: DType) -> str:
  return "uint8_t" if scalar is dtypes.bool else "uint16_t" if scalar.itemsize == 2 and scalar.is_float() else C_SCALAR[scalar]


def _vector_typedefs() -> str:
  scalars = [d for d in C_SCALAR if d is not dtypes.index]
  return "\n".join(f"typedef {_lane_type(d)} {vector_type_name(d, n)} __attribute__((vector_size({n * d.itemsize})));"
                   for d in scalars for n in VECTOR_LANES)


def _int_division_helpers() -> str:
  """Truncating IDIV/MOD (C's / and %, but INT_MIN / -1 wraps instead of trapping) and floor variants."""
  out = []
  for d in INTS:
    t, name = C_SCALAR[d], d.name
    if d.is_unsigned():
      out += [f"UOPC_HELPER {t} uopc_idiv_{name}({t} a, {t} b) {{ return ({t})(a / b); }}",
              f"UOPC_HELPER {t} uopc_mod_{name}({t} a, {t} b) {{ return ({t})(a % b); }}",
              f"UOPC_HELPER {t} uopc_floordiv_{name}({t} a, {t} b) {{ return ({t})(a / b); }}",
              f"UOPC_HELPER {t} uopc_floormod_{name}({t} a, {t} b) {{ return ({t})(a % b); }}"]
      continue
    u = "uint64_t" if d.itemsize == 8 else "uint32_t"
    out += [
      f"UOPC_HELPER {t} uopc_idiv_{name}({t} a, {t} b) {{ return b == -1 ? ({t})(({u})0 - ({u})a) : ({t})(a / b); }}",
      f"UOPC_HELPER {t} uopc_mod_{name}({t} a, {t} b) {{ return b == -1 ? ({t})0 : ({t})(a % b); }}",
      f"UOPC_HELPER {t} uopc_floordiv_{name}({t} a, {t} b) {{\n"
      f"  {t} q = uopc_idiv_{name}(a, b);\n"
      f"  return (uopc_mod_{name}(a, b) != 0 && ((a < 0) != (b < 0))) ? ({t})(({u})q - 1u) : q;\n}}",
      f"UOPC_HELPER {t} uopc_floormod_{name}({t} a, {t} b) {{\n"
      f"  {t} r = uopc_mod_{name}(a, b);\n"
      f"  return (r != 0 && ((r < 0) != (b < 0))) ? ({t})(({u})r + ({u})b) : r;\n}}"]
  return "\n".join(out)


_CONVERSIONS = r"""
/* helpers are unused in most files; the attribute keeps clang's -Wunused-function quiet */
#define UOPC_HELPER static inline __attribute__((unused))

/* float16 and bfloat16 values are their IEEE bits; arithmetic converts to float and rounds back once. */
typedef uint16_t uopc_half;
typedef uint16_t uopc_bfloat16;

/* Round a double to a binary float with `mbits` mantissa and `ebits` exponent bits, to nearest even,
   in integer arithmetic (no dependence on the FPU rounding mode); NaN stays NaN (quieted), the sign
   of zero is kept, overflow gives infinity. */
UOPC_HELPER uint16_t uopc_round_double(double x, int mbits, int ebits) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  uint16_t sign = (uint16_t)((b >> 63) << (mbits + ebits));
  uint64_t a = b & 0x7FFFFFFFFFFFFFFFull;
  uint16_t inf = (uint16_t)(((1u << ebits) - 1u) << mbits);
  if (a > 0x7FF0000000000000ull)
    return (uint16_t)(sign | inf | (1u << (mbits - 1)) | ((a >> (52 - mbits)) & ((1u << mbits) - 1u)));
  int bias = (1 << (ebits - 1)) - 1;
  int e = (int)(a >> 52) - 1023;
  if (e > bias) return (uint16_t)(sign | inf);
  uint64_t m = (a & 0xFFFFFFFFFFFFFull) | (e > -1023 ? 1ull << 52 : 0);
  int subnormal = e < 1 - bias;
  int shift = 52 - mbits + (subnormal ? 1 - bias - e : 0);
  if (shift > 63) return sign;
  uint64_t q = m >> shift, rem = m & ((1ull << shift) - 1u), half = 1ull << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) q++;
  uint64_t enc = subnormal ? q : ((uint64_t)(e + bias) << mbits) + q - (1ull << mbits);
  return (uint16_t)(sign | (enc >= inf ? inf : (uint16_t)enc));
}
#if defined(__F16C__)
#include <immintrin.h>
/* F16C's conversions (x86-64-v3 and later: --cpu native): one rounding to nearest even, as the
   software path; a value that is not exactly a float takes the software path (no double rounding). */
UOPC_HELPER uopc_half uopc_double_to_half(double x) {
  float f = (float)x;
  if ((double)f == x) return (uopc_half)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
  return uopc_round_double(x, 10, 5);
}
#else
UOPC_HELPER uopc_half uopc_double_to_half(double x) { return uopc_round_double(x, 10, 5); }
#endif
UOPC_HELPER uopc_bfloat16 uopc_double_to_bfloat16(double x) { return uopc_round_double(x, 7, 8); }

#if defined(__F16C__)
UOPC_HELPER float uopc_half_to_float(uopc_half h) { return _cvtsh_ss(h); }
#else
UOPC_HELPER float uopc_half_to_float(uopc_half h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, bits;
  if (e == 0) {
    float f = (float)m * 0x1p-24f;  /* zero or subnormal: exact */
    return sign ? -f : f;
  }
  bits = sign | (e == 0x1Fu ? 0x7F800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}
#endif
UOPC_HELPER float uopc_bfloat16_to_float(uopc_bfloat16 h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Lanes of two vectors of one type as a vector of that type (one shuffle instruction where the target
   has it): clang's __builtin_shufflevector, GCC's __builtin_shuffle with a mask of integers as wide as
   the lanes (GCC makes a vector built lane by lane from loaded vectors scalar loads again). */
#if defined(__clang__)
#define UOPC_SHUFFLE(mask_type, a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define UOPC_SHUFFLE(mask_type, a, b, ...) __builtin_shuffle(a, b, (mask_type){__VA_ARGS__})
#endif

/* MAX of floats: NaN if either operand is NaN (fmax would drop the NaN). */
UOPC_HELPER float uopc_maxf(float a, float b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }
UOPC_HELPER double uopc_max(double a, double b) { return (a != a || b != b) ? a + b : (a > b ? a : b); }

/* Non-temporal stores of large outputs written once (see uopc/targets/c/render.py): SSE2's movntdq
   where the compiler has it, `bytes` a multiple of 16 and dst 16-byte aligned; plain stores elsewhere. */
#if defined(__SSE2__)
UOPC_HELPER void uopc_stream_store(void* dst, const void* src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 16) {
    __m128i v;
    memcpy(&v, (const char*)src + i, 16);
    _mm_stream_si128((__m128i*)(void*)((char*)dst + i), v);
  }
}
#define UOPC_STREAM_FENCE() _mm_sfence()
#else
UOPC_HELPER void uopc_stream_store(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
#define UOPC_STREAM_FENCE() ((void)0)
#endif

/* Threefry-2x32, 20 rounds (SPEC-NOTES): the 32-bit halves of x and key are the two words. */
UOPC_HELPER uint32_t uopc_rotl32(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }
UOPC_HELPER uint64_t uopc_threefry2x32(uint64_t x, uint64_t key) {
  static const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  uint32_t ks[3] = {k1, k0 ^ k1 ^ 0x1BD11BDAu, k0};
  uint32_t x0 = (uint32_t)x + ks[2], x1 = (uint32_t)(x >> 32) + ks[0];
  for (int i = 0; i < 5; i++) {
    for (int j = 0; j < 4; j++) {
      x0 += x1;
      x1 = uopc_rotl32(x1, rot[i % 2][j]) ^ x0;
    }
    x0 += ks[i % 3];
    x1 += ks[(i + 1) % 3] + (uint32_t)i + 1u;
  }
  return ((uint64_t)x1 << 32) | x0;
}
"""

def _half_vector_helpers() -> str:
  """float16 vectors widened to float32 vectors and rounded back, whole: F16C's conversions (AVX-512's for 16
  lanes) where the build has them (--cpu native on x86-64-v3 and later), else lane by lane with the scalar
  helpers. Each result lane is exactly the scalar conversion's (one rounding to nearest even). The
  functions take pointers (a wide vector passed by value changes the ABI without AVX: GCC's -Wpsabi);
  the macros give the renderer expressions (GNU statement expressions, as the vector types are GNU)."""
  out = []
  for n in VECTOR_LANES:
    h, f = vector_type_name(dtypes.float16, n), vector_type_name(dtypes.float32, n)
    widen = narrow = ""
    if n == 8:
      widen = f"#if defined(__F16C__)\n  *r = ({f})_mm256_cvtph_ps((__m128i)*v); return;\n#endif\n"
      narrow = f"#if defined(__F16C__)\n  *r = ({h})_mm256_cvtps_ph((__m256)*v, _MM_FROUND_TO_NEAREST_INT); return;\n#endif\n"
    if n == 16:
      widen = f"#if defined(__AVX512F__)\n  *r = ({f})_mm512_cvtph_ps((__m256i)*v); return;\n#endif\n"
      narrow = f"#if defined(__AVX512F__)\n  *r = ({h})_mm512_cvtps_ph((__m512)*v, _MM_FROUND_TO_NEAREST_INT); return;\n#endif\n"
    if n > 8:  # in halves: AVX2 builds for 16 lanes, every F16C build for 32
      m = n // 2
      hh, ff = vector_type_name(dtypes.float16, m), vector_type_name(dtypes.float32, m)
      widen += (f"#if defined(__F16C__)\n  uopc_h2f_x{m}(({ff}*)r, (const {hh}*)v); uopc_h2f_x{m}(({ff}*)r + 1, (const {hh}*)v + 1); return;\n#endif\n")
      narrow += (f"#if defined(__F16C__)\n  uopc_f2h_x{m}(({hh}*)r, (const {ff}*)v); uopc_f2h_x{m}(({hh}*)r + 1, (const {ff}*)v + 1); return;\n#endif\n")
    out.append(f"UOPC_HELPER void uopc_h2f_x{n}({f}* r, const {h}* v) {{\n{widen}"
               f"  for (int i = 0; i < {n}; i++) (*r)[i] = uopc_half_to_float((*v)[i]);\n}}")
    out.append(f"UOPC_HELPER void uopc_f2h_x{n}({h}* r, const {f}* v) {{\n{narrow}"
               f"  for (int i = 0; i < {n}; i++) (*r)[i] = uopc_double_to_half((*v)[i]);\n}}")
    out.append(f"#define uopc_half_to_float_x{n}(x) __extension__ ({{ {h} uopc_hv_ = (x); {f} uopc_fv_; uopc_h2f_x{n}(&uopc_fv_, &uopc_hv_); uopc_fv_; }})")
    out.append(f"#define uopc_float_to_half_x{n}(x) __extension__ ({{ {f} uopc_fv_ = (x); {h} uopc_hv_; uopc_f2h_x{n}(&uopc_hv_, &uopc_fv_); uopc_hv_; }})")
  for n in VECTOR_LANES:  # bfloat16: the upper half of a float, rounded to nearest even in integer lanes
    b, f = vector_type_name(dtypes.bfloat16, n), vector_type_name(dtypes.float32, n)
    u, i = vector_type_name(dtypes.uint32, n), vector_type_name(dtypes.int32, n)
    out.append(f"#define uopc_bfloat16_to_float_x{n}(x) __extension__ ({{ {b} uopc_bv_ = (x); ({f})(__builtin_convertvector(uopc_bv_, {u}) << 16); }})")
    out.append(f"#define uopc_float_to_bfloat16_x{n}(x) __extension__ ({{ {u} uopc_u_ = ({u})(x); "
               f"{u} uopc_nan_ = ({u})({i})((uopc_u_ & 0x7FFFFFFFu) > 0x7F800000u); "
               f"{u} uopc_r_ = ((uopc_u_ + 0x7FFFu + ((uopc_u_ >> 16) & 1u)) >> 16 & ~uopc_nan_) | (((uopc_u_ >> 16) | 0x40u) & uopc_nan_); "
               f"__builtin_convertvector(uopc_r_, {b}); }})")
  return "\n".join(out)


# NaN-propagating MAX of whole float vectors (see the renderer): x86's max is `a > b ? a : b` exactly (the
# second operand when either is NaN or both are zeros), so the result is max(a, b) with a + b in the lanes
# where either is NaN: three instructions with AVX-512 (a masked add), four with AVX (a blend), instead
# of the generic form's two comparisons, their union and two selects. Bit for bit the generic form's
# value, which the third argument is (used where the build lacks the instructions).
_VMAX = {(dtypes.float32, 16): ("__AVX512F__", "__m512", "_mm512", "ps"), (dtypes.float64, 8): ("__AVX512F__", "__m512d", "_mm512", "pd"),
         (dtypes.float32, 8): ("__AVX__", "__m256", "_mm256", "ps"), (dtypes.float64, 4): ("__AVX__", "__m256d", "_mm256", "pd")}


def _vector_max_helpers() -> str:
  out = ["#if defined(__AVX__)\n#include <immintrin.h>\n#endif"]
  for (dt, n), (macro, vt, pre, sfx) in _VMAX.items():
    name, t = f"uopc_vmax_{dt.name}x{n}", vector_type_name(dt, n)
    head = f"__extension__ ({{ {vt} uopc_a_ = ({vt})(a), uopc_b_ = ({vt})(b), uopc_m_ = {pre}_max_{sfx}(uopc_a_, uopc_b_); "
    if n * dt.itemsize == 64:
      body = f"({t}){pre}_mask_add_{sfx}(uopc_m_, {pre}_cmp_{sfx}_mask(uopc_a_, uopc_b_, _CMP_UNORD_Q), uopc_a_, uopc_b_); }})"
    else:
      body = f"({t}){pre}_blendv_{sfx}(uopc_m_, {pre}_add_{sfx}(uopc_a_, uopc_b_), {pre}_cmp_{sfx}(uopc_a_, uopc_b_, _CMP_UNORD_Q)); }})"
    out.append(f"#if defined({macro})\n#define {name}(a, b, generic) {head}{body}\n#else\n#define {name}(a, b, generic) (generic)\n#endif")
  return "\n".join(out)


def vector_max(dt, count: int) -> str | None:
  """The prelude's macro for MAX of float vectors of this dtype and C lane count, or None."""
  return f"uopc_vmax_{dt.name}x{count}" if (dt, count) in _VMAX else None


# Masked vector loads: a LOAD whose gate is a bool vector (Expand's vector loads with a gate per lane, such as
# a padded convolution's border taps) reads only the lanes whose gate is set and takes `alt` in the others,
# so a masked lane's address may lie outside the buffer. AVX-512's masked loads (AVX2's maskload and a
# blend for 256 and 128 bits) where the build has them; else lane by lane. Keyed by (element bytes, C lanes).
_MASKED = {(4, 16): ("_mm512_mask_loadu_epi32", "__m512i", "__mmask16"), (8, 8): ("_mm512_mask_loadu_epi64", "__m512i", "__mmask8"),
           (4, 8): ("_mm256_mask_loadu_epi32", "__m256i", "__mmask8"), (8, 4): ("_mm256_mask_loadu_epi64", "__m256i", "__mmask8"),
           (4, 4): ("_mm_mask_loadu_epi32", "__m128i", "__mmask8"), (8, 2): ("_mm_mask_loadu_epi64", "__m128i", "__mmask8")}
_MASKED_AVX2 = {(4, 8): ("_mm256_maskload_epi32", "int", "_mm256_blendv_epi8", "__m256i", "uopc_int32x8"),
                (8, 4): ("_mm256_maskload_epi64", "long long", "_mm256_blendv_epi8", "__m256i", "uopc_int64x4"),
                (4, 4): ("_mm_maskload_epi32", "int", "_mm_blendv_epi8", "__m128i", "uopc_int32x4"),
                (8, 2): ("_mm_maskload_epi64", "long long", "_mm_blendv_epi8", "__m128i", "uopc_int64x2")}


def _masked_load_helpers() -> str:
  out = ["#define uopc_mload(T, p, m, alt, n) __extension__ ({ T uopc_a_ = (alt); __typeof__(m) uopc_m_ = (m); "
         "for (int uopc_i_ = 0; uopc_i_ < (n); uopc_i_++) if (uopc_m_[uopc_i_]) uopc_a_[uopc_i_] = (p)[uopc_i_]; uopc_a_; })"]
  for (size, lanes), (fn, vt, mt) in _MASKED.items():
    name, guard = f"uopc_mload_b{size}x{lanes}", "defined(__AVX512F__)" + (" && defined(__AVX512VL__)" if lanes * size < 64 else "")
    out.append(f"#if {guard}\n#define {name}(T, p, m, alt, n) __extension__ ({{ T uopc_a_ = (alt); __typeof__(m) uopc_m_ = (m); "
               f"unsigned uopc_k_ = 0; for (int uopc_i_ = 0; uopc_i_ < (n); uopc_i_++) uopc_k_ |= (unsigned)(uopc_m_[uopc_i_] != 0) << uopc_i_; "
               f"(T){fn}(({vt})uopc_a_, ({mt})uopc_k_, (const void*)(p)); }})")
    if (size, lanes) in _MASKED_AVX2:
      load, et, blend, vt2, kt = _MASKED_AVX2[(size, lanes)]
      out.append(f"#elif defined(__AVX2__)\n#define {name}(T, p, m, alt, n) __extension__ ({{ T uopc_a_ = (alt); __typeof__(m) uopc_m_ = (m); "
                 f"{kt} uopc_k_; for (int uopc_i_ = 0; uopc_i_ < {lanes}; uopc_i_++) uopc_k_[uopc_i_] = uopc_i_ < (n) && uopc_m_[uopc_i_] ? -1 : 0; "
                 f"(T){blend}(({vt2})uopc_a_, {load}((const {et}*)(p), ({vt2})uopc_k_), ({vt2})uopc_k_); }})")
    out.append(f"#else\n#define {name}(T, p, m, alt, n) uopc_mload(T, p, m, alt, n)\n#endif")
  return "\n".join(out)


def masked_load(dt: DType, ptr: str, gate: str, alt: str) -> str:
  """The C expression of a LOAD of vector dtype `dt` from `ptr` with a bool vector `gate` (see _MASKED)."""
  from uopc.targets.c.scalar import _lanes
  lanes = _lanes(dt.count)
  t = vector_type_name(dt.scalar, lanes)
  helper = f"uopc_mload_b{dt.scalar.itemsize}x{lanes}" if (dt.scalar.itemsize, lanes) in _MASKED else "uopc_mload"
  return f"{helper}({t}, {ptr}, {gate}, {alt}, {dt.count})"


C_PRELUDE = "\n".join([
  "/* Generated by uopc. C99 with the GCC/Clang vector extension __attribute__((vector_size)):",
  "   compile with -std=c99 (or -std=gnu99 -ffp-contract=off) without -pedantic; link with -lm. */",
  "#include <math.h>",
  "#include <stdbool.h>",
  "#include <stdint.h>",
  "#include <string.h>",
  "#if defined(__SSE2__)",
  "#include <emmintrin.h> /* uopc_stream_store */",
  "#endif",
  "#if defined(__clang__)",
  "#pragma STDC FP_CONTRACT OFF /* one rounding per op (GCC: -std=c99 or -ffp-contract=off) */",
  "#endif",
  "/* A whole vector is stored through an unaligned vector type, not memcpy: GCC 12.2 at -O3 with AVX-512",
  "   (-march=x86-64-v4) turns a 32-byte memcpy of a constant vector into a 256-bit integer move and then",
  "   materializes some such constants wrongly ({2, 2, 0, 0} stored as {2, 2, 2, 2}). Stores to a kernel's",
  "   local arrays (accumulators) keep memcpy, which GCC turns into registers (may_alias would keep them in memory). */",
  "#define uopc_vstore(p, v) do { typedef __typeof__(v) uopc_vs_t_ __attribute__((aligned(1), may_alias)); "
  "*(uopc_vs_t_*)(void*)(p) = (v); } while (0)",
  "#if defined(__GNUC__) && !defined(__clang__)",
  "/* GCC's loop vectorizer miscompiles in-order float reductions over reversed loads (GCC 11.3 at -O3 and",
  "   12.2 at -O2 sum some elements twice); uopc vectorizes the kernels itself, so nothing is lost. */",
  '#pragma GCC optimize ("no-tree-loop-vectorize")',
  "#endif",
  _CONVERSIONS.strip(),
  "",
  _int_division_helpers(),
  "",
  _vector_typedefs(),
  "",
  _half_vector_helpers(),
  "",
  _vector_max_helpers(),
  "",
])
MASKED_LOAD_HELPERS = _masked_load_helpers()


def c_prelude(kernel_sources) -> str:
  """The prelude of a C file with these kernels: the masked-load helpers only where a kernel uses them (so
  that every other file is what it was before they existed)."""
  return C_PRELUDE + ("\n" + MASKED_LOAD_HELPERS + "\n" if any("uopc_mload" in k for k in kernel_sources) else "")

// comm_gloo_reduce.cc: per-dtype reduction functions for the Gloo collectives. f16 and bf16
// reduce through float (c/common/numeric.h); integers wrap like two's complement hardware;
// bool sum/max are "or" and prod/min are "and"; float min/max propagate NaN.
#include "comm_gloo_reduce.h"

#include <cmath>
#include <type_traits>

#include "../common/internal.h"
#include "../common/numeric.h"

namespace {

// How a dtype's stored element becomes the value arithmetic runs on, and back.
template <typename S>
struct Plain {
  using Stored = S;
  using Value = S;
  static Value load(Stored v) { return v; }
  static Stored store(Value v) { return v; }
};
struct Half {
  using Stored = uint16_t;
  using Value = float;
  static Value load(Stored v) { return shim_f16_to_f32(v); }
  static Stored store(Value v) { return shim_f32_to_f16(v); }
};
struct BHalf {
  using Stored = uint16_t;
  using Value = float;
  static Value load(Stored v) { return shim_bf16_to_f32(v); }
  static Stored store(Value v) { return shim_f32_to_bf16(v); }
};

// Signed overflow is undefined in C++, so integer sums and products run unsigned.
struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};
struct Prod {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // uint8_t would promote to (signed) int; widen every integer to at least unsigned int.
      using U = std::common_type_t<std::make_unsigned_t<T>, unsigned>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(a) || a > b ? a : b;
    else return a > b ? a : b;
  }
};
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return std::isnan(a) || a < b ? a : b;
    else return a < b ? a : b;
  }
};
struct Or {
  static uint8_t apply(uint8_t a, uint8_t b) { return (a | b) != 0; }
};
struct And {
  static uint8_t apply(uint8_t a, uint8_t b) { return a != 0 && b != 0; }
};

template <typename Codec, typename Op>
void reduce(void *out, const void *a, const void *b, size_t n) {
  using S = typename Codec::Stored;
  S *o = static_cast<S *>(out);
  const S *x = static_cast<const S *>(a), *y = static_cast<const S *>(b);
  for (size_t i = 0; i < n; i++) o[i] = Codec::store(Op::apply(Codec::load(x[i]), Codec::load(y[i])));
}

template <typename Codec>
shim_reduce_fn numeric_fn(int32_t op) {
  switch (op) {
    case SHIM_OP_SUM:
    case SHIM_OP_AVG: return reduce<Codec, Sum>;
    case SHIM_OP_PROD: return reduce<Codec, Prod>;
    case SHIM_OP_MIN: return reduce<Codec, Min>;
    default: return reduce<Codec, Max>;  // SHIM_OP_MAX (ops were checked before)
  }
}

shim_reduce_fn bool_fn(int32_t op) {
  switch (op) {
    case SHIM_OP_SUM:
    case SHIM_OP_MAX: return reduce<Plain<uint8_t>, Or>;
    default: return reduce<Plain<uint8_t>, And>;  // prod and min; avg has no meaning for bool and was refused
  }
}

template <typename Codec>
void divide(void *data, size_t n, int32_t divisor) {
  using S = typename Codec::Stored;
  using V = typename Codec::Value;
  using Wide = std::conditional_t<std::is_integral_v<V>, int64_t, V>;  // a u8 divisor may exceed 255
  S *d = static_cast<S *>(data);
  for (size_t i = 0; i < n; i++)
    d[i] = Codec::store(static_cast<V>(static_cast<Wide>(Codec::load(d[i])) / static_cast<Wide>(divisor)));
}

}  // namespace

shim_reduce_fn shim_comm_reduce_fn(int32_t dtype, int32_t op) {
  switch (dtype) {
    case SHIM_F32: return numeric_fn<Plain<float>>(op);
    case SHIM_F64: return numeric_fn<Plain<double>>(op);
    case SHIM_F16: return numeric_fn<Half>(op);
    case SHIM_BF16: return numeric_fn<BHalf>(op);
    case SHIM_I32: return numeric_fn<Plain<int32_t>>(op);
    case SHIM_I64: return numeric_fn<Plain<int64_t>>(op);
    case SHIM_U8: return numeric_fn<Plain<uint8_t>>(op);
    default: return bool_fn(op);  // SHIM_BOOL
  }
}

void shim_comm_divide(int32_t dtype, void *data, size_t n, int32_t divisor) {
  switch (dtype) {
    case SHIM_F32: divide<Plain<float>>(data, n, divisor); break;
    case SHIM_F64: divide<Plain<double>>(data, n, divisor); break;
    case SHIM_F16: divide<Half>(data, n, divisor); break;
    case SHIM_BF16: divide<BHalf>(data, n, divisor); break;
    case SHIM_I32: divide<Plain<int32_t>>(data, n, divisor); break;
    case SHIM_I64: divide<Plain<int64_t>>(data, n, divisor); break;
    case SHIM_U8: divide<Plain<uint8_t>>(data, n, divisor); break;
    default: break;  // bool has no AVG (the collectives' checks refuse it)
  }
}

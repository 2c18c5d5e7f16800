// Host-side rounding to the 16-bit formats, so CPU code can hold bf16/fp16 values
// exactly in floats (every bf16 and fp16 value is a float). Round-to-nearest-even,
// as the GPU's conversions do; NaN stays NaN, overflow goes to ±Inf.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "types.hpp"

namespace celtune {

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

inline uint16_t float_to_fp16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to Inf
  if (abs < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    // Scale into the subnormal grid (units of 2^-24) and round to nearest even
    // through float arithmetic, which is exact here.
    const float a = std::bit_cast<float>(abs);
    const float scaled = a * 16777216.0f;  // 2^24
    const float r = std::nearbyint(scaled);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(r));
  }
  // Normal: rebias exponent (127 → 15) and round the 23-bit mantissa to 10 bits.
  uint32_t h = ((abs >> 13) - ((127u - 15u) << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(man) * 5.9604644775390625e-08f;  // 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

// A 16-bit dtype's (bf16 or fp16) bits as a float, and a float rounded to them.
inline float half_bits_to_float(DType t, uint16_t b) {
  return t == DType::bf16 ? bf16_bits_to_float(b) : fp16_bits_to_float(b);
}
inline uint16_t float_to_half_bits(DType t, float f) {
  return t == DType::bf16 ? float_to_bf16_bits(f) : float_to_fp16_bits(f);
}

// The float nearest to v that the dtype can represent.
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(v));
    case DType::fp16: return fp16_bits_to_float(float_to_fp16_bits(v));
    case DType::fp32: return v;
  }
  return v;
}

}  // namespace celtune

// Arrays to safetensors records and back (nn/safetensors.hpp).
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "nn/safetensors.hpp"

namespace headroom {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

template <typename To, typename From>
void convert(const From* from, std::size_t n, std::byte* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const To v = static_cast<To>(from[i]);
    std::memcpy(out + i * sizeof(To), &v, sizeof(To));
  }
}

template <typename To, typename From>
void convert_in(const std::byte* in, std::size_t n, To* out) {
  for (std::size_t i = 0; i < n; ++i) {
    From v;
    std::memcpy(&v, in + i * sizeof(From), sizeof(From));
    out[i] = static_cast<To>(v);
  }
}

// Integers and floating point never convert into each other: a float parameter
// stored as I64 would lose its fraction, and token ids read as floats are a bug.
template <typename T>
void check_kind(const std::string& name, DType dtype, const std::string& what) {
  constexpr bool integer = std::is_same_v<T, std::int64_t>;
  if (integer != (dtype == DType::i64)) {
    throw CheckpointError(fmt::format("{}: tensor '{}' is {}, expected {}", what, name, dtype_name(dtype),
                                      integer ? "I64 for integers" : "F32 or F64 for floating-point values"));
  }
}

}  // namespace

template <typename T>
TensorRecord to_record(std::string name, const xt::xarray<T>& value, DType dtype) {
  check_kind<T>(name, dtype, "safetensors");
  TensorRecord r{.name = std::move(name), .dtype = dtype, .shape = Shape(value.shape()), .data = {}};
  r.data.resize(value.size() * dtype_size(dtype));
  if (dtype == DType::f32) {
    convert<float>(value.data(), value.size(), r.data.data());
  } else if (dtype == DType::f64) {
    convert<double>(value.data(), value.size(), r.data.data());
  } else {
    convert<std::int64_t>(value.data(), value.size(), r.data.data());
  }
  return r;
}

template <typename T>
xt::xarray<T> from_record(const TensorRecord& record, const std::string& source) {
  std::size_t n = 1;
  for (std::size_t d : record.shape) n *= d;
  if (record.data.size() != n * dtype_size(record.dtype)) {
    throw CheckpointError(fmt::format("{}: tensor '{}': {} bytes for shape {} of {}", source, record.name,
                                      record.data.size(), format_shape(record.shape), dtype_name(record.dtype)));
  }
  check_kind<T>(record.name, record.dtype, source);
  xt::xarray<T> out = xt::xarray<T>::from_shape(record.shape);
  if (record.dtype == DType::f32) {
    convert_in<T, float>(record.data.data(), n, out.data());
  } else if (record.dtype == DType::f64) {
    convert_in<T, double>(record.data.data(), n, out.data());
  } else {
    convert_in<T, std::int64_t>(record.data.data(), n, out.data());
  }
  return out;
}

#define HEADROOM_INSTANTIATE(T)                                                         \
  template TensorRecord to_record<T>(std::string, const xt::xarray<T>&, DType);        \
  template xt::xarray<T> from_record<T>(const TensorRecord&, const std::string&);
HEADROOM_INSTANTIATE(float)
HEADROOM_INSTANTIATE(double)
HEADROOM_INSTANTIATE(std::int64_t)
#undef HEADROOM_INSTANTIATE

}  // namespace headroom

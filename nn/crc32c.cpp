// CRC-32C in its reflected form: the register starts at ~previous, each byte shifts
// it right through the reversed polynomial 0x82F63B78, and the result is inverted.
// The portable version reads eight bytes a step through eight tables (slicing-by-8);
// the SSE4.2 version feeds the crc32 instruction eight bytes at a time.
#include "nn/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace headroom {
namespace {

constexpr std::uint32_t kReversedPolynomial = 0x82F63B78u;

// tables[0][b] is the CRC register after shifting byte b through; tables[j][b] is
// the same byte followed by j zero bytes, so eight table lookups advance eight bytes.
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r >> 1) ^ ((r & 1u) ? kReversedPolynomial : 0u);
    t[0][b] = r;
  }
  for (std::size_t j = 1; j < 8; ++j) {
    for (std::uint32_t b = 0; b < 256; ++b) t[j][b] = (t[j - 1][b] >> 8) ^ t[0][t[j - 1][b] & 0xFFu];
  }
  return t;
}
constexpr auto kTables = make_tables();

std::uint64_t load_le64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);  // a little-endian host (nn/safetensors.cpp checks it)
  return v;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(const std::byte* p, std::size_t n, std::uint32_t crc) {
  std::uint64_t r = ~crc;
  for (; n >= 8; n -= 8, p += 8) r = _mm_crc32_u64(r, load_le64(p));
  std::uint32_t r32 = static_cast<std::uint32_t>(r);
  for (; n > 0; --n, ++p) r32 = _mm_crc32_u8(r32, static_cast<std::uint8_t>(*p));
  return ~r32;
}

bool has_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

std::uint32_t crc32c_portable(std::span<const std::byte> bytes, std::uint32_t previous) {
  std::uint32_t r = ~previous;
  const std::byte* p = bytes.data();
  std::size_t n = bytes.size();
  for (; n >= 8; n -= 8, p += 8) {
    const std::uint64_t v = load_le64(p) ^ r;
    r = kTables[7][v & 0xFF] ^ kTables[6][(v >> 8) & 0xFF] ^ kTables[5][(v >> 16) & 0xFF] ^
        kTables[4][(v >> 24) & 0xFF] ^ kTables[3][(v >> 32) & 0xFF] ^ kTables[2][(v >> 40) & 0xFF] ^
        kTables[1][(v >> 48) & 0xFF] ^ kTables[0][v >> 56];
  }
  for (; n > 0; --n, ++p) r = (r >> 8) ^ kTables[0][(r ^ static_cast<std::uint32_t>(*p)) & 0xFFu];
  return ~r;
}

std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t previous) {
#if defined(__x86_64__)
  if (has_sse42()) return crc32c_sse42(bytes.data(), bytes.size(), previous);
#endif
  return crc32c_portable(bytes, previous);
}

}  // namespace headroom

// A 64-bit hash that is the same on every platform and standard library, for the
// splits that must not move between machines: FNV-1a over bytes, then MurmurHash3's
// fmix64, because FNV-1a's low bits depend weakly on the last bytes and the splits
// read the low bits.
#pragma once

#include <cstdint>

namespace headroom {

class StableHash {
 public:
  void add_byte(std::uint8_t byte) {
    h_ ^= byte;
    h_ *= 0x100000001B3ull;  // FNV 64-bit prime
  }
  // The `bytes` low bytes of `value`, little-endian first.
  void add(std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) add_byte(static_cast<std::uint8_t>((value >> (8 * i)) & 0xFFu));
  }
  std::uint64_t finish() const {
    std::uint64_t h = h_;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h;
  }

 private:
  std::uint64_t h_ = 0xCBF29CE484222325ull;  // FNV-1a 64-bit offset basis
};

}  // namespace headroom

// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected, as iSCSI and ext4 use it):
// the checksum of each tensor's data that headroom writes into a safetensors
// header (nn/safetensors.hpp), so that a flipped byte in a checkpoint is an error
// rather than a silently different model. SSE4.2's crc32 instruction computes it at
// several bytes a cycle; other CPUs take a table, eight bytes a step.
//
//     crc32c(bytes)                 // the checksum of bytes
//     crc32c(more, crc32c(bytes))   // continued: the checksum of bytes followed by more
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace headroom {

// `previous` continues a checksum over a concatenation; 0 starts one.
std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t previous = 0);

// The table version alone (tests compare it with the instruction's).
std::uint32_t crc32c_portable(std::span<const std::byte> bytes, std::uint32_t previous = 0);

}  // namespace headroom

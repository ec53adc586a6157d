// The safetensors container (docs/design.md, "The checkpoint format"): an 8-byte
// little-endian header length N, N bytes of JSON, then the raw little-endian tensor
// data. The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end)} (offsets relative to the end of the header) and may hold a
// "__metadata__" object of string to string.
//
// This file knows the container only; nn/checkpoint.hpp gives it meaning (a model's
// parameters and config). The reader is strict and never reads out of bounds: every
// way a file can be malformed is a CheckpointError naming the file, the tensor where
// there is one, and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include <xtensor/xarray.hpp>

#include "autograd/shape.hpp"

namespace headroom {

// A file that cannot be read or written, or one that is malformed. A
// std::invalid_argument, so the CLI prints it as one line (docs/design.md #5).
class CheckpointError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The dtypes we read and write ("F32", "F64", "I64" in the header). Model
// parameters are floating point; I64 carries token ids (headroom attention's
// `tokens`), and from_record refuses to mix the two kinds.
enum class DType { f32, f64, i64 };
const char* dtype_name(DType dtype);                   // "F32"
std::size_t dtype_size(DType dtype);                   // bytes per element
template <typename T>
constexpr DType dtype_of();                            // float -> f32, double -> f64
// Defined here: a constexpr function must be visible where it is used.
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<std::int64_t>() { return DType::i64; }

// One tensor: its bytes are little-endian, row-major, dtype_size * prod(shape) long.
struct TensorRecord {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::vector<std::byte> data;
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;  // __metadata__ (absent when empty), without the checksums
  std::vector<TensorRecord> tensors;            // in file order (sorted by offset)
  // Read from a file whose every tensor has a checksum, each of which matched. A
  // file written by an older headroom or another tool has none; it still loads.
  bool checksummed = false;

  // The tensor with this name, or nullptr.
  const TensorRecord* find(std::string_view name) const;
};

// An array as a record in `dtype` (converting float <-> double), and back. from_record
// checks that the record holds exactly prod(shape) elements; `source` names the file.
// T is float, double or std::int64_t; integers go only to and from I64 and floating
// point only to and from F32/F64: any other pairing is a CheckpointError naming the
// tensor (so an I64 tensor never loads into a model parameter).
template <typename T>
TensorRecord to_record(std::string name, const xt::xarray<T>& value, DType dtype = dtype_of<T>());
template <typename T>
xt::xarray<T> from_record(const TensorRecord& record, const std::string& source);

// Largest header we accept (a sane cap against a hostile length field).
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100u << 20;  // 100 MiB

// The bytes of a file: tensors laid out back to back in the given order, no gaps,
// and each tensor's CRC-32C (nn/crc32c.hpp) in __metadata__ under "crc32c:<name>".
// Throws CheckpointError on a duplicate or empty name, a name "__metadata__", a
// metadata key of the checksums' form, or data whose length disagrees with dtype
// and shape.
std::vector<std::byte> serialize_safetensors(const SafetensorsFile& file);

// Parses bytes in memory; `source` names them in errors (a path). Rejects: fewer
// than 8 bytes; a header length beyond the bytes or above kMaxSafetensorsHeader;
// malformed JSON or a header that is not an object; a missing, extra or mistyped
// field; an unknown dtype; a negative or non-integer shape entry; offsets where
// begin > end, that overlap, that leave gaps, that do not start at 0, that run
// past the end, or that leave trailing bytes; a byte range whose length disagrees
// with dtype and shape; a non-string metadata value; a checksum that is not 8 hex
// digits, names no tensor, or does not match its tensor's data.
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& source);

// Reads and parses a file (I/O errors name the path and the OS's reason): its
// header first, checked against the file's size, then only the data the header
// declares, so a hostile length field or a huge file of junk costs no memory.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// Writes serialize_safetensors(file) to path atomically (write_file_atomically).
void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& file);

// Writes bytes so that a reader sees the old file or the whole new one, never half:
// a temporary file in the same directory, flushed and fsync'ed, renamed over path,
// then the directory fsync'ed. Any I/O error (a full disk included) is a
// CheckpointError naming the path and the OS's reason; the temporary file is
// removed and an existing file at path is left untouched.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes);
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

// Writes a directory of files so that a reader sees none of it or all of it: the
// files go into a temporary sibling (".NAME.tmp-PID"), each written as above, and
// the sibling is renamed onto `dir`, which must be missing or an empty directory
// (rename replaces an empty one). Its missing parents are made. Errors are
// CheckpointErrors naming the path; the temporary is removed and `dir` untouched.
struct FileToWrite {
  std::string name;  // a plain file name inside the directory
  std::span<const std::byte> bytes;
};
void write_directory_atomically(const std::filesystem::path& dir, const std::vector<FileToWrite>& files);

}  // namespace headroom

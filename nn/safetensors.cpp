// The safetensors container: layout, strict parser, atomic writer.
//
// Format (https://github.com/huggingface/safetensors, README "Format"):
//   bytes [0, 8)        N, the header length, unsigned 64-bit little-endian
//   bytes [8, 8+N)      a JSON object: name -> {"dtype", "shape", "data_offsets"},
//                       plus an optional "__metadata__" of string -> string
//   bytes [8+N, end)    the data; data_offsets are [begin, end) into it
// We write the header padded with spaces to a multiple of 8 bytes, as the reference
// implementation does, so every tensor's data starts 8-byte aligned in the file.
//
// The parser trusts nothing: the header length is checked against the byte count
// before anything is read, every count and offset is checked in uint64 arithmetic
// with explicit overflow tests, and the byte ranges must tile the data exactly
// (start at 0, no gap, no overlap, no trailing byte).
#include "nn/safetensors.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nn/crc32c.hpp"
#include "nn/strict_json.hpp"

namespace headroom {

// The data bytes are copied as they are; only a little-endian host reads them right.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");
// Shape extents are size_t and we check them in uint64 arithmetic.
static_assert(sizeof(std::size_t) == sizeof(std::uint64_t), "safetensors I/O assumes a 64-bit size_t");

using json = nlohmann::json;

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
  }
  return "?";
}
std::size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : 8; }

const TensorRecord* SafetensorsFile::find(std::string_view name) const {
  for (const TensorRecord& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

constexpr const char* kMetadataKey = "__metadata__";
// Each tensor's CRC-32C (nn/crc32c.hpp) as 8 lowercase hex digits, under this prefix
// and the tensor's name in __metadata__: strings, as the format requires of metadata,
// so the file stays one that any safetensors reader loads.
constexpr std::string_view kChecksumPrefix = "crc32c:";

std::string os_reason(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string hex32(std::uint32_t v) { return fmt::format("{:08x}", v); }

std::optional<std::uint32_t> parse_hex32(std::string_view text) {
  if (text.size() != 8) return std::nullopt;
  std::uint32_t v = 0;
  for (const char c : text) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    v = (v << 4) | static_cast<std::uint32_t>(digit);
  }
  return v;
}

// A JSON value for an error message, cut short so a hostile header cannot make the
// message as long as itself.
std::string preview(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return fmt::format("{} ({})", s, v.type_name());
}

// "[2, 3]" for a shape or a pair of offsets.
template <typename Range>
std::string bracketed(const Range& values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "F32") return DType::f32;
  if (name == "F64") return DType::f64;
  if (name == "I64") return DType::i64;
  return std::nullopt;
}

// A non-negative JSON integer as uint64, or nullopt (negative, fractional, too large
// for uint64 -- nlohmann then parses it as a float -- or not a number at all).
std::optional<std::uint64_t> as_u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

std::uint64_t read_u64_le(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  return v;
}

// nlohmann keeps the last of two equal keys without a word; a checkpoint with a
// tensor named twice is ambiguous, so the strict reader (nn/strict_json.hpp) rejects
// it, in the words of the header: a tensor, or a key inside one.
json parse_header_json(std::string_view text, const std::string& source) {
  const DuplicateKeyMessage describe = [&](const std::vector<std::string>& path) {
    if (path.empty()) return fmt::format("{}: duplicate key in the header", source);  // not reached: a key is on the path
    if (path.size() == 1) {
      return path[0] == kMetadataKey ? fmt::format("{}: __metadata__ appears twice in the header", source)
                                     : fmt::format("{}: tensor '{}' appears twice in the header", source, path[0]);
    }
    return fmt::format("{}: {}: duplicate key '{}'", source,
                       path[0] == kMetadataKey ? "__metadata__" : "tensor '" + path[0] + "'", path.back());
  };
  try {
    return parse_strict_json(text, source, describe);
  } catch (const JsonSyntaxError& e) {
    throw CheckpointError(fmt::format("{}: header is not valid JSON: {}", source, e.detail()));
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(e.what());
  }
}

std::map<std::string, std::string> parse_metadata(const json& m, const std::string& source) {
  if (!m.is_object()) {
    throw CheckpointError(
        fmt::format("{}: __metadata__ must be an object of string values, got {}", source, preview(m)));
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string()) {
      throw CheckpointError(
          fmt::format("{}: __metadata__ '{}' must be a string, got {}", source, key, preview(value)));
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// One tensor's header entry, checked on its own; the ranges are checked together
// afterwards.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& name, const json& v, std::uint64_t data_size, const std::string& source) {
  const std::string where = fmt::format("{}: tensor '{}'", source, name);
  if (name.empty()) throw CheckpointError(fmt::format("{}: a tensor has an empty name", source));
  if (!v.is_object()) {
    throw CheckpointError(
        fmt::format("{}: must be an object with dtype, shape and data_offsets, got {}", where, preview(v)));
  }
  for (const auto& [key, unused] : v.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      throw CheckpointError(fmt::format("{}: unexpected key '{}' (expected dtype, shape, data_offsets)", where, key));
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(key)) throw CheckpointError(fmt::format("{}: missing '{}'", where, key));
  }
  Entry e{.name = name, .dtype = DType::f32, .shape = {}, .begin = 0, .end = 0};

  const json& dtype = v["dtype"];
  if (!dtype.is_string()) throw CheckpointError(fmt::format("{}: 'dtype' must be a string, got {}", where, preview(dtype)));
  const std::optional<DType> d = parse_dtype(dtype.get_ref<const std::string&>());
  if (!d) {
    throw CheckpointError(fmt::format("{}: unsupported dtype {} (we read F32, F64 and I64)", where, dtype.dump()));
  }
  e.dtype = *d;

  const json& shape = v["shape"];
  if (!shape.is_array()) {
    throw CheckpointError(fmt::format("{}: 'shape' must be an array of non-negative integers, got {}", where,
                                      preview(shape)));
  }
  std::uint64_t elements = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::optional<std::uint64_t> extent = as_u64(shape[i]);
    if (!extent) {
      throw CheckpointError(fmt::format("{}: shape entry {} is {}, not a non-negative integer", where, i,
                                        preview(shape[i])));
    }
    e.shape.push_back(static_cast<std::size_t>(*extent));
    if (__builtin_mul_overflow(elements, *extent, &elements)) {
      throw CheckpointError(fmt::format("{}: shape {} has more elements than 2^64", where, preview(shape)));
    }
  }
  std::uint64_t needed = 0;
  if (__builtin_mul_overflow(elements, static_cast<std::uint64_t>(dtype_size(e.dtype)), &needed)) {
    throw CheckpointError(fmt::format("{}: shape {} needs more than 2^64 bytes", where, bracketed(e.shape)));
  }

  const json& offsets = v["data_offsets"];
  std::optional<std::uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = as_u64(offsets[0]);
    end = as_u64(offsets[1]);
  }
  if (!begin || !end) {
    throw CheckpointError(fmt::format("{}: 'data_offsets' must be [begin, end] with non-negative integers, got {}",
                                      where, preview(offsets)));
  }
  e.begin = *begin;
  e.end = *end;
  const std::string range = fmt::format("data_offsets [{}, {}]", e.begin, e.end);
  if (e.begin > e.end) throw CheckpointError(fmt::format("{}: {} have begin > end", where, range));
  if (e.end - e.begin != needed) {
    throw CheckpointError(fmt::format("{}: {} hold {} bytes but {} shape {} needs {}", where, range,
                                      e.end - e.begin, dtype_name(e.dtype), bracketed(e.shape), needed));
  }
  if (e.end > data_size) {
    throw CheckpointError(
        fmt::format("{}: {} run past the end of the data ({} bytes after the header)", where, range, data_size));
  }
  return e;
}

// The ranges, sorted by (begin, end), must tile [0, data_size) exactly.
void check_tiling(std::vector<Entry>& entries, std::uint64_t data_size, const std::string& source) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t next = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    const std::string where = fmt::format("{}: tensor '{}': data_offsets [{}, {}]", source, e.name, e.begin, e.end);
    if (previous == nullptr && e.begin != 0) {
      throw CheckpointError(fmt::format("{} do not start at 0 (the first tensor must begin the data)", where));
    }
    if (e.begin < next) {
      throw CheckpointError(fmt::format("{} overlap tensor '{}' at [{}, {}]", where, previous->name, previous->begin,
                                        previous->end));
    }
    if (e.begin > next) {
      throw CheckpointError(fmt::format("{} leave a gap of {} bytes after tensor '{}' at [{}, {}]", where,
                                        e.begin - next, previous->name, previous->begin, previous->end));
    }
    next = e.end;
    previous = &e;
  }
  if (next != data_size) {
    throw CheckpointError(fmt::format("{}: {} trailing bytes after the last tensor (the data is {} bytes, the tensors "
                                      "end at {})",
                                      source, data_size - next, data_size, next));
  }
}

void check_record(const TensorRecord& t) {
  if (t.name.empty()) throw CheckpointError("safetensors: a tensor has an empty name");
  if (t.name == kMetadataKey) throw CheckpointError("safetensors: a tensor may not be named __metadata__");
  std::uint64_t bytes = dtype_size(t.dtype);
  for (std::size_t extent : t.shape) {
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(extent), &bytes)) {
      throw CheckpointError(fmt::format("safetensors: tensor '{}': shape {} is too large", t.name,
                                        format_shape(t.shape)));
    }
  }
  if (bytes != t.data.size()) {
    throw CheckpointError(fmt::format("safetensors: tensor '{}': {} bytes of data but {} shape {} needs {}", t.name,
                                      t.data.size(), dtype_name(t.dtype), format_shape(t.shape), bytes));
  }
}

}  // namespace

std::vector<std::byte> serialize_safetensors(const SafetensorsFile& file) {
  json header = json::object();
  json metadata = json::object();
  for (const auto& [key, value] : file.metadata) {
    if (key.starts_with(kChecksumPrefix)) {
      throw CheckpointError(
          fmt::format("safetensors: metadata key '{}' is reserved for the checksums the writer adds", key));
    }
    metadata[key] = value;
  }
  std::uint64_t offset = 0;
  for (const TensorRecord& t : file.tensors) {
    check_record(t);
    if (header.contains(t.name)) throw CheckpointError(fmt::format("safetensors: tensor '{}' appears twice", t.name));
    metadata[std::string(kChecksumPrefix) + t.name] = hex32(crc32c(t.data));
    const std::uint64_t end = offset + t.data.size();
    header[t.name] = json{{"dtype", dtype_name(t.dtype)},
                          {"shape", std::vector<std::size_t>(t.shape.begin(), t.shape.end())},
                          {"data_offsets", {offset, end}}};
    offset = end;
  }
  if (!metadata.empty()) header[kMetadataKey] = std::move(metadata);
  std::string text;
  try {
    text = header.dump();
  } catch (const json::type_error& e) {  // a name or metadata value that is not UTF-8
    throw CheckpointError(fmt::format("safetensors: cannot write the header: {}", e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::vector<std::byte> out(8 + text.size() + offset);
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::byte* data = out.data() + 8 + text.size();
  for (const TensorRecord& t : file.tensors) {
    if (!t.data.empty()) std::memcpy(data, t.data.data(), t.data.size());
    data += t.data.size();
  }
  return out;
}

namespace {

// A header, checked against the size of the data that follows it, before any of
// that data is read.
struct Header {
  std::map<std::string, std::string> metadata;     // without the checksums
  std::map<std::string, std::uint32_t> checksums;  // tensor name -> CRC-32C of its data
  std::vector<Entry> entries;                      // sorted by offset; they tile the data
};

// The 8-byte length field, checked against the limit and against the bytes after it.
void check_header_length(std::uint64_t header_size, std::uint64_t after_length, const std::string& source) {
  if (header_size > kMaxSafetensorsHeader) {
    throw CheckpointError(fmt::format("{}: header length {} is above the limit of {} bytes", source, header_size,
                                      kMaxSafetensorsHeader));
  }
  if (header_size > after_length) {
    throw CheckpointError(fmt::format("{}: header length {} runs past the end of the file ({} bytes after the length "
                                      "field)",
                                      source, header_size, after_length));
  }
}

Header parse_header(std::string_view text, std::uint64_t data_size, const std::string& source) {
  // nlohmann's lexer takes a NUL byte for the end of the input, so "{}\0garbage"
  // would parse; JSON never holds a raw NUL, so we reject it first.
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw CheckpointError(fmt::format("{}: header is not valid JSON: a NUL byte at offset {}", source, nul));
  }
  const json header = parse_header_json(text, source);
  if (!header.is_object()) {
    throw CheckpointError(fmt::format("{}: the header must be a JSON object, got {}", source, header.type_name()));
  }
  Header h;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      h.metadata = parse_metadata(value, source);
    } else {
      h.entries.push_back(parse_entry(name, value, data_size, source));
    }
  }
  check_tiling(h.entries, data_size, source);
  for (auto it = h.metadata.begin(); it != h.metadata.end();) {
    if (!it->first.starts_with(kChecksumPrefix)) {
      ++it;
      continue;
    }
    const std::string tensor = it->first.substr(kChecksumPrefix.size());
    const std::optional<std::uint32_t> crc = parse_hex32(it->second);
    if (!crc) {
      throw CheckpointError(fmt::format("{}: __metadata__ '{}' must be 8 lowercase hex digits (a CRC-32C), got '{}'",
                                        source, it->first, it->second.substr(0, 40)));
    }
    if (std::none_of(h.entries.begin(), h.entries.end(), [&](const Entry& e) { return e.name == tensor; })) {
      throw CheckpointError(
          fmt::format("{}: __metadata__ '{}' is the checksum of a tensor the file does not hold", source, it->first));
    }
    h.checksums.emplace(tensor, *crc);
    it = h.metadata.erase(it);
  }
  return h;
}

// The records of a checked header, each filled by fill(entry, destination) and
// checked against its checksum where the header has one.
template <typename Fill>
SafetensorsFile assemble(Header& h, const std::string& source, const Fill& fill) {
  SafetensorsFile file;
  file.metadata = std::move(h.metadata);
  file.checksummed = h.checksums.size() == h.entries.size();
  file.tensors.reserve(h.entries.size());
  for (Entry& e : h.entries) {
    TensorRecord& t = file.tensors.emplace_back();
    t.name = std::move(e.name);
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data.resize(e.end - e.begin);
    fill(e, t.data.data());
    if (const auto it = h.checksums.find(t.name); it != h.checksums.end()) {
      const std::uint32_t actual = crc32c(t.data);
      if (actual != it->second) {
        throw CheckpointError(fmt::format(
            "{}: tensor '{}': the data does not match its checksum (CRC-32C {} in the header, {} computed): the file "
            "is corrupt",
            source, t.name, hex32(it->second), hex32(actual)));
      }
    }
  }
  return file;
}

// Closes the descriptor on every path out of read_safetensors.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Exactly n bytes at offset, or a CheckpointError (an I/O error, or a file that
// shrank while it was read).
void read_exactly(int fd, void* destination, std::uint64_t n, std::uint64_t offset, const std::string& source) {
  auto* p = static_cast<char*>(destination);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30)),
                                static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw CheckpointError(fmt::format("{}: cannot read: {}", source, os_reason(errno)));
    if (got == 0) throw CheckpointError(fmt::format("{}: cannot read: the file ended early (did it change?)", source));
    p += got;
    n -= static_cast<std::uint64_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
}

}  // namespace

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& source) {
  if (bytes.size() < 8) {
    throw CheckpointError(
        fmt::format("{}: the file is {} bytes, too short for the 8-byte header length", source, bytes.size()));
  }
  const std::uint64_t header_size = read_u64_le(bytes.data());
  const std::uint64_t after_length = bytes.size() - 8;
  check_header_length(header_size, after_length, source);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), header_size);
  Header h = parse_header(text, after_length - header_size, source);
  // Every range now lies inside the data, so the copies are in bounds.
  const std::byte* data = bytes.data() + 8 + header_size;
  return assemble(h, source, [&](const Entry& e, std::byte* to) { std::copy(data + e.begin, data + e.end, to); });
}

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  const std::string source = path.string();
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw CheckpointError(fmt::format("{}: cannot open: {}", source, os_reason(errno)));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw CheckpointError(fmt::format("{}: cannot read: {}", source, os_reason(errno)));
  if (S_ISDIR(st.st_mode)) throw CheckpointError(fmt::format("{}: cannot read: it is a directory", source));
  if (!S_ISREG(st.st_mode)) throw CheckpointError(fmt::format("{}: cannot read: not a regular file", source));
  // The header first, checked against the file's size; then only the bytes it
  // declares, which tile the rest of the file exactly. Nothing is allocated on the
  // word of a length field that the file's size contradicts.
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < 8) {
    throw CheckpointError(fmt::format("{}: the file is {} bytes, too short for the 8-byte header length", source, size));
  }
  std::byte length_field[8];
  read_exactly(file.fd, length_field, 8, 0, source);
  const std::uint64_t header_size = read_u64_le(length_field);
  check_header_length(header_size, size - 8, source);
  std::string text(static_cast<std::size_t>(header_size), '\0');
  read_exactly(file.fd, text.data(), header_size, 8, source);
  Header h = parse_header(text, size - 8 - header_size, source);
  return assemble(h, source, [&](const Entry& e, std::byte* to) {
    read_exactly(file.fd, to, e.end - e.begin, 8 + header_size + e.begin, source);
  });
}

void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& file) {
  write_file_atomically(path, serialize_safetensors(file));
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  // Unique per process and per call, so two threads saving side by side do not
  // share a temporary file.
  static std::atomic<unsigned> counter{0};
  const std::string target = path.string();
  const std::string tmp = fmt::format("{}.tmp.{}.{}", target, ::getpid(), counter++);
  // Each failure reads errno first, before anything else can change it.
  auto fail = [&](int err, const std::string& what) {
    return CheckpointError(fmt::format("cannot write '{}': {}: {}", target, what, os_reason(err)));
  };

  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    throw fail(err, fmt::format("creating '{}'", tmp));
  }
  // From here on every failure removes the temporary file; the target is untouched
  // until rename() replaces it in one step.
  auto abandon = [&](int err, const char* step, bool close_fd) {
    if (close_fd) ::close(fd);
    ::unlink(tmp.c_str());
    return fail(err, fmt::format("{} '{}'", step, tmp));
  };
  const std::byte* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;  // no progress at all: treat it as a full disk
      throw abandon(err, "writing", true);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    throw abandon(err, "fsync of", true);
  }
  // close() can report a deferred write error (NFS); the fd is released either way.
  if (::close(fd) != 0) {
    const int err = errno;
    throw abandon(err, "closing", false);
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    throw abandon(err, "renaming", false);
  }

  // The rename is durable once the directory entry is on disk.
  std::filesystem::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int err = errno;
    throw fail(err, fmt::format("opening its directory '{}' to fsync it", dir.string()));
  }
  // Some file systems cannot fsync a directory (EINVAL); the file itself is synced.
  if (::fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP) {
    const int err = errno;
    ::close(dfd);
    throw fail(err, fmt::format("fsync of its directory '{}'", dir.string()));
  }
  ::close(dfd);
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  write_file_atomically(path, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void write_directory_atomically(const std::filesystem::path& dir_in, const std::vector<FileToWrite>& files) {
  namespace fs = std::filesystem;
  const fs::path dir = dir_in.filename().empty() ? dir_in.parent_path() : dir_in;  // "out/" is "out"
  const fs::path parent = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
  const fs::path tmp = parent / fmt::format(".{}.tmp-{}", dir.filename().string(), ::getpid());
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw CheckpointError(fmt::format("cannot write '{}': creating '{}': {}", dir.string(), parent.string(), ec.message()));
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec) || ec) {
    throw CheckpointError(fmt::format("cannot write '{}': creating '{}': {}", dir.string(), tmp.string(),
                                      ec ? ec.message() : "it exists"));
  }
  try {
    for (const FileToWrite& f : files) write_file_atomically(tmp / f.name, f.bytes);
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      const int err = errno;
      throw CheckpointError(fmt::format("cannot write '{}': renaming '{}' onto it: {}", dir.string(), tmp.string(),
                                        err == ENOTEMPTY || err == EEXIST ? "it is not empty" : os_reason(err)));
    }
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  const int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);  // the rename made durable where the file system can
    ::close(dfd);
  }
}

}  // namespace headroom

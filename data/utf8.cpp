#include "data/utf8.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "data/dataset.hpp"

namespace headroom {
namespace {

[[noreturn]] void invalid(std::string_view what, std::size_t offset, unsigned char byte,
                          std::string_view reason) {
  throw DataError(fmt::format("{}: invalid UTF-8 at byte offset {} (byte 0x{:02X}: {})", what,
                              offset, byte, reason));
}

// A bad sequence: where it starts, its first byte and why.
struct Bad {
  std::size_t at = 0;
  unsigned char byte = 0;
  const char* reason = "";
};

// Appends the code points of bytes to out up to the first bad sequence (returned in
// bad) or, when !final, up to a sequence the end of bytes cuts short. Returns the
// bytes consumed.
std::size_t decode_some(std::string_view bytes, bool final, bool reject_nul, std::u32string& out,
                        std::optional<Bad>& bad) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    // Table 3-7 of the Unicode standard (well-formed UTF-8 byte sequences): the
    // length and the smallest code point each length may encode.
    std::size_t length;
    char32_t cp, min_cp;
    if (lead == 0 && reject_nul) {
      bad = Bad{i, lead, "NUL"};
      return i;
    } else if (lead < 0x80) {
      out.push_back(lead);
      ++i;
      continue;
    } else if (lead < 0xC0) {
      bad = Bad{i, lead, "continuation byte without a lead byte"};
      return i;
    } else if (lead < 0xE0) {
      length = 2, cp = lead & 0x1Fu, min_cp = 0x80;
    } else if (lead < 0xF0) {
      length = 3, cp = lead & 0x0Fu, min_cp = 0x800;
    } else if (lead < 0xF8) {
      length = 4, cp = lead & 0x07u, min_cp = 0x10000;
    } else {
      bad = Bad{i, lead, "not a UTF-8 lead byte"};
      return i;
    }
    for (std::size_t k = 1; k < length; ++k) {
      if (i + k >= bytes.size() && !final) return i;  // the next piece has the rest
      if (i + k >= bytes.size() || (static_cast<unsigned char>(bytes[i + k]) & 0xC0u) != 0x80u) {
        bad = Bad{i, lead, "sequence cut short"};
        return i;
      }
      cp = (cp << 6) | (static_cast<unsigned char>(bytes[i + k]) & 0x3Fu);
    }
    const char* reason = cp < min_cp                      ? "overlong encoding"
                         : (cp >= 0xD800 && cp <= 0xDFFF) ? "surrogate code point"
                         : cp > 0x10FFFF                  ? "code point above U+10FFFF"
                                                          : nullptr;
    if (reason != nullptr) {
      bad = Bad{i, lead, reason};
      return i;
    }
    out.push_back(cp);
    i += length;
  }
  return i;
}

}  // namespace

std::u32string decode_utf8(std::string_view bytes, std::string_view what) {
  std::u32string out;
  out.reserve(bytes.size());
  std::optional<Bad> bad;
  decode_some(bytes, true, false, out, bad);
  if (bad) invalid(what, bad->at, bad->byte, bad->reason);
  return out;
}

namespace {

[[noreturn]] void bad_text(const std::string& what, const Bad& bad, std::size_t at, std::size_t line, bool nul) {
  if (nul) throw DataError(fmt::format("{}: NUL byte at byte offset {}, line {}: a binary file, not text", what, at, line));
  throw DataError(fmt::format("{}: invalid UTF-8 at byte offset {}, line {} (byte 0x{:02X}: {})", what, at, line,
                              bad.byte, bad.reason));
}

}  // namespace

void Utf8Decoder::feed(std::string_view bytes, std::u32string& out) {
  // Only a sequence the previous piece cut short is joined to this one; otherwise the
  // bytes are decoded where they are.
  std::string joined;
  std::string_view piece = bytes;
  if (!tail_.empty()) {
    joined = std::move(tail_);
    joined.append(bytes);
    piece = joined;
  }
  std::optional<Bad> bad;
  const std::size_t used = decode_some(piece, false, reject_nul_, out, bad);
  const auto lines = static_cast<std::size_t>(std::count(piece.begin(), piece.begin() + static_cast<std::ptrdiff_t>(used), '\n'));
  if (bad) bad_text(what_, *bad, offset_ + bad->at, line_ + lines, bad->byte == 0 && reject_nul_);
  offset_ += used;
  line_ += lines;
  tail_ = std::string(piece.substr(used));
}

void Utf8Decoder::finish() {
  if (tail_.empty()) return;
  std::u32string ignored;
  std::optional<Bad> bad;
  decode_some(tail_, true, reject_nul_, ignored, bad);
  if (bad) bad_text(what_, *bad, offset_ + bad->at, line_, false);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace headroom

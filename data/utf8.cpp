#include "data/utf8.hpp"

#include <fmt/format.h>

#include "data/dataset.hpp"

namespace headroom {
namespace {

[[noreturn]] void invalid(std::string_view what, std::size_t offset, unsigned char byte,
                          std::string_view reason) {
  throw DataError(fmt::format("{}: invalid UTF-8 at byte offset {} (byte 0x{:02X}: {})", what,
                              offset, byte, reason));
}

}  // namespace

std::u32string decode_utf8(std::string_view bytes, std::string_view what) {
  std::u32string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    // Table 3-7 of the Unicode standard (well-formed UTF-8 byte sequences): the
    // length and the smallest code point each length may encode.
    std::size_t length;
    char32_t cp, min_cp;
    if (lead < 0x80) {
      out.push_back(lead);
      ++i;
      continue;
    } else if (lead < 0xC0) {
      invalid(what, i, lead, "continuation byte without a lead byte");
    } else if (lead < 0xE0) {
      length = 2, cp = lead & 0x1Fu, min_cp = 0x80;
    } else if (lead < 0xF0) {
      length = 3, cp = lead & 0x0Fu, min_cp = 0x800;
    } else if (lead < 0xF8) {
      length = 4, cp = lead & 0x07u, min_cp = 0x10000;
    } else {
      invalid(what, i, lead, "not a UTF-8 lead byte");
    }
    for (std::size_t k = 1; k < length; ++k) {
      if (i + k >= bytes.size() || (static_cast<unsigned char>(bytes[i + k]) & 0xC0u) != 0x80u) {
        invalid(what, i, lead, "sequence cut short");
      }
      cp = (cp << 6) | (static_cast<unsigned char>(bytes[i + k]) & 0x3Fu);
    }
    if (cp < min_cp) invalid(what, i, lead, "overlong encoding");
    if (cp >= 0xD800 && cp <= 0xDFFF) invalid(what, i, lead, "surrogate code point");
    if (cp > 0x10FFFF) invalid(what, i, lead, "code point above U+10FFFF");
    out.push_back(cp);
    i += length;
  }
  return out;
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

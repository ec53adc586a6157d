// Strict UTF-8 (RFC 3629): the character-level dataset reads any text file as code
// points, and a file that is not UTF-8 is an error, never mojibake in the vocabulary.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace headroom {

// The code points of `bytes`. Rejects stray continuation bytes, truncated
// sequences, overlong forms, surrogates and values above U+10FFFF with a DataError
// "<what>: invalid UTF-8 at byte offset <i> (byte 0x<XX>: <reason>)", where i is
// the offset of the first byte of the bad sequence.
std::u32string decode_utf8(std::string_view bytes, std::string_view what);

// Appends the UTF-8 encoding of one valid code point.
void append_utf8(std::string& out, char32_t code_point);

}  // namespace headroom

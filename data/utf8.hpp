// Strict UTF-8 (RFC 3629): the character-level dataset reads any text file as code
// points, and a file that is not UTF-8 is an error, never mojibake in the vocabulary.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace headroom {

// The code points of `bytes`. Rejects stray continuation bytes, truncated
// sequences, overlong forms, surrogates and values above U+10FFFF with a DataError
// "<what>: invalid UTF-8 at byte offset <i> (byte 0x<XX>: <reason>)", where i is
// the offset of the first byte of the bad sequence.
std::u32string decode_utf8(std::string_view bytes, std::string_view what);

// Decodes UTF-8 that arrives in pieces (a file read a chunk at a time), so that a bad
// byte stops the read where it is. feed() appends the code points of every complete
// sequence and keeps a sequence cut off by the end of the piece for the next one;
// finish() rejects one left at the end. Errors are decode_utf8's with the line
// (1-based) after the offset: "<what>: invalid UTF-8 at byte offset 9, line 2 (...)";
// with reject_nul, a NUL byte is one too: "<what>: NUL byte at byte offset 9, line 2:
// a binary file, not text".
class Utf8Decoder {
 public:
  Utf8Decoder(std::string what, bool reject_nul) : what_(std::move(what)), reject_nul_(reject_nul) {}
  void feed(std::string_view bytes, std::u32string& out);
  void finish();
  std::size_t offset() const { return offset_; }  // bytes decoded so far

 private:
  std::string what_;
  bool reject_nul_;
  std::string tail_;         // the start of a sequence the last piece cut off
  std::size_t offset_ = 0;   // of tail_'s first byte in the whole input
  std::size_t line_ = 1;     // of tail_'s first byte
};

// Appends the UTF-8 encoding of one valid code point.
void append_utf8(std::string& out, char32_t code_point);

}  // namespace headroom

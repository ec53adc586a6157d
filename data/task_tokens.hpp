// Token ids of the toy tasks as users read and write them on the command line, and
// the validation examples that `headroom sample` and `headroom attention` show.
//
// The tasks reserve ids 0, 1, 2 for pad, separator and query (data/task.hpp); we
// show them as "_", "|" and "?" (as the task examples do) and accept the same
// symbols back, so what one command prints another command reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/ops.hpp"  // Index

namespace headroom {

// "_", "|", "?" for pad, separator and query; any other id as its number.
std::string task_token_label(Index id);

// The labels of `ids`, separated by single spaces: "7 3 6 |".
std::string render_task_tokens(std::span<const Index> ids);

// Whitespace-separated ids in [0, vocab), or _ | ? for the specials. A word that is
// not an id, an id outside the vocabulary, or no ids at all is a
// std::invalid_argument starting with `what` (the flag, "--prompt") and naming the
// word or id.
std::vector<Index> parse_task_tokens(const std::string& text, std::size_t vocab, std::string_view what);

// The stream of a --seed from which validation examples are drawn, one
// Dataset::sample(1, Split::val, rng) per example, in order: `headroom attention
// --example N` shows the row of the (N+1)-th example `headroom sample --seed 0`
// shows.
inline constexpr std::uint64_t kValidationExampleStream = 1;

}  // namespace headroom

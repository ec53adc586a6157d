// The gradient-check suite of every op: each op on random shapes, with
// broadcasting both ways, transposed (non-contiguous in PyTorch's sense) inputs and
// size-1 edges. `headroom gradcheck` prints it as a table; the test suite asserts
// every case passes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/gradcheck.hpp"

namespace headroom {

// Every differentiable op in ops.hpp, by name. A test checks that each has
// gradcheck cases here and a forward fixture.
const std::vector<std::string>& op_names();

struct OpCheck {
  std::string op;      // "matmul"
  std::string what;    // "broadcast batch axes"
  std::string shapes;  // "(2, 1, 3, 4) @ (5, 4, 2)"
  GradcheckReport report;
};

struct OpCheckOptions {
  std::uint64_t seed = 0;  // draws shapes and values
  std::string op;          // only this op; empty for all
  GradcheckOptions gradcheck;
};

// Runs the cases (all, or those of options.op) and returns one result per case.
// Throws std::invalid_argument naming the op when options.op is not an op.
std::vector<OpCheck> run_op_checks(const OpCheckOptions& options = {});

}  // namespace headroom

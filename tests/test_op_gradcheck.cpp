// Every op, gradchecked in double on the suite's random shapes (broadcasting both
// ways, transposed inputs, size-1 edges) for three seeds, so each case is seen on
// three different shapes.
#include <algorithm>
#include <set>

#include <doctest/doctest.h>

#include "autograd/op_checks.hpp"
#include "gradcheck_doctest.hpp"

namespace {

void check_op(const std::string& op) { check_suite_cases(op, headroom::run_op_checks); }

}  // namespace

#define HEADROOM_OP_GRADCHECK(op) \
  TEST_CASE("gradcheck: " op) { check_op(op); }

HEADROOM_OP_GRADCHECK("add")
HEADROOM_OP_GRADCHECK("sub")
HEADROOM_OP_GRADCHECK("mul")
HEADROOM_OP_GRADCHECK("div")
HEADROOM_OP_GRADCHECK("neg")
HEADROOM_OP_GRADCHECK("add_scalar")
HEADROOM_OP_GRADCHECK("mul_scalar")
HEADROOM_OP_GRADCHECK("exp")
HEADROOM_OP_GRADCHECK("log")
HEADROOM_OP_GRADCHECK("sqrt")
HEADROOM_OP_GRADCHECK("rsqrt")
HEADROOM_OP_GRADCHECK("tanh")
HEADROOM_OP_GRADCHECK("relu")
HEADROOM_OP_GRADCHECK("gelu")
HEADROOM_OP_GRADCHECK("gelu_tanh")
HEADROOM_OP_GRADCHECK("pow")
HEADROOM_OP_GRADCHECK("sum")
HEADROOM_OP_GRADCHECK("mean")
HEADROOM_OP_GRADCHECK("reshape")
HEADROOM_OP_GRADCHECK("transpose")
HEADROOM_OP_GRADCHECK("permute")
HEADROOM_OP_GRADCHECK("concat")
HEADROOM_OP_GRADCHECK("slice")
HEADROOM_OP_GRADCHECK("split")
HEADROOM_OP_GRADCHECK("matmul")
HEADROOM_OP_GRADCHECK("linear")
HEADROOM_OP_GRADCHECK("softmax")
HEADROOM_OP_GRADCHECK("log_softmax")
HEADROOM_OP_GRADCHECK("cross_entropy")
HEADROOM_OP_GRADCHECK("embedding")
HEADROOM_OP_GRADCHECK("masked_fill")
HEADROOM_OP_GRADCHECK("layer_norm")
HEADROOM_OP_GRADCHECK("attention")
HEADROOM_OP_GRADCHECK("dropout")

TEST_CASE("every op has a gradcheck test above and cases in the suite") {
  // Keep this list in step with the HEADROOM_OP_GRADCHECK lines above: a new op in
  // op_names() without a line here fails.
  const std::set<std::string> tested{
      "add", "sub", "mul", "div", "neg", "add_scalar", "mul_scalar", "exp", "log", "sqrt", "rsqrt",
      "tanh", "relu", "gelu", "gelu_tanh", "pow", "sum", "mean", "reshape", "transpose", "permute",
      "concat", "slice", "split", "matmul", "linear", "softmax", "log_softmax", "cross_entropy", "embedding",
      "masked_fill", "layer_norm", "attention", "dropout"};
  std::set<std::string> in_suite;
  for (const auto& r : headroom::run_op_checks()) in_suite.insert(r.op);
  for (const auto& op : headroom::op_names()) {
    CHECK_MESSAGE(tested.count(op) == 1, "op " << op << " has no gradcheck TEST_CASE");
    CHECK_MESSAGE(in_suite.count(op) == 1, "op " << op << " has no case in run_op_checks");
  }
}

TEST_CASE("run_op_checks rejects an unknown op by name") {
  headroom::OpCheckOptions options;
  options.op = "matmull";
  CHECK_THROWS_WITH_AS(headroom::run_op_checks(options), doctest::Contains("unknown op 'matmull'"),
                       std::invalid_argument);
}

// Every module, and the whole language model's loss with respect to every
// parameter, gradchecked in double through the suite `headroom gradcheck` prints
// (nn/module_checks.cpp), for three seeds.
#include <set>

#include <doctest/doctest.h>

#include "gradcheck_doctest.hpp"
#include "nn/module_checks.hpp"

namespace {

void check_module(const std::string& module) { check_suite_cases(module, headroom::run_module_checks); }

}  // namespace

TEST_CASE("gradcheck: Linear") { check_module("Linear"); }
TEST_CASE("gradcheck: Embedding") { check_module("Embedding"); }
TEST_CASE("gradcheck: LayerNorm") { check_module("LayerNorm"); }
TEST_CASE("gradcheck: RMSNorm") { check_module("RMSNorm"); }
TEST_CASE("gradcheck: FeedForward") { check_module("FeedForward"); }
TEST_CASE("gradcheck: MultiHeadAttention") { check_module("MultiHeadAttention"); }
TEST_CASE("gradcheck: TransformerBlock") { check_module("TransformerBlock"); }
TEST_CASE("gradcheck: TransformerLM") { check_module("TransformerLM"); }

TEST_CASE("every module has a gradcheck test above") {
  const std::set<std::string> tested{"Linear",           "Embedding",          "LayerNorm",
                                     "RMSNorm",          "FeedForward",        "MultiHeadAttention",
                                     "TransformerBlock", "TransformerLM"};
  for (const auto& m : headroom::module_names()) CHECK_MESSAGE(tested.count(m) == 1, m << " has no test");
}

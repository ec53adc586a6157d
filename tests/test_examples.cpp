// The programs under examples/ run, succeed and print what they promise, and the
// README's C++ example is one of them, verbatim, with the output it really prints.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "cli_runner.hpp"

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot read " << path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// What follows `<!-- cpp-example: PATH -->` in the README: the fenced code block, and
// the indented block after it (the program's output, each line indented 4 spaces).
struct ReadmeExample {
  std::string path, code, output;
};

std::vector<ReadmeExample> readme_examples(const std::string& readme) {
  std::vector<ReadmeExample> out;
  const std::string marker = "<!-- cpp-example: ";
  for (std::size_t at = readme.find(marker); at != std::string::npos; at = readme.find(marker, at + 1)) {
    ReadmeExample e;
    const std::size_t path_end = readme.find(" -->", at);
    e.path = readme.substr(at + marker.size(), path_end - at - marker.size());
    const std::size_t open = readme.find("```cpp\n", path_end);
    const std::size_t close = readme.find("\n```\n", open);
    REQUIRE_MESSAGE(open == path_end + 5, "README: the cpp-example marker for " << e.path
                                                                                << " must be followed by a ```cpp block");
    REQUIRE(close != std::string::npos);
    e.code = readme.substr(open + 7, close + 1 - (open + 7));
    std::istringstream rest(readme.substr(close + 5));
    std::string line;
    bool started = false;
    while (std::getline(rest, line)) {
      if (line.rfind("    ", 0) == 0) {
        started = true;
        e.output += line.substr(4) + "\n";
      } else if (started) {
        break;
      }
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace

TEST_CASE("examples/autograd_tour fits its curve and passes its gradient check") {
  const CliResult r = run_program(HEADROOM_AUTOGRAD_TOUR, "");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("final loss") != std::string::npos);
  CHECK(r.output.find("gradcheck passed") != std::string::npos);
}

TEST_CASE("every C++ block of the README is a program under examples/, verbatim") {
  const std::string readme = read_text(std::string(HEADROOM_SOURCE_DIR) + "/README.md");
  const std::vector<ReadmeExample> examples = readme_examples(readme);
  std::size_t blocks = 0;
  for (std::size_t at = readme.find("```cpp"); at != std::string::npos; at = readme.find("```cpp", at + 1)) ++blocks;
  CHECK_MESSAGE(blocks == examples.size(), "README has " << blocks << " ```cpp blocks but " << examples.size()
                                                         << " cpp-example markers: every C++ block must be a compiled example");
  REQUIRE(!examples.empty());
  for (const ReadmeExample& e : examples) {
    INFO("README's block for " << e.path);
    CHECK(e.code == read_text(std::string(HEADROOM_SOURCE_DIR) + "/" + e.path));
  }
}

TEST_CASE("examples/train_copy (the README's C++ example) learns to copy and prints what the README shows") {
  const CliResult r = run_program(HEADROOM_TRAIN_COPY, "");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("accuracy 100.0%") != std::string::npos);
  const std::string readme = read_text(std::string(HEADROOM_SOURCE_DIR) + "/README.md");
  for (const ReadmeExample& e : readme_examples(readme)) {
    if (e.path != "examples/train_copy.cpp") continue;
    INFO("the README shows the output of " << e.path << "; a run of the current build printed something else");
    CHECK(e.output == r.output);
  }
}

// Every CUDA kernel declares the largest block it is launched with
// (__launch_bounds__(n): the compiler fits its registers to n threads, and a
// GPU refuses a launch above n), and states the same n as its first
// statement, GPT_BLOCK_BOUND(n) (kernels/cuda/cuda_syntax.h), through which
// the emulator fails a launch above the bound: so the parity tests on the
// emulator check that the host code launches every kernel within it. Read
// from the sources; runs in every build.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace gpt {
namespace {

namespace fs = std::filesystem;

// The text inside the parentheses that open at `open` (balanced), and the
// position after the closing one.
std::string balanced(const std::string& s, size_t open, size_t* after) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '(') ++depth;
    if (s[i] == ')' && --depth == 0) {
      *after = i + 1;
      return s.substr(open + 1, i - open - 1);
    }
  }
  *after = s.size();
  return {};
}

std::string squeeze(const std::string& x) {
  std::string out;
  for (char c : x)
    if (!std::isspace(static_cast<unsigned char>(c))) out += c;
  return out;
}

TEST(KernelSources, EveryKernelDeclaresItsLaunchBound) {
  int kernels = 0;
  const std::regex global(R"(__global__\s+void\s+)");
  for (const auto& e : fs::recursive_directory_iterator(fs::path(GPT_SOURCE_DIR) / "kernels" / "cuda")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cu" && ext != ".cuh")) continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (std::sregex_iterator it(s.begin(), s.end(), global), end; it != end; ++it) {
      ++kernels;
      const size_t at = it->position() + it->length();
      const std::string where = e.path().filename().string() + " at offset " + std::to_string(at);
      ASSERT_EQ(s.compare(at, 18, "__launch_bounds__("), 0) << where << ": a kernel without __launch_bounds__";
      size_t after = 0;
      const std::string bound = balanced(s, at + 17, &after);
      const size_t params = s.find('(', after);
      ASSERT_NE(params, std::string::npos) << where;
      size_t body = 0;
      balanced(s, params, &body);
      const size_t brace = s.find('{', body);
      ASSERT_NE(brace, std::string::npos) << where;
      const std::smatch first = [&] {
        std::smatch m;
        const std::string rest = s.substr(brace + 1, 400);
        static const std::regex stmt(R"(^\s*GPT_BLOCK_BOUND\(([^;]*)\);)");
        std::regex_search(rest, m, stmt);
        return m;
      }();
      ASSERT_FALSE(first.empty()) << where << ": the first statement must be GPT_BLOCK_BOUND(" << bound << ");";
      EXPECT_EQ(squeeze(first[1]), squeeze(bound)) << where << ": GPT_BLOCK_BOUND and __launch_bounds__ differ";
    }
  }
  EXPECT_GE(kernels, 80) << "the scan found too few kernels to be reading the sources";
}

}  // namespace
}  // namespace gpt

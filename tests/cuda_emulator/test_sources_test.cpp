// The emulator tree of scripts/test.sh (build-emu/, GPT_TESTS_CUDA_ONLY)
// compiles only the test files CMakeLists.txt lists as the CUDA ones, and
// runs the suites whose names match 'Cuda|Nccl|WorldForDevice'. A test of
// those suites written into another file would be skipped there silently:
// this test, which runs in every build, finds each such suite in the
// sources and checks that its file is on the list.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace gpt {
namespace {

namespace fs = std::filesystem;

std::set<std::string> cuda_test_sources() {
  std::set<std::string> out;
  std::stringstream list(GPT_CUDA_TEST_SOURCES);
  for (std::string path; std::getline(list, path, ':');)
    if (!path.empty()) out.insert(fs::path(path).lexically_normal().string());
  return out;
}

TEST(EmulatorTestSources, EverySuiteTheEmulatorRunsIsInItsFiles) {
  const std::set<std::string> listed = cuda_test_sources();
  const fs::path tests = fs::path(GPT_SOURCE_DIR) / "tests";
  ASSERT_TRUE(listed.count((tests / "kernels/cuda/attention_parity_test.cpp").lexically_normal().string()))
      << "the list from CMakeLists.txt: " << GPT_CUDA_TEST_SOURCES;
  for (const std::string& path : listed) EXPECT_TRUE(fs::exists(path)) << path;

  // The suite of TEST(Suite, ...) and its relatives; the second name of
  // INSTANTIATE_TEST_SUITE_P is a suite too.
  const std::regex test_macro(R"(\b(?:TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\(\s*(\w+)\s*,)");
  const std::regex instantiate(R"(\bINSTANTIATE_TEST_SUITE_P\(\s*(\w+)\s*,\s*(\w+))");
  const std::regex emulator_suite("Cuda|Nccl|WorldForDevice");  // scripts/test.sh's ctest -R
  int found = 0;
  for (const auto& entry : fs::recursive_directory_iterator(tests)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !name.ends_with("_test.cpp")) continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string source = text.str();
    const std::string path = entry.path().lexically_normal().string();
    std::set<std::string> suites;
    for (std::sregex_iterator it(source.begin(), source.end(), test_macro), end; it != end; ++it)
      suites.insert((*it)[1]);
    for (std::sregex_iterator it(source.begin(), source.end(), instantiate), end; it != end; ++it) {
      suites.insert((*it)[1]);
      suites.insert((*it)[2]);
    }
    for (const std::string& suite : suites) {
      if (!std::regex_search(suite, emulator_suite)) continue;
      ++found;
      EXPECT_TRUE(listed.count(path)) << "suite " << suite << " in " << path
                                      << " runs on the emulator but its file is not among the CUDA test "
                                         "sources of CMakeLists.txt (GPT_CUDA_TEST_SOURCES)";
    }
  }
  EXPECT_GE(found, 10) << "the scan found too few emulator suites to be reading the sources";
}

}  // namespace
}  // namespace gpt

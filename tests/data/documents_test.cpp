// Reading text as documents: separators (none, blank lines, regex), folders,
// and the errors of bad separators and inputs.
#include "data/documents.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/check.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

class Documents : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpt_docs_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  static std::vector<std::string> docs(const DocumentSet& set) {
    std::vector<std::string> out;
    for (const auto& d : set.docs) out.push_back(set.text.substr(d.begin, d.end - d.begin));
    return out;
  }
  std::string error_of(const std::string& path, const std::string& sep) {
    try {
      read_documents(path, sep);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

using Strings = std::vector<std::string>;

TEST_F(Documents, Separators) {
  const std::string f = write("a.txt", "\none\ntwo\n\n \t\r\nthree\n\nfour");
  EXPECT_EQ(docs(read_documents(f, "none")), (Strings{"\none\ntwo\n\n \t\r\nthree\n\nfour"}));
  EXPECT_EQ(docs(read_documents(f, "blank")), (Strings{"one\ntwo\n", "three\n", "four"}));
  const std::string g = write("g.txt", "== A ==\nalpha\n== B ==\nbeta\n\n== C ==\n");
  EXPECT_EQ(docs(read_documents(g, "regex:^== .* ==\\n")), (Strings{"alpha\n", "beta\n\n"}));
  // GCIDE's entries: a blank line before an unindented line.
  const std::string d = write("d.txt", "Ab \\Ab\\\n   1. x\n\n   2. y\n\nAbc \\Abc\\\n   z\n");
  EXPECT_EQ(docs(read_documents(d, "regex:^\\n(?=\\S)")),
            (Strings{"Ab \\Ab\\\n   1. x\n\n   2. y\n", "Abc \\Abc\\\n   z\n"}));
  // Invalid UTF-8 in the text does not stop the regex.
  const std::string bad = write("bad.txt", "a\xff\n--\n\xc3(b\n");
  EXPECT_EQ(docs(read_documents(bad, "regex:^--\\n")), (Strings{"a\xff\n", "\xc3(b\n"}));
}

TEST_F(Documents, FolderIsOneDocumentPerFileInNameOrder) {
  write("in/b.txt", "second\n");
  write("in/a.txt", "first\n");
  write("in/.hidden", "skipped\n");
  write("in/c.txt", "");  // empty: no document
  fs::create_directories(dir_ / "in" / "sub");
  const DocumentSet set = read_documents((dir_ / "in").string(), "none");
  EXPECT_EQ(docs(set), (Strings{"first\n", "second\n"}));
  EXPECT_EQ(set.files.size(), 3u);
  EXPECT_EQ(set.text, "first\nsecond\n");
}

TEST_F(Documents, Errors) {
  const std::string f = write("a.txt", "x\ny\n");
  auto expect = [&](const std::string& path, const std::string& sep, const Strings& needles) {
    const std::string msg = error_of(path, sep);
    EXPECT_FALSE(msg.empty()) << sep;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  };
  expect(f, "lines", {"--doc-sep 'lines'", "blank", "regex:RE"});
  expect(f, "regex:", {"give a pattern"});
  expect(f, "regex:(", {"--doc-sep regex '('", "does not compile"});
  expect(f, "regex:\\n*", {"matches the empty string", f});
  expect(write("e.txt", ""), "none", {"e.txt", "empty"});
  expect(write("s.txt", "\n\n"), "blank", {"s.txt", "only document separators"});
  expect((dir_ / "nope").string(), "none", {"nope", "does not exist"});
  fs::create_directories(dir_ / "void");
  expect((dir_ / "void").string(), "none", {"void", "no regular files"});
}

}  // namespace
}  // namespace gpt

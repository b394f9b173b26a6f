// Error reporting used across the project: one CHECK macro that throws
// gpt::Error with the file, line and a message built from the values.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace gpt {

// A user-facing error: bad input, bad config, bad file. main() prints its
// message and exits non-zero; nothing else catches it.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Throws gpt::Error("message") where message is the arguments streamed together.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::concat(args...));
}

}  // namespace gpt

// CHECK(cond, parts...): if cond is false, throws gpt::Error naming file:line
// and the streamed parts. Use for internal invariants and user input alike;
// user-facing messages should name the key, file or flag and what is allowed.
#define GPT_CHECK(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) ::gpt::fail(__VA_ARGS__, " [", __FILE__, ":", __LINE__, "]"); \
  } while (0)

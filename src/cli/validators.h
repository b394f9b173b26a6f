// Checks of command-line numbers and files, in the project's wording: the
// message names what is allowed and the value given ("--tokens: must be a
// number > 0, got 0"), never CLI11's "Value 0 not in range 0.000000 to
// 1797693134862315708..." (its bounds are printed at full width). NaN and
// infinities are refused by every numeric check. main() prints CLI11's
// errors as "error: ..." with exit status 1, like every other error.
#pragma once
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

#include "core/files.h"

namespace gpt::cli {

namespace detail {

// Whole numbers in full (16777216, not 1.67772e+07), others as streamed.
inline std::string number_text(double x) {
  std::ostringstream os;
  if (x == std::floor(x) && std::fabs(x) < 1e15)
    os << static_cast<long long>(x);
  else
    os << x;
  return os.str();
}

// A validator of numbers in [lo, hi] (open at lo when lo_open); `what` is
// said in the message, `label` shown in --help.
inline CLI::Validator number_in(double lo, double hi, bool lo_open, const std::string& what, const std::string& label) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(text, x)) return "must be " + what + ", got \"" + text + "\"";
        if (!std::isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) return "must be " + what + ", got " + text;
        return {};
      },
      label);
}

}  // namespace detail

// A finite number >= 0.
inline CLI::Validator non_negative() {
  return detail::number_in(0, std::numeric_limits<double>::max(), false, "a number >= 0", "NONNEGATIVE");
}
// A finite number > 0.
inline CLI::Validator positive() {
  return detail::number_in(0, std::numeric_limits<double>::max(), true, "a number > 0", "POSITIVE");
}
// A finite number in [lo, hi].
inline CLI::Validator between(double lo, double hi) {
  const std::string lo_text = detail::number_text(lo), hi_text = detail::number_text(hi);
  return detail::number_in(lo, hi, false, "a number from " + lo_text + " to " + hi_text,
                           "[" + lo_text + " - " + hi_text + "]");
}

// A path that names a regular file (not a directory, FIFO or device).
inline CLI::Validator existing_file() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        const char* why = not_a_regular_file(path);
        return why ? "file \"" + path + "\" " + why : std::string();
      },
      "FILE");
}

// An existing file or directory.
inline CLI::Validator existing_path() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        std::error_code ec;
        if (!std::filesystem::exists(path, ec)) return "\"" + path + "\" does not exist";
        return {};
      },
      "PATH");
}

}  // namespace gpt::cli

// The sweep summary's gnuplot script (src/sweep/plots.cpp): LongPPL's key
// loss against the multiple, a block of longppl.dat per variant; drawn by
// gnuplot when it is installed, from data files written here.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "sweep/summary.h"

namespace gpt {
namespace {

namespace fs = std::filesystem;

TEST(SweepPlots, LongPplPlotHasABlockPerVariantAndDraws) {
  PlotInputs p;
  p.multiples = {1, 2, 4};
  p.trained_context = 16;
  p.plotted = {"a", "b"};
  p.plotted_eval = {false, true};
  p.longppl_runs = {"a", "b"};
  const std::string script = gnuplot_script(p);
  EXPECT_NE(script.find("set output 'longppl_vs_context.png'"), std::string::npos) << script;
  for (const char* s : {"'longppl.dat' index 0 using 1:2", "'longppl.dat' index 1 using 1:2",
                        "'longppl.dat' index 1 using 1:4", "title 'b (key tokens)'"})
    EXPECT_NE(script.find(s), std::string::npos) << s;
  EXPECT_EQ(script.find("'longppl.dat' index 2"), std::string::npos);
  PlotInputs none = p;
  none.longppl_runs.clear();
  EXPECT_EQ(gnuplot_script(none).find("longppl"), std::string::npos);

  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot is not installed";
  const fs::path dir = fs::temp_directory_path() / ("gpt_plots_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "plots.gp") << script;
  {
    std::ofstream loss(dir / "loss.dat"), diag(dir / "diagnostics.dat"), lp(dir / "longppl.dat");
    for (int v = 0; v < 2; ++v) {
      loss << "# v\n", diag << "# v\n", lp << "# v\n";
      for (int m : p.multiples) {
        loss << m << " " << 2 + 0.1 * m + v << " 1.9 2.5 1.95 2.4\n";
        diag << m << " 0.1 2.0\n";
        // b has one seed: no sd (nan), and no key token at 1x
        lp << m << " " << (v == 1 && m == 1 ? "nan" : std::to_string(3 + 0.2 * m)) << " " << (v ? "nan" : "0.1")
           << " " << 2 + 0.1 * m << "\n";
      }
      loss << "\n\n", diag << "\n\n", lp << "\n\n";
    }
  }
  const std::string cmd = "cd '" + dir.string() + "' && gnuplot plots.gp 2>'" + (dir / "err.txt").string() + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << std::ifstream(dir / "err.txt").rdbuf();
  EXPECT_GT(fs::file_size(dir / "longppl_vs_context.png"), 0u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpt

// libFuzzer target: the shape and loss options every subcommand parses, from
// arbitrary argv (arguments separated by NUL bytes), down to validated problems.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "model/error.hpp"
#include "src/cli/problem_args.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  args.push_back(cur);
  if (args.size() > 64) return 0;
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  CLI::App app;
  celtune::cli::ProblemArgs a;
  celtune::cli::add_problem_options(&app, a);
  try {
    app.parse(args);
    const auto problems = celtune::cli::build_problems(a);
    for (const auto& p : problems) (void)celtune::Problem::from_key(p.key());
  } catch (const CLI::ParseError&) {
  } catch (const celtune::Error&) {
  }
  return 0;
}

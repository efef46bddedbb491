// The exl3-bench command line: a CLI11 program with one subcommand per tool (today make-model).
// Kept out of main() so tests can run it in-process and check exit codes and messages.
#pragma once

namespace exl3 {

// Parses argv (argv[0] = program name), runs the chosen subcommand and returns the exit code:
// 0 on success, non-zero on bad flags or failure (with a message on stderr).
int run_exl3_bench(int argc, const char* const* argv);

}  // namespace exl3

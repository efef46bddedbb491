// exl3-bench: benchmarking tools for EXL3 models (subcommands; see exl3_bench_cli.h).
#include "bench/exl3_bench_cli.h"

int main(int argc, char** argv) { return exl3::run_exl3_bench(argc, argv); }

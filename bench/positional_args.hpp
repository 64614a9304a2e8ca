// bench/positional_args.hpp — the [DIR] [MB] [ROUNDS] arguments some benches take.
//
// They are read by position, so `bench_restore --help` once took "--help" for the
// directory and wrote its checkpoints under ./--help, and `--dir /tmp/x` died in
// std::stoul. A first argument that starts with '-' now gets the usage line instead.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

// Prints the usage and exits when the first argument is a flag: 0 for -h/--help, else 2.
inline void refuse_flags(int argc, char** argv, const char* usage) {
  if (argc < 2 || argv[1][0] != '-') return;
  const std::string_view a = argv[1];
  std::printf("usage: %s %s\n", argv[0], usage);
  std::exit(a == "-h" || a == "--help" ? 0 : 2);
}

# ckpt's developer commands; see docs/building.md.
#   make            install missing deps, configure and build everything (build/)
#   make test       ... and run all tests with ctest
#   make demo       run examples/train_and_resume twice: the second run resumes
#   make sanitize   ASan+UBSan build and tests (build-asan/)
#   make tsan       ThreadSanitizer build and tests (build-tsan/)
#   make clang      clang++ build and tests against the single header (build-clang/)
#   make clang-sanitize  the same with ASan+UBSan at -O0, as CI runs it (build-clang-san/)
#   make single-include / check-single-include
#   make check-layers  includes run only downward (the layer table of docs/design.md)
#   make meson-test meson build and tests ($(MESON_BUILD_DIR)/)
#   make crash-test SIGKILL saves at >= 1000 random moments (CRASH_KILLS), check every checkpoint
#   make fuzz       libFuzzer + ASan/UBSan, every reader for FUZZ_SECONDS each ($(FUZZ_BUILD_DIR)/)
#   make fuzz-smoke the same for FUZZ_SMOKE_SECONDS each (CI runs it as the fuzz_smoke
#                   test of make clang-sanitize)
#   make clean      remove all build directories

SHELL := /bin/bash
PYTHON ?= /usr/bin/python3
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
GENERATOR ?= Ninja
# build directories (override e.g. to keep a second build beside your own)
BUILD_DIR ?= build
ASAN_BUILD_DIR ?= build-asan
TSAN_BUILD_DIR ?= build-tsan
CLANG_BUILD_DIR ?= build-clang
CLANG_SAN_BUILD_DIR ?= build-clang-san
MESON_BUILD_DIR ?= build-meson
FUZZ_BUILD_DIR ?= build-fuzz
# fuzzing: seconds per target (make fuzz), and for the CI smoke run (make fuzz-smoke)
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 8
# crash-test: how many saves to SIGKILL, and the seed of the moments (empty: random)
CRASH_KILLS ?= 1000
CRASH_SEED ?=
, := ,

# configure (always: cheap, and picks up new options) then build
# $(1) build dir, $(2) extra cmake flags, $(3) targets (default: all)
define cmake_build
	cmake -S . -B $(1) -G $(GENERATOR) $(2) $(CMAKE_FLAGS)
	cmake --build $(1) -j $(JOBS) $(if $(3),--target $(3))
endef

# $(1) build dir
define ctest_run
	ctest --test-dir $(1) --output-on-failure -j $(JOBS) $(CTEST_FLAGS)
endef

.PHONY: all deps build test demo sanitize tsan clang clang-sanitize single-include \
        check-single-include check-layers meson meson-test crash-test fuzz-build fuzz fuzz-smoke clean distclean

all: build

deps:
	@tools/install-deps.sh

build: deps
	$(call cmake_build,$(BUILD_DIR),)

test: build
	$(call ctest_run,$(BUILD_DIR))

# The demo builds only what it runs: not the tests, benchmarks or tools.
DEMO_DIR := $(BUILD_DIR)/demo-run
demo: deps
	$(call cmake_build,$(BUILD_DIR),,train_and_resume)
	rm -rf $(DEMO_DIR)
	@echo "=== first run: starts from scratch ==="
	$(BUILD_DIR)/examples/train_and_resume $(DEMO_DIR)
	@echo "=== second run: resumes from the checkpoints in $(DEMO_DIR) ==="
	$(BUILD_DIR)/examples/train_and_resume $(DEMO_DIR)

# The second builds (sanitizers, clang) build the tests and the CLI they run, not the
# examples and benchmarks the first build already compiled: CI has 2 cores.
CHECK_ONLY := -DCKPT_BUILD_EXAMPLES=OFF -DCKPT_BUILD_BENCH=OFF

# Consumer projects do not build with sanitizers, so they are left out here.
sanitize: deps
	$(call cmake_build,$(ASAN_BUILD_DIR),-DCKPT_SANITIZE=address$(,)undefined -DCKPT_CONSUMER_TESTS=OFF $(CHECK_ONLY))
	$(call ctest_run,$(ASAN_BUILD_DIR))

tsan: deps
	$(call cmake_build,$(TSAN_BUILD_DIR),-DCKPT_SANITIZE=thread -DCKPT_CONSUMER_TESTS=OFF $(CHECK_ONLY))
	$(call ctest_run,$(TSAN_BUILD_DIR))

clang: deps
	$(call cmake_build,$(CLANG_BUILD_DIR),-DCMAKE_CXX_COMPILER=clang++ -DCKPT_USE_SINGLE_INCLUDE=ON $(CHECK_ONLY))
	$(call ctest_run,$(CLANG_BUILD_DIR))

# What CI runs after the gcc build: one build that checks several things at once
# (clang, the single header in header-only mode, ASan+UBSan, and a short fuzzing run of
# every reader: the fuzz_smoke test), and clang's wording of the compile-error snippets
# (compile_fail), at -O0 with line tables only: clang spends three
# quarters of a test file's compile in the optimizer at -O1 (-ftime-trace), the tests
# are I/O-bound and run in seconds either way, and line tables are all a sanitizer
# report needs.
clang-sanitize: deps
	$(call cmake_build,$(CLANG_SAN_BUILD_DIR),-DCMAKE_CXX_COMPILER=clang++ -DCKPT_USE_SINGLE_INCLUDE=ON \
	  -DCKPT_SANITIZE=address$(,)undefined -DCKPT_CONSUMER_TESTS=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -gline-tables-only" \
	  -DCKPT_BUILD_FUZZ=ON -DCKPT_FUZZ_OPT="-O0 -gline-tables-only" -DCKPT_FUZZ_SMOKE_SECONDS=$(FUZZ_SMOKE_SECONDS) $(CHECK_ONLY))
	$(call ctest_run,$(CLANG_SAN_BUILD_DIR))

# The crash test of `make test` (50 kills) at scale; prints the seed and the counts.
crash-test: build
	cd $(BUILD_DIR)/tests/tmp && CKPT_TEST_TMPDIR=$$PWD CKPT_CRASH_KILLS=$(CRASH_KILLS) CKPT_CRASH_SEED=$(CRASH_SEED) \
	  ../ckpt_tests --source-file='*/test_crash.cpp' --test-case='crash: saves killed*' --force-colors=false

# One libFuzzer target per reader (fuzz/), clang with ASan+UBSan; corpora and findings
# stay in $(FUZZ_BUILD_DIR)/ (see fuzz/run.sh). FUZZ_JOBS=2 runs two targets at once.
fuzz-build: deps
	$(call cmake_build,$(FUZZ_BUILD_DIR),-DCMAKE_CXX_COMPILER=clang++ -DCKPT_BUILD_FUZZ=ON -DCKPT_BUILD_TESTS=OFF -DCKPT_BUILD_TOOLS=OFF -DCKPT_INSTALL=OFF $(CHECK_ONLY),fuzz_readers)

fuzz: fuzz-build
	fuzz/run.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS)

fuzz-smoke: fuzz-build
	fuzz/run.sh $(FUZZ_BUILD_DIR) $(FUZZ_SMOKE_SECONDS)

# Every part of the single-header edition (tools/amalgamate.py); the check regenerates
# them into a temporary directory and compares the whole of single_include/ with it, so
# that a stale, missing or leftover part fails.
single-include:
	$(PYTHON) tools/amalgamate.py -o single_include

check-single-include:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(PYTHON) tools/amalgamate.py -o "$$tmp" && \
	if ! diff -ru "$$tmp" single_include; then \
	  echo "check-single-include: single_include/ is out of date with include/: run 'make single-include' and commit it" >&2; exit 1; \
	else echo "check-single-include: single_include/ is up to date"; fi

# Each header of include/ckpt includes only its own layer or lower ones (also the
# ctest case `layers`, so `make test` runs it).
check-layers:
	$(PYTHON) tools/check-layers.py

# The meson build checks that meson builds and passes the suite; it does not need
# optimized code, so it compiles without optimization or debug info (half the time).
MESON_FLAGS ?= -Dbuildtype=plain
meson: deps
	@# reconfigure each time: meson only sees new tests/test_*.cpp at setup
	if [ -f $(MESON_BUILD_DIR)/build.ninja ]; then meson setup --reconfigure $(MESON_FLAGS) $(MESON_BUILD_DIR); \
	else meson setup $(MESON_FLAGS) $(MESON_BUILD_DIR); fi
	meson compile -C $(MESON_BUILD_DIR) -j $(JOBS)

meson-test: meson
	meson test -C $(MESON_BUILD_DIR) --print-errorlogs --num-processes $(JOBS)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_BUILD_DIR) $(TSAN_BUILD_DIR) $(CLANG_BUILD_DIR) $(CLANG_SAN_BUILD_DIR) $(MESON_BUILD_DIR) $(FUZZ_BUILD_DIR)

# also drops the unpacked Boost / msgpack headers
distclean: clean
	rm -rf .deps

# ckpt's developer commands; see docs/building.md.
#   make            install missing deps, configure and build everything (build/)
#   make test       ... and run all tests with ctest
#   make demo       run examples/train_and_resume twice: the second run resumes
#   make sanitize   ASan+UBSan build and tests (build-asan/)
#   make tsan       ThreadSanitizer build and tests (build-tsan/)
#   make clang      clang++ build and tests against the single header (build-clang/)
#   make single-include / check-single-include
#   make meson-test meson build and tests (build-meson/)
#   make clean      remove all build directories

SHELL := /bin/bash
PYTHON ?= /usr/bin/python3
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
GENERATOR ?= Ninja
, := ,

# configure (always: cheap, and picks up new options) then build
# $(1) build dir, $(2) extra cmake flags
define cmake_build
	cmake -S . -B $(1) -G $(GENERATOR) $(2) $(CMAKE_FLAGS)
	cmake --build $(1) -j $(JOBS)
endef

# $(1) build dir
define ctest_run
	ctest --test-dir $(1) --output-on-failure -j $(JOBS) $(CTEST_FLAGS)
endef

.PHONY: all deps build test demo sanitize tsan clang single-include \
        check-single-include meson meson-test clean distclean

all: build

deps:
	@tools/install-deps.sh

build: deps
	$(call cmake_build,build,)

test: build
	$(call ctest_run,build)

DEMO_DIR := build/demo-run
demo: build
	rm -rf $(DEMO_DIR)
	@echo "=== first run: starts from scratch ==="
	build/examples/train_and_resume $(DEMO_DIR)
	@echo "=== second run: resumes from the checkpoints in $(DEMO_DIR) ==="
	build/examples/train_and_resume $(DEMO_DIR)

# Consumer projects do not build with sanitizers, so they are left out here.
sanitize: deps
	$(call cmake_build,build-asan,-DCKPT_SANITIZE=address$(,)undefined -DCKPT_CONSUMER_TESTS=OFF)
	$(call ctest_run,build-asan)

tsan: deps
	$(call cmake_build,build-tsan,-DCKPT_SANITIZE=thread -DCKPT_CONSUMER_TESTS=OFF)
	$(call ctest_run,build-tsan)

clang: deps
	$(call cmake_build,build-clang,-DCMAKE_CXX_COMPILER=clang++ -DCKPT_USE_SINGLE_INCLUDE=ON)
	$(call ctest_run,build-clang)

single-include:
	$(PYTHON) tools/amalgamate.py -o single_include/ckpt/ckpt.hpp

check-single-include:
	@tmp=$$(mktemp) && trap 'rm -f "$$tmp"' EXIT && \
	$(PYTHON) tools/amalgamate.py -o "$$tmp" && \
	if [ ! -f single_include/ckpt/ckpt.hpp ]; then \
	  echo "check-single-include: single_include/ckpt/ckpt.hpp is missing: run 'make single-include' and commit it" >&2; exit 1; \
	elif ! diff -u single_include/ckpt/ckpt.hpp "$$tmp"; then \
	  echo "check-single-include: single_include/ckpt/ckpt.hpp is out of date with include/: run 'make single-include' and commit it" >&2; exit 1; \
	else echo "check-single-include: single_include/ckpt/ckpt.hpp is up to date"; fi

meson: deps
	@# reconfigure each time: meson only sees new tests/test_*.cpp at setup
	if [ -f build-meson/build.ninja ]; then meson setup --reconfigure build-meson; \
	else meson setup build-meson; fi
	meson compile -C build-meson -j $(JOBS)

meson-test: meson
	meson test -C build-meson --print-errorlogs --num-processes $(JOBS)

clean:
	rm -rf build build-asan build-tsan build-clang build-meson

# also drops the unpacked Boost / msgpack headers
distclean: clean
	rm -rf .deps

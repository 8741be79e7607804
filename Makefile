# ddptrain — top-level entry points. `make run` and `make test` work on a fresh Debian 12
# machine: each first installs what is missing (scripts/install_deps.sh).
# The default build is against pip's LibTorch 2.15 (torch==2.15.0, PyPI's current: MKL, CUDA
# and NCCL compiled in) in build/; `make test-2.11` builds and tests the same code against
# pip's torch 2.11 (the GPU machine's) in build-2.11/, `make test-debian` against Debian's
# LibTorch 1.13 (libtorch-dev, with OpenBLAS) in build-debian/. CI runs all three.
# Any other pip torch: `make test TORCH_VERSION=2.13.0 BUILD=build-2.13`.
TORCH_VERSION ?= 2.15.0
export TORCH2_VERSION := $(TORCH_VERSION)
BUILD ?= build
BUILD_2_11 ?= build-2.11
BUILD_DEBIAN ?= build-debian
JOBS ?= $(shell nproc)
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_DIR ?= $(HOME)/.cache/ccache
CTEST_ARGS ?=

.PHONY: deps deps-debian configure build build-main run test build-2.11 test-2.11 build-debian test-debian \
        bench bench-debian clean format format-check

deps:
	@./scripts/install_deps.sh

deps-debian:
	@./scripts/install_deps.sh debian

# The Python whose torch the build links (its LibTorch) and the interop tests talk to. A build
# folder configured for another Python (another torch) is configured again.
configure: deps
	@py=$$(./scripts/torch2_python.sh) && \
	  { grep -qx "DDPTRAIN_PYTHON:FILEPATH=$$py" $(BUILD)/CMakeCache.txt 2>/dev/null && test -f $(BUILD)/build.ninja || \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPTRAIN_PYTHON=$$py \
	    -DCMAKE_PREFIX_PATH=$$($$py -c 'import torch;print(torch.utils.cmake_prefix_path)') $(CMAKE_ARGS); }

# Everything: the library, the command, the tests, the benchmarks.
build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# What the main job needs: the library and the ddptrain command.
build-main: configure
	@cmake --build $(BUILD) -j $(JOBS) --target ddptrain

# The main job: 2 local workers (CPU ones over Gloo where there is no GPU) train MiniResNet
# (width 0.25) on Fashion-MNIST for one epoch, evaluate on the test split and print the test accuracy.
run: build-main
	./$(BUILD)/ddptrain launch --nproc_per_node 2 --master_port 29533 train \
	  --dataset fashion-mnist --width 0.25 --epochs 1 --lr 0.05 --batch_size 64 \
	  --num_workers 1 --log_interval 100 --checkpoint_dir $(BUILD)/run-checkpoints

# Note [Waiting tests]: ctest runs with 5 process slots, every test takes 2 (two at a time, one
# per core, as -j 2 ran them) but the tests of tests/waiting_tests.txt, which mostly wait for a
# timeout, a stall or a stopped process (CPU under a quarter of their time) and take 1: one of
# them runs beside two tests that compute instead of holding a core idle (tests/cmake/
# waiting_tests.cmake sets their PROCESSORS). With 4 slots a waiting test took a computing
# test's place unless two of them met, which ctest's longest-first order seldom made: the
# suite's time did not change (951 s, 947 s). In a build folder: `ctest -j 5`.
CTEST_SLOTS ?= 5

# The suite also runs the default build under Debian's torchrun 1.13 (the other torch).
test: build
	@./scripts/install_deps.sh test
	cd $(BUILD) && DDPTRAIN_REQUIRE_TRANSFORMERS=1 ctest --output-on-failure -j $(CTEST_SLOTS) $(CTEST_ARGS)

# Note [The other torches' suite]: the whole suite runs on the default build (`make test`);
# the other torches (2.11, 1.13) build everything and run the suite less the long scenarios
# named in tests/scenario_tests.txt, each of whose LibTorch and c10d calls a shorter test
# makes too. Three whole suites and three builds outgrew CI's time on a slow 2-core machine
# (stop 35: over 90 minutes). `make test-2.11 OTHER_TORCH_SUITE=` runs the whole suite.
# The ctest arguments; the recipe fails if the list cannot be read (never a silent whole suite).
OTHER_TORCH_SUITE ?= -E "$$skip"
SCENARIO_REGEX = skip=$$(python3 $(CURDIR)/tests/scenario_tests.py $(CURDIR) --regex) && test -n "$$skip"

# The GPU machine's torch: pip's 2.11 (its own folder and virtual environment).
build-2.11:
	@$(MAKE) --no-print-directory build BUILD=$(BUILD_2_11) TORCH_VERSION=2.11.0

test-2.11: build-2.11
	@TORCH2_VERSION=2.11.0 ./scripts/install_deps.sh test
	$(SCENARIO_REGEX) && cd $(BUILD_2_11) && DDPTRAIN_REQUIRE_TRANSFORMERS=1 ctest --output-on-failure --no-tests=error \
	  -j $(CTEST_SLOTS) $(OTHER_TORCH_SUITE) $(CTEST_ARGS)

# The Debian build: Debian's LibTorch 1.13 and, across the interop tests, Debian's python3
# with its torch 1.13.
build-debian: deps-debian
	@test -f $(BUILD_DEBIAN)/build.ninja || \
	  cmake -S . -B $(BUILD_DEBIAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DDDPTRAIN_PYTHON=/usr/bin/python3 $(CMAKE_ARGS)
	@cmake --build $(BUILD_DEBIAN) -j $(JOBS)

test-debian: build-debian
	$(SCENARIO_REGEX) && cd $(BUILD_DEBIAN) && ctest --output-on-failure --no-tests=error -j $(CTEST_SLOTS) $(OTHER_TORCH_SUITE) \
	  $(CTEST_ARGS)

bench: build
	./bench/run_bench.sh $(BUILD)

bench-debian: build-debian
	./bench/run_bench.sh $(BUILD_DEBIAN)

# The tree's C++ in the repo's .clang-format, by Debian 12's clang-format 14 (another version
# formats some lines differently); `make format-check` (CI) fails on a file that differs.
CLANG_FORMAT ?= clang-format-14
FORMATTED = $$(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')

format: deps
	$(CLANG_FORMAT) -i $(FORMATTED)

format-check: deps
	@$(CLANG_FORMAT) --dry-run -Werror $(FORMATTED) && echo "format-check: $$(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | wc -l) files formatted"

clean:
	rm -rf $(BUILD) $(BUILD_2_11) $(BUILD_DEBIAN)

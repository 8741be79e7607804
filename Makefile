# ddptrain — top-level entry points. `make run` and `make test` work on a fresh Debian 12
# machine: each first installs what is missing (scripts/install_deps.sh).
BUILD ?= build
JOBS ?= $(shell nproc)
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_DIR ?= $(HOME)/.cache/ccache
CTEST_ARGS ?=

.PHONY: deps configure build run test bench clean format

deps:
	@./scripts/install_deps.sh

configure: deps
	@test -f $(BUILD)/build.ninja || cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: 2 local CPU workers train MiniResNet (width 0.25) on Fashion-MNIST for one
# epoch, evaluate on the test split and print the test accuracy.
run: build
	./$(BUILD)/ddptrain launch --nproc_per_node 2 --master_port 29533 train \
	  --dataset fashion-mnist --width 0.25 --epochs 1 --lr 0.05 --batch_size 64 \
	  --num_workers 1 --log_interval 100 --checkpoint_dir $(BUILD)/run-checkpoints

test: build
	cd $(BUILD) && ctest --output-on-failure -j 2 $(CTEST_ARGS)

bench: build
	./bench/run_bench.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf $(BUILD)

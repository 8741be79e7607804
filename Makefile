# ddptrain — top-level entry points. `make run` and `make test` work on a fresh Debian 12
# machine: each first installs what is missing (scripts/install_deps.sh).
BUILD ?= build
JOBS ?= $(shell nproc)
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_DIR ?= $(HOME)/.cache/ccache
CTEST_ARGS ?=

.PHONY: deps configure build run test test-torch2 bench clean format

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

# The same suite against pip's LibTorch 2.x (a CUDA build: the CUDA/NCCL code paths are
# compiled in; the tests run on CPU), with that torch's Python on the other side of the
# interop tests. .ci/run runs it after `make test`.
BUILD2 ?= build-torch2
test-torch2: deps
	@py=$$(./scripts/torch2_python.sh) && test -f $(BUILD2)/build.ninja || \
	  cmake -S . -B $(BUILD2) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPTRAIN_PYTHON=$$py \
	    -DCMAKE_PREFIX_PATH=$$($$py -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null) $(CMAKE_ARGS)
	@cmake --build $(BUILD2) -j $(JOBS)
	cd $(BUILD2) && ctest --output-on-failure -j 2 $(CTEST_ARGS)

bench: build
	./bench/run_bench.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

clean:
	rm -rf $(BUILD)

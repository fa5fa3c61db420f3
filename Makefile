# Everything starts here: make, make run, make test (see README.md).
PYTHON ?= /usr/bin/python3
CC ?= gcc
CFLAGS ?= -O3 -march=native
WARN := -std=c11 -Wall -Wextra -Wshadow -Wno-unknown-pragmas
# OpenMP when the compiler has it; run.c also builds without it (one thread).
OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo -fopenmp)
SOURCES := run.c tokenizer.c
HEADERS := $(wildcard *.h kernels/*.h kernels/*/*.h)
MODEL ?= models/kjv.bin
# The program's file is named by its absolute path so that `make run` can mean "build and run".
BIN := $(CURDIR)/run
QUANTIZE_LIB := export/build/libquantize.so

.PHONY: all run test deps clean sanitize fuzz bench model test-paths

all: $(BIN) $(QUANTIZE_LIB)

$(BIN): $(SOURCES) $(HEADERS)
	$(CC) $(CFLAGS) $(WARN) $(OPENMP) -o $@ $(SOURCES) -lm

# The exporter's quantizers in C (export/quantize.c), which export/block_formats.py loads when it
# is built: the same bytes as its NumPy ones, tens of times faster. No fused multiply-adds: the
# reference quantizers round each product.
$(QUANTIZE_LIB): export/quantize.c kernels/f16.h kernels/types.h
	@mkdir -p export/build
	$(CC) -O3 -march=native -ffp-contract=off $(WARN) -fPIC -shared -o $@ export/quantize.c -lm

# build the program and generate from the shipped model
run: $(BIN) $(QUANTIZE_LIB)
	./run $(MODEL) -i "And God said" -n 200 -t 0.8 -k 40 -p 0.9


deps:
	@PYTHON=$(PYTHON) bash tests/deps.sh

# Every instruction-set path of the kernels, each a build of run (tests/build/run-PATH), of
# tests/test_kernels.c (test_kernels-PATH) and of tests/trace.c (trace-PATH); tests/paths.py
# says which ones this CPU runs. x86-64: portable C, AVX2+FMA, AVX2+FMA+AVX-VNNI, AVX-512 with
# VNNI (x86-64-v4), and -march=native as it is (AVX-512, AMX where the CPU has it); the
# AVX-512 and AVX-VNNI kernels once more as SIMDe builds (avx512vnni-simde, avxvnni-simde: AVX2
# code with those intrinsics emulated in portable C by tests/simde_shim.h, so that any AVX2 CPU
# runs them, slowly, for correctness; AMX has no such emulation); plus the ARM
# paths, NEON without and with dotprod, built with Debian's cross compiler and run under
# qemu-user: tests/build/PROGRAM-neon is then a script that starts qemu on PROGRAM-neon.elf with
# a CPU of that kind (Cortex-A72, Neoverse-N1). An aarch64 machine builds the ARM paths natively.
ARCH := $(shell uname -m)
ARM_PATHS := neon neon-dotprod
ifeq ($(ARCH),aarch64)
PATHS := scalar $(ARM_PATHS) native
ARM_CC := $(CC)
else
PATHS := scalar avx2 avxvnni avx512vnni native avxvnni-simde avx512vnni-simde $(ARM_PATHS)
ARM_CC := aarch64-linux-gnu-gcc
EMULATED := $(ARM_PATHS)
endif
FLAGS_scalar := -O3
FLAGS_avx2 := -O3 -mavx2 -mfma -mf16c
FLAGS_avxvnni := -O3 -mavx2 -mfma -mf16c -mavxvnni
FLAGS_avx512vnni := -O3 -march=x86-64-v4 -mavx512vnni
FLAGS_native := -O3 -march=native
SIMDE := -O3 -mavx2 -mfma -mf16c -Wno-psabi -include tests/simde_shim.h
FLAGS_avxvnni-simde := $(SIMDE) -DSHIM_AVXVNNI
FLAGS_avx512vnni-simde := $(SIMDE) -DSHIM_AVX512VNNI
FLAGS_neon := -O3 -march=armv8-a
FLAGS_neon-dotprod := -O3 -march=armv8.2-a+dotprod
QEMU_CPU_neon := cortex-a72
QEMU_CPU_neon-dotprod := neoverse-n1
HASH := \#
# $(call path_build,PATH,OUTPUT,SOURCES AND FLAGS)
path_build = $(if $(filter $(1),$(EMULATED)),\
	$(ARM_CC) $(FLAGS_$(1)) $(WARN) -fopenmp -o $(2).elf $(3) -lm && \
	printf '$(HASH)!/bin/sh\nexec qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu $(QEMU_CPU_$(1)) "$$0.elf" "$$@"\n' > $(2) && \
	chmod +x $(2),\
	$(if $(filter $(1),$(ARM_PATHS)),$(ARM_CC),$(CC)) $(FLAGS_$(1)) $(WARN) $(OPENMP) -o $(2) $(3) -lm)
tests/build/run-%: $(SOURCES) $(HEADERS) tests/simde_shim.h
	@mkdir -p tests/build
	$(call path_build,$*,$@,$(SOURCES))
tests/build/test_kernels-%: tests/test_kernels.c $(SOURCES) $(HEADERS) tests/simde_shim.h
	@mkdir -p tests/build
	$(call path_build,$*,$@,-Wno-unused-function tests/test_kernels.c tokenizer.c)
tests/build/trace-%: tests/trace.c $(SOURCES) $(HEADERS) tests/simde_shim.h
	@mkdir -p tests/build
	$(call path_build,$*,$@,-Wno-unused-function tests/trace.c tokenizer.c)
PATH_BUILDS := $(foreach p,$(PATHS),tests/build/run-$(p) tests/build/test_kernels-$(p) tests/build/trace-$(p))

# The engine as a library (tests/test_engine.py), and with AddressSanitizer + LeakSanitizer.
tests/build/engine_library: tests/engine_library.c $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CC) -O2 $(WARN) $(OPENMP) -Wno-unused-function -o $@ tests/engine_library.c tokenizer.c -lm
tests/build/engine_library-asan: tests/engine_library.c $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CC) $(SANITIZE) $(WARN) -Wno-unused-function -o $@ tests/engine_library.c tokenizer.c -lm

# Thousands of texts through tokenizer.c in one process, for the tokenizer exactness tests.
tests/build/tokenize_lines: tests/tokenize_lines.c $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CC) -O2 $(WARN) -Wno-unused-function -o $@ tests/tokenize_lines.c tokenizer.c -lm

# llama.cpp as the GGUF tests' reference (tests/llama_ref.c): compiled against the headers of
# the release node-llama-cpp bundles (its llama/gitRelease.bundle, a git bundle: only include/
# and ggml/include/ are checked out, under tests/build) and linked to the prebuilt libraries of
# @node-llama-cpp/linux-x64 or linux-arm64 (tests/deps.sh installs them), found by an rpath.
# Nothing of llama.cpp is in the repository.
LLAMA_PLATFORM := linux-$(if $(filter aarch64,$(ARCH)),arm64,x64)
LLAMA_LIBS := $(CURDIR)/node_modules/@node-llama-cpp/$(LLAMA_PLATFORM)/bins/$(LLAMA_PLATFORM)
LLAMA_BUNDLE := node_modules/node-llama-cpp/llama/gitRelease.bundle
LLAMA_HEADERS := tests/build/llama.cpp
$(LLAMA_HEADERS)/include/llama.h: $(LLAMA_BUNDLE)
	@mkdir -p tests/build
	rm -rf $(LLAMA_HEADERS)
	git clone -q --no-checkout $(LLAMA_BUNDLE) $(LLAMA_HEADERS)
	git -C $(LLAMA_HEADERS) checkout -q HEAD -- include ggml/include
	touch $@
tests/build/llama_ref: tests/llama_ref.c $(LLAMA_HEADERS)/include/llama.h
	$(CC) -O2 $(WARN) -I$(LLAMA_HEADERS)/include -I$(LLAMA_HEADERS)/ggml/include -DLLAMA_LIBS='"$(LLAMA_LIBS)"' \
	    -o $@ $< -L$(LLAMA_LIBS) -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so \
	    -Wl,-rpath,$(LLAMA_LIBS)

# Reproduce the shipped model from Debian's bible-kjv: corpus, BPE vocabulary, training (about
# an hour on 2 cores; resumable after a kill: run it again), export, held-out score. Training
# stops at step 2400 of a 3200-step schedule, where held-out loss had stopped improving; the
# checkpoint with the lowest held-out loss (step 2200) is the one exported.
KJV := data/kjv
model: deps $(BIN) $(QUANTIZE_LIB)
	$(PYTHON) export/kjv.py $(KJV)
	$(PYTHON) export/train_tokenizer.py $(KJV)/train.txt $(KJV)/tokenizer.json --vocab-size 2048
	$(PYTHON) export/train.py --train $(KJV)/train.txt --heldout $(KJV)/heldout.txt \
	    --tokenizer $(KJV)/tokenizer.json --out $(KJV)/run --n-layer 4 --n-head 4 --n-embd 256 \
	    --n-ctx 256 --batch-size 32 --steps 3200 --stop-step 2400 --warmup 200 --lr 2e-3 \
	    --eval-every 200 --resume
	$(PYTHON) export/export.py $(KJV)/run/best.pt models/kjv.bin
	cp $(KJV)/run/loss.png models/loss.png
	./run models/kjv.bin --perplexity $(KJV)/heldout.txt

tests/build/bandwidth: tests/bench/bandwidth.c
	@mkdir -p tests/build
	$(CC) -O3 -march=native -fopenmp -o $@ $<
tests/build/kernels: tests/bench/kernels.c $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CC) $(CFLAGS) $(WARN) -Wno-unused-function -fopenmp -o $@ tests/bench/kernels.c tokenizer.c -lm

# speed against the memory-bandwidth ceiling, and the tokenizer against npm tiktoken
bench: deps $(BIN) $(QUANTIZE_LIB) tests/build/bandwidth tests/build/kernels tests/build/llama_ref $(PATH_BUILDS)
	$(PYTHON) tests/bench/bench.py --runs 5

# stdin is /dev/null: run reads a prompt from stdin when it is not a terminal
test: deps $(BIN) $(QUANTIZE_LIB) $(PATH_BUILDS) tests/build/tokenize_lines tests/build/llama_ref tests/build/engine_library \
      tests/build/engine_library-asan
	$(PYTHON) -m pytest -q -p no:cacheprovider --durations=15 tests < /dev/null

# The decoder's parity tests once per instruction-set path this machine runs (tests/paths.py
# names the ones it skips and why; the ARM paths run emulated, slowly).
test-paths: deps $(PATH_BUILDS)
	for p in $$($(PYTHON) tests/paths.py); do echo "== path $$p"; RUN_BINARY=$(CURDIR)/tests/build/run-$$p \
	    $(PYTHON) -m pytest -q -p no:cacheprovider tests/test_parity.py < /dev/null || exit 1; done

# The whole suite against an AddressSanitizer + UndefinedBehaviorSanitizer build of run.
# Leak checking is off for the suite (error paths exit without freeing on purpose) and on for
# a normal generation, which must free everything.
SANITIZE := -g -O2 -march=native -fsanitize=address,undefined -fno-sanitize-recover=all \
            -fno-omit-frame-pointer
run-asan: $(SOURCES) $(HEADERS)
	$(CC) $(SANITIZE) $(WARN) $(OPENMP) -o $@ $(SOURCES) -lm
tests/build/test_kernels-asan: tests/test_kernels.c $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CC) $(SANITIZE) $(WARN) -Wno-unused-function -o $@ tests/test_kernels.c tokenizer.c -lm
# The suite's tests that run `run`, against its AddressSanitizer + UBSan build: those of the
# instruction-set paths, the build checks and the kernels' own binaries run other builds (their
# kernels are checked by test_kernels-asan), so they are left to `make test`.
sanitize: deps $(QUANTIZE_LIB) run-asan tests/build/test_kernels-asan tests/build/tokenize_lines tests/build/llama_ref
	tests/build/test_kernels-asan > /dev/null
	ASAN_OPTIONS=detect_leaks=0 RUN_BINARY=$(CURDIR)/run-asan $(PYTHON) -m pytest -q -p no:cacheprovider --durations=15 \
	    --ignore=tests/test_paths.py --ignore=tests/test_build.py --ignore=tests/test_kernels.py tests < /dev/null
	ASAN_OPTIONS=detect_leaks=1 ./run-asan tests/tmp/parity_gpt2.bin -i "And God said" -n 16 -s 1 --stop xyz \
	    --repeat-penalty 1.2 > /dev/null
	ASAN_OPTIONS=detect_leaks=1 ./run-asan tests/tmp/parity_gpt2.bin -i "And God said" -n 300 -s 1 --stop " the" \
	    --samples 5 > /dev/null

# libFuzzer targets (clang) for the loader, the tokenizer, chat's messages reader and the server's
# request readers; FUZZ_SECONDS each.
CLANG ?= clang
FUZZ_SECONDS ?= 600
FUZZ := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
tests/build/fuzz_%: tests/fuzz/fuzz_%.c $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CLANG) $(FUZZ) -Wno-unused-function -o $@ $< tokenizer.c -lm
tests/build/fuzz_vocab/cl100k.bin: tests/fuzz/make_inputs.py
	$(PYTHON) tests/fuzz/make_inputs.py vocabs tests/build/fuzz_vocab
fuzz: deps tests/build/fuzz_loader tests/build/fuzz_tokenizer tests/build/fuzz_messages tests/build/fuzz_request \
      tests/build/fuzz_vocab/cl100k.bin
	@mkdir -p tests/build/corpus/loader tests/build/corpus/tokenizer tests/build/corpus/messages tests/build/corpus/request
	ASAN_OPTIONS=allocator_may_return_null=1 tests/build/fuzz_loader -max_total_time=$(FUZZ_SECONDS) \
	    -max_len=65536 -rss_limit_mb=4096 -print_final_stats=1 tests/build/corpus/loader tests/fuzz/seeds/loader
	FUZZ_VOCAB_DIR=tests/build/fuzz_vocab tests/build/fuzz_tokenizer -max_total_time=$(FUZZ_SECONDS) \
	    -max_len=4096 -print_final_stats=1 tests/build/corpus/tokenizer tests/fuzz/seeds/tokenizer
	tests/build/fuzz_messages -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 \
	    tests/build/corpus/messages tests/fuzz/seeds/messages
	tests/build/fuzz_request -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -print_final_stats=1 \
	    tests/build/corpus/request tests/fuzz/seeds/request

clean:
	rm -rf run run-asan tests/build tests/tmp export/build

# Everything starts here: make, make run, make test (see README.md).
PYTHON ?= /usr/bin/python3
CC ?= gcc
CFLAGS ?= -O3 -march=native
WARN := -std=c11 -Wall -Wextra -Wshadow -Wno-unknown-pragmas
# OpenMP when the compiler has it; run.c also builds without it (one thread).
OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo -fopenmp)
SOURCES := run.c tokenizer.c
HEADERS := model.h unicode_tables.h kernels.h kernels_q8.h sampler.h attention_page.h
MODEL ?= models/kjv.bin
# The program's file is named by its absolute path so that `make run` can mean "build and run".
BIN := $(CURDIR)/run

.PHONY: all run test deps clean sanitize fuzz bench model test-paths

all: $(BIN)

$(BIN): $(SOURCES) $(HEADERS)
	$(CC) $(CFLAGS) $(WARN) $(OPENMP) -o $@ $(SOURCES) -lm

# build the program and generate from the shipped model
run: $(BIN)
	./run $(MODEL) -i "And God said" -n 200 -t 0.8 -k 40 -p 0.9


deps:
	@PYTHON=$(PYTHON) bash tests/deps.sh

# The same program for each instruction-set path of the kernels, for tests/test_paths.py:
# portable C, AVX2+FMA, AVX2+FMA+AVX-VNNI, -march=native without AMX (q8_0 prefill on
# AVX512-VNNI), and -march=native as it is (AVX-512, and AMX where the CPU has it).
PATHS := scalar avx2 avxvnni avx512vnni native
FLAGS_scalar := -O3
FLAGS_avx2 := -O3 -mavx2 -mfma
FLAGS_avxvnni := -O3 -mavx2 -mfma -mavxvnni
FLAGS_avx512vnni := -O3 -march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
FLAGS_native := -O3 -march=native
tests/build/run-%: $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CC) $(FLAGS_$*) $(WARN) $(OPENMP) -o $@ $(SOURCES) -lm
# tests/test_kernels.c, the hand-computed kernel checks, for each path too
tests/build/test_kernels-%: tests/test_kernels.c $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CC) $(FLAGS_$*) $(WARN) $(OPENMP) -Wno-unused-function -o $@ tests/test_kernels.c tokenizer.c -lm

# Reproduce the shipped model from Debian's bible-kjv: corpus, BPE vocabulary, training (about
# an hour on 2 cores; resumable after a kill: run it again), export, held-out score. Training
# stops at step 2400 of a 3200-step schedule, where held-out loss had stopped improving; the
# checkpoint with the lowest held-out loss (step 2200) is the one exported.
KJV := data/kjv
model: deps $(BIN)
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
	$(CC) -O2 -march=native -fopenmp -o $@ $<

# speed against the memory-bandwidth ceiling, and the tokenizer against npm tiktoken
bench: deps $(BIN) tests/build/bandwidth $(PATHS:%=tests/build/run-%)
	$(PYTHON) tests/bench/bench.py --runs 5

test: deps $(BIN) $(PATHS:%=tests/build/run-%) $(PATHS:%=tests/build/test_kernels-%)
	$(PYTHON) -m pytest -q -p no:cacheprovider tests

# The decoder's parity tests once per instruction-set path (longer than make test).
test-paths: deps $(PATHS:%=tests/build/run-%)
	for p in $(PATHS); do RUN_BINARY=$(CURDIR)/tests/build/run-$$p \
	    $(PYTHON) -m pytest -q -p no:cacheprovider tests/test_parity.py || exit 1; done

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
sanitize: deps run-asan tests/build/test_kernels-asan $(PATHS:%=tests/build/run-%)
	tests/build/test_kernels-asan > /dev/null
	ASAN_OPTIONS=detect_leaks=0 RUN_BINARY=$(CURDIR)/run-asan $(PYTHON) -m pytest -q -p no:cacheprovider tests
	ASAN_OPTIONS=detect_leaks=1 ./run-asan tests/tmp/parity_gpt2.bin -i "And God said" -n 16 -s 1 > /dev/null

# libFuzzer targets (clang) for the loader and the tokenizer; FUZZ_SECONDS each.
CLANG ?= clang
FUZZ_SECONDS ?= 600
FUZZ := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
tests/build/fuzz_%: tests/fuzz/fuzz_%.c $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CLANG) $(FUZZ) -Wno-unused-function -o $@ $< tokenizer.c -lm
tests/build/fuzz_vocab/cl100k.bin: tests/fuzz/make_inputs.py
	$(PYTHON) tests/fuzz/make_inputs.py vocabs tests/build/fuzz_vocab
fuzz: deps tests/build/fuzz_loader tests/build/fuzz_tokenizer tests/build/fuzz_vocab/cl100k.bin
	@mkdir -p tests/build/corpus/loader tests/build/corpus/tokenizer
	ASAN_OPTIONS=allocator_may_return_null=1 tests/build/fuzz_loader -max_total_time=$(FUZZ_SECONDS) \
	    -max_len=65536 -rss_limit_mb=4096 -print_final_stats=1 tests/build/corpus/loader tests/fuzz/seeds/loader
	FUZZ_VOCAB_DIR=tests/build/fuzz_vocab tests/build/fuzz_tokenizer -max_total_time=$(FUZZ_SECONDS) \
	    -max_len=4096 -print_final_stats=1 tests/build/corpus/tokenizer tests/fuzz/seeds/tokenizer

clean:
	rm -rf run run-asan tests/build tests/tmp

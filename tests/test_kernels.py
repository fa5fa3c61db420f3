"""Runs tests/test_kernels.c, built by `make test` for every instruction-set path this machine runs (tests/paths.py: ARM ones under qemu)
(tests/build/test_kernels-PATH): run.c's kernels against values computed by hand (softmax,
scaled dot product, masking, GELU, LayerNorm, UTF-8 streaming), and matmul() for each matrix
kernel of that path (float32 tiles, q8_0 and q4_0 dot products, VNNI and AMX prefill; the
AVX-512 and AVX-VNNI ones also through SIMDe on any AVX2 CPU) against sums in
double."""
import subprocess

import pytest

from common import PATHS, REPO


@pytest.mark.parametrize("path", PATHS)
def test_kernels_against_hand_computed_values(path: str) -> None:
    binary = REPO / "tests" / "build" / f"test_kernels-{path}"
    assert binary.exists(), f"{binary} is missing: run `make test`, which builds it"
    r = subprocess.run([str(binary)], capture_output=True, timeout=60)
    print(r.stdout.decode())
    assert r.returncode == 0, r.stdout.decode()
    assert b"not ok" not in r.stdout and b" 0 failed" in r.stdout

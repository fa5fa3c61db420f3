"""Runs tests/test_kernels.c (built by `make test`): run.c's kernels against values computed
by hand (softmax, scaled dot product, masking, GELU, LayerNorm, UTF-8 streaming), and matmul()
for every kernel this CPU runs (float32 tiles, q8_0 dot products, AMX) against sums in double."""
import subprocess

from common import REPO


def test_kernels_against_hand_computed_values() -> None:
    binary = REPO / "tests" / "build" / "test_kernels"
    assert binary.exists(), "tests/build/test_kernels is missing: run `make test`, which builds it"
    r = subprocess.run([str(binary)], capture_output=True, timeout=60)
    print(r.stdout.decode())
    assert r.returncode == 0, r.stdout.decode()
    assert b"not ok" not in r.stdout and b" 0 failed" in r.stdout

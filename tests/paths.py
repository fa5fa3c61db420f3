"""The instruction-set paths of the kernels, and which of them this machine can run.

Each path is a build of run, tests/test_kernels.c and tests/trace.c (tests/build/run-PATH etc.,
flags in the Makefile). On an x86-64 machine the ARM paths are cross-compiled and run under
qemu-user (tests/deps.sh installs both); they are never skipped there, so a missing emulator
fails the tests that use them. A path whose instructions this CPU lacks is skipped, with the
reason.

The AVX-512 and AVX-VNNI kernels also have a SIMDe build (avx512vnni-simde, avxvnni-simde:
AVX2 code with those intrinsics emulated in portable C, tests/simde_shim.h), which runs on any
x86-64 CPU with AVX2. `make test` runs their kernel tests and logits on every such CPU; `make
test-paths` runs the parity suite through one only where the CPU lacks the real path.

usage: paths.py [--for-bench]   prints the paths to run, one line, and on stderr the skipped
                                ones with their reasons; --for-bench also skips emulated paths
"""
from __future__ import annotations

import platform
import sys
from pathlib import Path

X86_PATHS = {  # path -> CPU flags (/proc/cpuinfo) it needs
    "scalar": [],
    "avx2": ["avx2", "fma", "f16c"],
    "avxvnni": ["avx2", "fma", "f16c", "avx_vnni"],
    "avx512vnni": ["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512_vnni"],  # x86-64-v4 + VNNI
    "native": [],
    "avxvnni-simde": ["avx2", "fma", "f16c"],
    "avx512vnni-simde": ["avx2", "fma", "f16c"],
}
SIMDE_PATHS = {"avxvnni-simde": "avxvnni", "avx512vnni-simde": "avx512vnni"}  # -> the path it emulates
ARM_PATHS = {"neon": [], "neon-dotprod": ["asimddp"]}
EMULATED = {**{p: "emulated by qemu-user (Cortex-A72 without dotprod, Neoverse-N1 with)" for p in ARM_PATHS},
            **{p: "emulated by SIMDe" for p in SIMDE_PATHS}}


def cpu_flags() -> set[str]:
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    return flags


def paths() -> dict[str, str | None]:
    """Every path of this machine's architecture -> None when it runs here, else why not."""
    have = cpu_flags()
    if platform.machine() == "aarch64":
        table = {"scalar": [], **ARM_PATHS, "native": []}
    else:
        table = dict(X86_PATHS)
    out: dict[str, str | None] = {}
    for path, needs in table.items():
        missing = [f for f in needs if f not in have]
        out[path] = f"this CPU lacks {', '.join(missing)}" if missing else None
    if platform.machine() != "aarch64":
        out.update({path: None for path in ARM_PATHS})
    return out


def emulated(path: str) -> bool:
    return (path in ARM_PATHS and platform.machine() != "aarch64") or path in SIMDE_PATHS


def runnable(for_bench: bool = False) -> list[str]:
    """The paths for `make test-paths` (a SIMDe path only where its real one cannot run here),
    or for `make bench` (nothing emulated)."""
    table = paths()
    for simde, real in SIMDE_PATHS.items():
        if table.get(simde) is None and table.get(real) is None:
            table[simde] = f"the real {real} path runs here"
    if for_bench:
        table.update({p: EMULATED[p] + ": its speed says nothing" for p in table if emulated(p) and table[p] is None})
    for path, why in table.items():
        if why:
            print(f"skipped path {path}: {why}", file=sys.stderr)
    return [p for p, why in table.items() if why is None]


if __name__ == "__main__":
    print(" ".join(runnable(for_bench="--for-bench" in sys.argv)))

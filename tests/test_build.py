"""Every instruction-set target the kernels have paths for compiles, with the normal build's
warnings (the Makefile's WARN) made errors, on any machine: a compiler checks code for a CPU it
does not have. The program is compiled as the build compiles it (-O3 -c: some warnings and every
"target specific option mismatch" appear only when optimising); the two test programs that
include it whole (tests/test_kernels.c, tests/trace.c) and the fuzz targets are checked
(-fsyntax-only), and so is every header on its own, which fails when one uses something it does
not include.

x86 targets need gcc for x86-64 (on an ARM machine, Debian's gcc-x86-64-linux-gnu, which
tests/deps.sh installs); ARM targets need aarch64-linux-gnu-gcc on x86-64 (also installed by
tests/deps.sh). A missing compiler fails these tests; it never skips them."""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from common import REPO

# target -> its -march (and extra -m) flags. The x86 list covers each kernel path's instruction
# sets as real CPUs combine them: AVX2 without and with AVX-VNNI, AVX-512 without VNNI
# (Skylake-X), with VNNI (Ice Lake, Zen 4), with AMX (Sapphire Rapids); GCC 12 has no znver4,
# so Zen 4 is znver3 plus its AVX-512 extensions.
ZEN4 = ("-march=znver3 -mavx512f -mavx512cd -mavx512bw -mavx512dq -mavx512vl -mavx512vnni -mavx512bf16 "
        "-mavx512ifma -mavx512vbmi -mavx512vbmi2 -mavx512bitalg -mavx512vpopcntdq -mgfni -mvaes -mvpclmulqdq")
X86_TARGETS = {
    "x86-64": "-march=x86-64",
    "x86-64-v4": "-march=x86-64-v4",
    "haswell": "-march=haswell",
    "skylake-avx512": "-march=skylake-avx512",
    "icelake-server": "-march=icelake-server",
    "sapphirerapids": "-march=sapphirerapids",
    "alderlake": "-march=alderlake",
    "znver2": "-march=znver2",
    "znver3": "-march=znver3",
    "znver4": ZEN4,
}
ARM_TARGETS = {
    "armv8-a": "-march=armv8-a",
    "armv8.2-a+dotprod": "-march=armv8.2-a+dotprod",
    "armv8.2-a+fp16+dotprod": "-march=armv8.2-a+fp16+dotprod",
}


def compiler(target: str) -> str:
    native_x86 = platform.machine() in ("x86_64", "AMD64")
    if target in X86_TARGETS:
        return "gcc" if native_x86 else "x86_64-linux-gnu-gcc"
    return "aarch64-linux-gnu-gcc" if native_x86 else "gcc"


def warning_flags(root: Path) -> list[str]:
    """The Makefile's WARN: the warnings the normal build enables."""
    m = re.search(r"^WARN\s*:=\s*(.*)$", (root / "Makefile").read_text(), re.M)
    assert m, "the Makefile has no WARN line"
    return m.group(1).split()


def headers(root: Path) -> list[Path]:
    return sorted([*root.glob("*.h"), *root.glob("kernels/*.h"), *root.glob("kernels/*/*.h")])


def compile_jobs(root: Path, target: str) -> list[list[str]]:
    """The compiler commands for one target: each source, each header alone."""
    cc = compiler(target)
    flags = [*X86_TARGETS.get(target, ARM_TARGETS.get(target, "")).split(), *warning_flags(root), "-Werror",
             "-fopenmp"]
    jobs = [[cc, "-O3", "-c", "-o", "/dev/null", *flags, str(root / src)] for src in ("run.c", "tokenizer.c")]
    for src in ("tests/test_kernels.c", "tests/trace.c", *sorted(str(p.relative_to(root)) for p in root.glob("tests/fuzz/*.c"))):
        jobs.append([cc, "-fsyntax-only", *flags, "-Wno-unused-function", str(root / src)])
    for h in headers(root):
        jobs.append([cc, "-fsyntax-only", "-x", "c", *flags, "-Wno-unused-function", str(h)])
    return jobs


def run_jobs(root: Path, jobs: list[tuple[str, list[str]]]) -> dict[str, list[str]]:
    """Run (target, command) jobs, two at a time; returns each target's failures (command and
    compiler output)."""
    for cc in {cmd[0] for _, cmd in jobs}:
        assert shutil.which(cc), f"{cc} is missing: run tests/deps.sh (as root it installs it)"

    def run(job: tuple[str, list[str]]) -> tuple[str, str | None]:
        target, cmd = job
        r = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
        return target, None if r.returncode == 0 else " ".join(cmd) + "\n" + r.stderr[-3000:]

    failures: dict[str, list[str]] = {target: [] for target, _ in jobs}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for target, failure in pool.map(run, jobs):
            if failure:
                failures[target].append(failure)
    return failures


def check_targets(root: Path, targets: list[str], only_program: bool = False) -> dict[str, list[str]]:
    """Compile everything (or only run.c) for each target under root."""
    jobs = [(t, cmd) for t in targets for cmd in compile_jobs(root, t)[:1 if only_program else None]]
    return run_jobs(root, jobs)


TARGETS = [*X86_TARGETS, *ARM_TARGETS]
_results: dict[str, list[str]] = {}


@pytest.mark.parametrize("target", TARGETS)
def test_target_compiles_without_warnings(target: str) -> None:
    if not _results:  # every target's compiles at once, spread over both cores
        _results.update(check_targets(REPO, TARGETS))
    failures = _results[target]
    assert not failures, f"{len(failures)} compile(s) failed for {target}:\n" + "\n".join(failures)


def test_the_check_catches_a_path_that_stops_compiling(tmp_path: Path) -> None:
    """The check above can fail: a copy of the tree whose AMX-only code calls a function before
    it is declared (the break of issue 21) fails for sapphirerapids and only there, and a NEON-
    only unused variable fails for ARM and only there."""
    for item in ("run.c", "tokenizer.c", "Makefile", "tests", "kernels", *[p.name for p in REPO.glob("*.h")]):
        src = REPO / item
        if src.is_dir():
            shutil.copytree(src, tmp_path / item, ignore=shutil.ignore_patterns("build", "tmp", "__pycache__", "bench"))
        else:
            shutil.copy(src, tmp_path / item)
    q8 = tmp_path / "kernels" / "x86" / "q8_0.h"
    text = q8.read_text()
    anchor = "static void amx_rows16(const QuantProduct *p, int panel) {\n"
    assert anchor in text, "the AMX kernel moved: update this test"
    q8.write_text(text.replace(anchor, anchor + "    (void)declared_later(p->T);\n"))
    neon = tmp_path / "kernels" / "arm" / "q8_0.h"
    neon.write_text(neon.read_text().replace("#else\n    /* without sdot", "#else\n    int unused_here;\n    /* without sdot", 1))
    assert "int unused_here" in neon.read_text(), "the NEON branch moved: update this test"
    failures = check_targets(tmp_path, ["sapphirerapids", "znver3", "armv8-a", "armv8.2-a+dotprod"], only_program=True)
    assert failures["sapphirerapids"], "a call to an undeclared function in AMX code compiled"
    assert not failures["znver3"], "code for AMX only broke a build without AMX"
    assert failures["armv8-a"], "an unused variable in NEON code passed -Werror"
    assert not failures["armv8.2-a+dotprod"], "code for NEON without dotprod broke a dotprod build"


def test_every_arrow_points_down() -> None:
    """A kernel includes only kernels (kernels/ knows numbers and blocks, nothing above it), and
    the loader no kernel but the numeric types: every quoted #include of a file under kernels/
    resolves inside kernels/, and load.h's only one there is kernels/types.h."""
    kernels = (REPO / "kernels").resolve()
    for header in sorted(kernels.rglob("*.h")):
        for name in re.findall(r'^#include "([^"]+)"', header.read_text(), re.M):
            target = (header.parent / name).resolve()
            assert target.is_relative_to(kernels), f"{header.relative_to(REPO)} includes {name}, above kernels/"
            assert target.exists(), f"{header.relative_to(REPO)} includes {name}, which does not exist"
    loads = re.findall(r'^#include "([^"]+)"', (REPO / "load.h").read_text(), re.M)
    assert [n for n in loads if n.startswith("kernels/")] == ["kernels/types.h"], loads


def design_tree() -> list[str]:
    """The files of docs/design.md's "Where things are" tree above kernels/, top to bottom."""
    text = (REPO / "docs" / "design.md").read_text()
    section = text[text.index("## Where things are"):text.index("The exporter is in rooms")]
    names = re.findall(r"^    (?:[│├└─ ]*)([\w.]+\.[ch])\b", section, re.M)
    return names[:names.index("util.h") + 1]


def test_the_design_tree_is_the_include_order() -> None:
    """docs/design.md lists every file of the program above kernels/ (run.c and each header but
    tokenizer.c's tables) in an order where each includes only files below it: the arrows point
    down, so no two files include each other, and the tree is the code's. run.c stays the
    program's story, under 400 lines."""
    order = design_tree()
    files = {"run.c", *(p.name for p in REPO.glob("*.h"))} - {"unicode_tables.h", "unicode_nfc.h"}
    assert sorted(order) == sorted(files), f"in the tree but not the code: {set(order) - files}; in the code but " \
                                           f"not the tree: {files - set(order)}"
    for i, name in enumerate(order):
        for included in re.findall(r'^#include "([^"/]+)"', (REPO / name).read_text(), re.M):
            assert included in order[i + 1:], f"{name} includes {included}, which the tree lists above it"
    lines = len((REPO / "run.c").read_text().splitlines())
    assert lines < 400, f"run.c has {lines} lines"


def test_one_list_of_weight_types_in_c_and_python() -> None:
    """kernels/types.h's WEIGHT_TYPE_LIST and export/weight_types.py's TYPES are the same list:
    the same names at the same ids, the same values per block, the same bytes per block of the
    types stored as GGUF's blocks."""
    import sys
    sys.path.insert(0, str(REPO / "export"))
    from weight_types import TYPES
    text = (REPO / "kernels" / "types.h").read_text()
    listed = re.search(r"#define WEIGHT_TYPE_LIST\(X\)(.*?)\n\n", text, re.S)
    assert listed, "kernels/types.h has no WEIGHT_TYPE_LIST"
    macros = dict(re.findall(r"^#define (\w+) \(?(\d+)", text, re.M))
    macros.update(QUANT_GROUP="32")
    value = lambda token: int(macros.get(token, token))  # noqa: E731
    c_types = [(name, value(block), value(size)) for _, name, block, size in
               re.findall(r"X\((\w+), (\w+), (\w+), (\w+)\)", listed.group(1))]
    py_types = [(t.name, t.block, t.block_bytes) for t in TYPES]
    assert c_types == py_types

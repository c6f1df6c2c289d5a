"""Build steps pyproject.toml cannot express: the LD_PRELOAD hook and the report assets.

The hook in native/ is a plain shared library (not a Python extension), built with the
system C compiler as part of `pip install`, and installed inside the package as
tracelink/libtracelink_hook.so so tracelink finds it at run time. The report assets in
viewer/ are copied into tracelink/viewer/ for non-editable installs.
"""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
HOOK_SOURCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "native").glob("*.c"))


class BuildPlainSharedLibrary(build_ext):
    """Name the hook libtracelink_hook.so instead of a Python extension filename."""

    def get_ext_filename(self, fullname: str) -> str:
        # Called with the full dotted name, and with the bare last component at link time.
        if fullname.rpartition(".")[2] == "libtracelink_hook":
            return str(Path(*fullname.split(".")[:-1], "libtracelink_hook.so"))
        return super().get_ext_filename(fullname)

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return []  # no PyInit_* symbol: this library is preloaded, never imported


class BuildPyWithViewer(build_py):
    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            target = Path(self.build_lib) / "tracelink" / "viewer"
            shutil.copytree(ROOT / "viewer", target, dirs_exist_ok=True)


setup(
    ext_modules=[
        Extension(
            "tracelink.libtracelink_hook",
            sources=HOOK_SOURCES,
            include_dirs=["native"],
            extra_compile_args=["-O2", "-g0", "-std=gnu11", "-fvisibility=hidden", "-Wall"],
            libraries=["dl", "pthread", "m"],
        )
    ]
    if HOOK_SOURCES
    else [],
    cmdclass={"build_ext": BuildPlainSharedLibrary, "build_py": BuildPyWithViewer},
)

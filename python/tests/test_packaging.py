"""`pip install .` gives a typed madpipe package that imports and plans without the source tree."""

import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_pip_install_gives_an_importable_package(tmp_path):
    # The build type and warnings of the main build, so that ccache serves the planner's objects.
    settings = ["-C", "cmake.build-type=" + os.environ.get("MADPIPE_CMAKE_BUILD_TYPE", "Release")]
    if os.environ.get("MADPIPE_WERROR", "OFF").upper() in ("ON", "1", "TRUE"):
        settings += ["-C", "cmake.define.MADPIPE_WERROR=ON"]
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-build-isolation", "--no-deps", "--target", str(site), *settings, str(REPO)],
                   check=True)
    script = ("import madpipe; "
              "plan = madpipe.plan('configs/profiles/resnet50.json', gpus=4, memory='8GiB', bandwidth='12GB/s'); "
              "print(madpipe.__file__); print(madpipe.__version__); print(plan.period_ms)")
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment["PYTHONPATH"] = str(site)
    output = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=environment, check=True,
                            capture_output=True, text=True).stdout.split()
    assert pathlib.Path(output[0]).is_relative_to(site)
    assert output[1] == (REPO / "CMakeLists.txt").read_text().split("project(madpipe VERSION ")[1].split()[0]
    assert float(output[2]) > 0
    # Typed: the marker and the compiled core's stub are installed with the modules.
    package = pathlib.Path(output[0]).parent
    assert (package / "py.typed").is_file() and (package / "_madpipe.pyi").is_file()

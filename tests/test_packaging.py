"""`pip install .` must install every top-level folder under the one name aworld_train."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_maps_every_folder_under_aworld_train(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    wheel = next(tmp_path.glob("aworld_train-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in (
        "aworld_train/__init__.py",
        "aworld_train/rewards/calculator.py",
        "aworld_train/agents/calculator.py",
        "aworld_train/env/calculator.py",
        "aworld_train/env/bfcl/server.py",
        "aworld_train/rewards/bfcl.py",
        "aworld_train/env/agentgym/bridge.py",
        "aworld_train/rewards/agentgym.py",
        "aworld_train/env/agentgym/data.py",
        "aworld_train/engines/__init__.py",
        "aworld_train/engines/verl/loop.py",
        "aworld_train/engines/areal/fields.json",
        "aworld_train/rollout/samples/codec.py",
        "aworld_train/aworld/patches.py",
        "aworld_train/core/protocol.py",
        # the viewer's page: served from the installed package, nothing built or fetched
        "aworld_train/viewer/static/index.html",
        "aworld_train/viewer/static/app.js",
        "aworld_train/viewer/static/style.css",
    ):
        assert module in names, module
    # every module of the mapped folders ships: a subpackage missing from pyproject's list would not
    mapped = {"train": "aworld_train", "agents": "aworld_train/agents", "rewards": "aworld_train/rewards"}
    mapped["env"] = "aworld_train/env"
    for folder, prefix in mapped.items():
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT / folder)
            if folder == "train" and relative.parts[0] in ("agents", "rewards", "env"):
                continue
            assert f"{prefix}/{relative.as_posix()}" in names, path
    tops = {n.split("/")[0] for n in names if not n.startswith("aworld_train-")}
    assert tops == {"aworld_train"}, tops  # no top-level train/, agents/, examples/ or tests/
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "aworld-train = aworld_train.facade.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_installed_package_imports_from_the_mapped_folders():
    import aworld_train.env
    import aworld_train.rewards

    assert Path(aworld_train.rewards.__file__).parent.name == "rewards"
    assert Path(aworld_train.env.__file__).parent.name == "env"

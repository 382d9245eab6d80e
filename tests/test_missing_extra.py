"""A missing optional extra is named with the install line that fits how plait was installed: ``pip install -e
".[extra]"`` in a clone (an editable install or a source tree on PYTHONPATH: the package under the repository's
pyproject.toml), ``pip install 'plait[extra]'`` for an install from PyPI or a wheel (in site-packages)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from plait import errors
from plait.errors import ConfigError, MissingExtra, from_clone, require_extra


def _errors_module_at(folder: Path) -> ModuleType:
    """plait's errors module loaded from a copy at ``folder/plait/errors.py`` (where an install would put it)."""
    path = folder / "plait" / "errors.py"
    path.parent.mkdir(parents=True)
    shutil.copy(errors.__file__, path)
    spec = importlib.util.spec_from_file_location("copied_errors", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_this_checkout_is_a_clone() -> None:
    assert from_clone() is True  # src/plait under the repository's pyproject.toml


def test_a_copy_in_site_packages_is_not_a_clone(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    assert _errors_module_at(site).from_clone() is False


def test_a_source_tree_of_another_project_is_not_a_clone(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\n')
    assert _errors_module_at(tmp_path / "src").from_clone() is False


@pytest.mark.parametrize("clone, run_line, recsys_line", [
    (True, 'pip install -e ".[run]"', 'pip install -e ".[recsys]" && pip install --no-deps torchrec==1.8.0'),
    (False, "pip install 'plait[run]'", "pip install 'plait[recsys]' && pip install --no-deps torchrec==1.8.0"),
])
def test_the_missing_extra_line_fits_the_install(clone: bool, run_line: str, recsys_line: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(errors, "from_clone", lambda: clone)
    monkeypatch.setattr(errors, "_importable", lambda module: module != "torch")
    with pytest.raises(MissingExtra) as caught:
        require_extra("run", "plait run")
    assert str(caught.value) == f"plait run needs PyTorch (torch is not installed): {run_line}"
    assert isinstance(caught.value, ConfigError)
    assert str(MissingExtra("plait run --model dlrm.toml", "recsys", "torchrec")).endswith(f": {recsys_line}")
    other = "pip install 'plait[run]'" if clone else 'pip install -e ".[run]"'
    assert other not in str(caught.value)

"""A missing optional extra is named with the install line that fits how plait was installed: ``pip install -e
".[extra]"`` in a clone (an editable install, PEP 610's ``dir_info.editable``, or a source tree on PYTHONPATH),
``pip install 'plait[extra]'`` for an install from PyPI or a wheel."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from plait import errors
from plait.errors import ConfigError, MissingExtra, from_clone, require_extra


class FakeDistribution:
    """A distribution whose ``direct_url.json`` holds ``text`` (None: the file is absent, as for a PyPI wheel)."""

    def __init__(self, text: str | None) -> None:
        self.text = text

    def read_text(self, name: str) -> str | None:
        assert name == "direct_url.json"
        return self.text


def installed(monkeypatch: pytest.MonkeyPatch, text: str | None) -> None:
    monkeypatch.setattr(metadata, "distribution", lambda name: FakeDistribution(text))


@pytest.mark.parametrize("text, clone", [
    (json.dumps({"url": "file:///home/me/plait", "dir_info": {"editable": True}}), True),  # pip install -e .
    (json.dumps({"url": "file:///home/me/plait", "dir_info": {}}), False),  # pip install . (a copy)
    (json.dumps({"url": "https://example.org/plait-0.1.0-py3-none-any.whl",
                 "archive_info": {"hashes": {}}}), False),  # pip install URL
    (None, False),  # from PyPI: no direct_url.json
    ("not json", False),
])
def test_an_editable_install_is_a_clone_and_others_are_not(text: str | None, clone: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    installed(monkeypatch, text)
    assert from_clone() is clone


def test_a_source_tree_that_is_not_installed_is_a_clone(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    assert from_clone() is True


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

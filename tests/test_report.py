"""Pictures and the HTML report; the page is opened in headless Chromium (Debian's package)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PLAN = ROOT / "examples" / "llama3-70b-pp.toml"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """docs/ shows this command as written (``--gpus-range 32:256``, the output path aside): this run stands for it
    in tests/test_docs_commands.py, so that the suite runs the search once."""
    out = tmp_path_factory.mktemp("report") / "report.html"
    result = subprocess.run([sys.executable, "-m", "plait", "report", "--plan", str(PLAN), "--out", str(out),
                             "--gpus-range", "32:256"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return out


def test_report_is_self_contained(report: Path) -> None:
    page = report.read_text()
    assert page.count("data:image/png;base64,") == 3  # timeline, memory per stage, Pareto front
    assert not re.search(r"(src|href)=[\"']https?://", page)  # nothing to fetch
    assert "Llama 3 70B" in page and "pp_bubble" in page


def test_report_refuses_to_overwrite(report: Path) -> None:
    again = subprocess.run([sys.executable, "-m", "plait", "report", "--plan", str(PLAN), "--out", str(report)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "already exists" in again.stderr


@pytest.mark.parametrize("text", ["x", "1:x", "3", "1:2:3"])
def test_report_refuses_a_malformed_gpus_range_in_one_line(text: str, tmp_path: Path) -> None:
    from tests.inprocess import cli

    code, _, err = cli(["report", "--plan", str(PLAN), "--out", str(tmp_path / "r.html"), "--gpus-range", text])
    assert code == 2 and err.strip() == f"plait: error: gpus range {text!r} must be LOW:HIGH"  # found by the fuzz
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("name", ["step.toml", "step"])
def test_simulate_refuses_a_picture_name_it_would_not_write_as_png(name: str, tmp_path: Path) -> None:
    from tests.inprocess import cli

    code, _, err = cli(["simulate", "--plan", str(PLAN), "--png", str(tmp_path / name)])
    assert code == 2 and err.strip() == f"plait: error: --png {str(tmp_path / name)!r} must end in .png"  # fuzz
    assert list(tmp_path.iterdir()) == []  # matplotlib would have written step.png for a bare name


def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None or not _has_playwright():
        if os.environ.get("PLAIT_REQUIRE_CHROMIUM"):
            pytest.fail("chromium or playwright missing although CI installs them")
        pytest.skip("Debian's chromium and playwright are not installed here; CI installs and runs this")
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    shot = tmp_path / "report.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(report.as_uri())
        images = page.locator("img")
        assert images.count() == 3
        widths = [images.nth(i).evaluate("img => img.naturalWidth") for i in range(3)]
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert errors == []
    assert all(w > 100 for w in widths)  # every picture decoded
    assert shot.stat().st_size > 20_000


def _has_playwright() -> bool:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return False
    return True


def test_simulate_cli_writes_trace_and_png(tmp_path: Path) -> None:
    """The command docs/ shows, as written (its files in this test's folder; tests/test_docs_commands.py leaves it
    to this test). ``simulate --json`` is checked in tests/test_cli_options.py."""
    trace, png = tmp_path / "step.json", tmp_path / "step.png"
    out = subprocess.run([sys.executable, "-m", "plait", "simulate", "--plan", str(PLAN), "--trace", str(trace),
                          "--png", str(png)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert trace.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

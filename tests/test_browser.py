"""JupyterLab in a real browser: notebook 07 runs in the pinned JupyterLab, opened in headless Chromium driven by
selenium, and its explorer widget renders and responds.

The server is JupyterLab itself (``python -m jupyterlab`` from this environment) on 127.0.0.1, a free port and a
random token, serving a temporary folder that holds a copy of notebook 07. It inherits this test run's environment,
in which conftest.py points WORKBOOK_OUTPUT_ROOT at a temporary folder holding a copy of results/, so running the
notebook writes its results, figures and tables there, never into the repository (checked below). The browser is
Debian's ``chromium`` with its ``chromium-driver`` (nothing is downloaded: selenium is given both paths and
SE_OFFLINE). Without them the test is skipped locally and fails on CI (CI set), where ``.ci/run`` installs them.

What it does: open the notebook, Run > Run All Cells, wait for the explorer's first generation, pick the other
draft and press Generate, wait for the second generation and check that the output changed, save a screenshot
(``explorer_07.png`` under the test's tmp_path; README's figure is one of these).
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import paths

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
NOTEBOOK = "07_speculative_decoding.ipynb"
SERVER_START_S, RUN_ALL_S, GENERATE_S = 90, 240, 120


def _need(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} on CI: .ci/run must install chromium and chromium-driver (and selenium is pinned)")
    pytest.skip(reason)


@pytest.fixture
def browser_tools():
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        _need(f"{' and '.join(missing)} missing (sudo apt-get install --no-install-recommends chromium chromium-driver)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        _need("selenium is not installed (pip install -e . installs the pinned version)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _snapshot(pattern: str) -> dict:
    """(mtime, size) of the repository's own output files matching ``pattern`` (results, figures, report tables)."""
    out = {}
    for folder in (paths.REPO_ROOT / "results", paths.REPO_ROOT / "figures", paths.REPO_ROOT / "report" / "generated"):
        for path in folder.rglob(pattern):
            out[str(path)] = (path.stat().st_mtime_ns, path.stat().st_size)
    return out


@pytest.fixture
def start_lab(tmp_path):
    """A factory: start a JupyterLab serving copies of the given notebooks, trusted as ``make lab`` trusts them (the
    saved explorers render only in a trusted notebook); returns (base url, token). Shut down afterwards."""
    started = []

    def start(*notebooks: str):
        root, home = tmp_path / "lab", tmp_path / "jupyter"
        root.mkdir()
        for name in notebooks:
            shutil.copy(paths.NOTEBOOKS_DIR / name, root / name)
        settings = home / "settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        # no "get Jupyter news?" toast and no update check: nothing to reach outside, nothing over the screenshot
        (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                              "checkForUpdates": False}))
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                   JUPYTER_DATA_DIR=str(home / "data"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"))
        # a student's kernel draws with the inline backend; conftest's MPLBACKEND=Agg (for headless tests) would
        # make every explorer's figure vanish after its first change (regression: the 05 and 09 figures did)
        env.pop("MPLBACKEND", None)
        subprocess.run([sys.executable, "-m", "jupyter", "trust", *[str(root / n) for n in notebooks]], env=env,
                       check=True, capture_output=True)
        port, token = _free_port(), secrets.token_hex(16)
        log = open(tmp_path / "jupyterlab.log", "w")
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
             f"--ServerApp.root_dir={root}", "--ServerApp.terminals_enabled=False",
             "--LabApp.extension_manager=readonly"]  # nothing to reach outside
            + (["--allow-root"] if os.geteuid() == 0 else []),  # containers and CI runners often run as root
            env=env, stdout=log, stderr=subprocess.STDOUT)
        started.append((server, log))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as response:
                    if response.status == 200:
                        return url, token
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"JupyterLab did not start:\n{(tmp_path / 'jupyterlab.log').read_text()[-3000:]}")
            time.sleep(0.5)

    yield start
    for server, log in started:
        server.terminate()  # the server shuts its kernels down
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture
def lab(start_lab):
    """JupyterLab serving a copy of notebook 07: (base url, token)."""
    return start_lab(NOTEBOOK)


def _chrome():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # selenium must never fetch a driver or a browser
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1050", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def _open(driver, url: str, token: str, notebook: str) -> None:
    """Open ``notebook`` in JupyterLab and wait until its kernel is up (status bar "... | Idle"): until then the
    Run menu's items are disabled."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{url}/lab/tree/{notebook}?token={token}")
    wait = WebDriverWait(driver, SERVER_START_S)
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".jp-NotebookPanel .jp-Cell")))
    wait.until(ec.presence_of_element_located((By.XPATH, "//*[contains(@class,'jp-StatusBar')]"
                                                         "//*[contains(normalize-space(), '| Idle')]")))


def _run_all_cells(driver, attempts: int = 3) -> None:
    """Run > Run All Cells through the menu bar, as a student would; retried if no cell starts running (a click
    that lands while the notebook is still connecting does nothing)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    enabled_item = ("//li[contains(@class,'lm-Menu-item') and not(contains(@class,'lm-mod-disabled'))]"
                    "/div[contains(@class,'lm-Menu-itemLabel') and normalize-space()='Run All Cells']")
    for _ in range(attempts):
        WebDriverWait(driver, 30).until(ec.element_to_be_clickable(
            (By.XPATH, "//div[contains(@class,'lm-MenuBar-itemLabel') and normalize-space()='Run']"))).click()
        try:
            WebDriverWait(driver, 10).until(ec.element_to_be_clickable((By.XPATH, enabled_item))).click()
            WebDriverWait(driver, 30).until(lambda d: any(
                prompt.text.strip() not in ("", "[ ]:") for prompt in d.find_elements(By.CSS_SELECTOR, ".jp-InputPrompt")))
            return
        except TimeoutException:
            driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)  # close the menu, try again
    raise AssertionError("Run > Run All Cells did not start the notebook")


def test_notebook_07_explorer_in_jupyterlab(browser_tools, lab, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    url, token = lab
    output_root = Path(os.environ["WORKBOOK_OUTPUT_ROOT"])
    assert output_root.resolve() != paths.REPO_ROOT.resolve(), "conftest.py must redirect the notebook outputs"
    before = _snapshot("07_*")
    written = output_root / "figures" / "cpu" / "07_speedup_alpha_vs_gamma.pdf"  # notebook 07 saves it every run
    written_before = written.stat().st_mtime_ns if written.exists() else None  # other notebook tests share the root
    started = time.monotonic()
    driver = _chrome()
    try:
        _open(driver, url, token, NOTEBOOK)
        _run_all_cells(driver)

        first = WebDriverWait(driver, RUN_ALL_S).until(
            ec.presence_of_element_located((By.CSS_SELECTOR, ".explorer-07[data-run='1']")))
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", first)
        first_text = first.text
        assert "speedup" in first_text and "tok/s" in first_text, first_text[:500]
        tokens = driver.find_elements(By.CSS_SELECTOR, ".explorer-07 .code .tok")
        assert len(tokens) >= 8, "the generated tokens should be coloured spans"

        explorer = first.find_element(By.XPATH, "ancestor::div[contains(@class,'widget-vbox')][1]")
        draft_menu = Select(explorer.find_element(By.CSS_SELECTOR, ".widget-dropdown select"))
        draft_menu.select_by_visible_text("cpu-pair/draft-2l (2 layers)")
        explorer.find_element(By.XPATH, ".//button[normalize-space()='Generate']").click()
        second = WebDriverWait(driver, GENERATE_S).until(
            ec.presence_of_element_located((By.CSS_SELECTOR, ".explorer-07[data-run='2']")))
        second_text = second.text
        assert second_text != first_text and "draft-2l" in second_text and "draft-2l" not in first_text

        # the page as a student sees it: file browser folded away, the explorer at the top
        driver.find_element(By.CSS_SELECTOR, ".jp-SideBar li[data-id='filebrowser']").click()
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", explorer)
        driver.execute_script("arguments[0].closest('.jp-WindowedPanel-outer, .jp-Notebook').scrollBy(0, -60)",
                              explorer)
        time.sleep(0.5)
        screenshot = tmp_path / "explorer_07.png"
        assert driver.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 10_000
        print(f"screenshot: {screenshot} ({time.monotonic() - started:.0f} s in the browser)")
    except Exception:
        driver.save_screenshot(str(tmp_path / "failure.png"))  # what the page showed when it went wrong
        raise
    finally:
        driver.quit()
    # the notebook wrote into the temporary output root, not into the repository
    assert written.exists() and written.stat().st_mtime_ns != written_before, f"notebook 07 did not write {written}"
    assert _snapshot("07_*") == before, "running notebook 07 in JupyterLab changed the repository's outputs"


# notebooks with an explorer besides 07 (tested above with its own buttons): each is opened as a student opens it
EXPLORER_NOTEBOOKS = ["04_kv_cache_implementation.ipynb", "05_continuous_batching.ipynb",
                      "09_speedup_analysis.ipynb", "10_tree_and_lookup_decoding.ipynb"]


def _explorers(driver):
    """The explorers on the page: outermost widget boxes that hold a slider, dropdown or button."""
    from selenium.webdriver.common.by import By

    return [box for box in driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output .widget-vbox")
            if box.find_elements(By.CSS_SELECTOR, ".widget-slider, .widget-dropdown, .widget-button")
            and not box.find_elements(By.XPATH, "ancestor::div[contains(@class,'widget-vbox')]")]


def _shown(explorer) -> str:
    """What an explorer draws (its output areas and HTML panes), not its controls."""
    from selenium.webdriver.common.by import By

    return "".join(e.get_attribute("innerHTML") for e in explorer.find_elements(
        By.CSS_SELECTOR, ".widget-output, .widget-html-content"))


def _narrow_controls(explorer) -> list[str]:
    """Controls a mouse cannot use: slider tracks or select boxes under 40 px wide (long labels squeeze them)."""
    from selenium.webdriver.common.by import By

    narrow = []
    for selector in (".widget-slider .slider-container", ".widget-dropdown select", ".widget-inline-hbox select"):
        for element in explorer.find_elements(By.CSS_SELECTOR, selector):
            if element.size["width"] < 40:
                label = element.find_element(By.XPATH, "ancestor::div[contains(@class,'widget-inline-hbox')][1]")
                narrow.append(f"{label.text.strip()[:60]!r}: {element.size['width']} px")
    return narrow


@pytest.mark.parametrize("notebook", EXPLORER_NOTEBOOKS)
def test_explorer_looks_finished_before_and_after_run_all(browser_tools, start_lab, tmp_path, notebook):
    """Opened as ``make lab`` opens it: the saved explorer renders (not its ``VBox(...)`` text) and nothing is marked
    unsaved; after Run > Run All Cells no cell shows an error, every control is wide enough to drag, and one change
    redraws the explorer. Screenshots of both states go to the test's tmp_path."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, token = start_lab(notebook)
    stem = notebook.split("_")[0]
    driver = _chrome()
    try:
        _open(driver, url, token, notebook)
        WebDriverWait(driver, 60).until(lambda d: _explorers(d))  # drawn from the saved widget state
        fallbacks = [e.text[:80] for e in driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")
                     if e.text.lstrip().startswith(("VBox(", "HBox("))]
        assert not fallbacks, f"saved explorers shown as text: {fallbacks}"
        time.sleep(2)
        assert not driver.find_elements(By.CSS_SELECTOR, ".lm-TabBar-tab.jp-mod-dirty"), "opening marked it unsaved"
        driver.save_screenshot(str(tmp_path / f"explorer_{stem}_saved.png"))

        _run_all_cells(driver)

        def running(d):
            return any(p.text.strip() == "[*]:" for p in d.find_elements(By.CSS_SELECTOR, ".jp-InputPrompt"))

        # the saved prompts already show numbers: wait for the run to start, then to end, so that the explorer
        # found below is the new one, backed by the kernel (the saved one redraws nothing)
        WebDriverWait(driver, 30).until(running)
        WebDriverWait(driver, RUN_ALL_S).until(lambda d: not running(d) and _explorers(d))
        errors = driver.find_elements(By.CSS_SELECTOR, "[data-mime-type='application/vnd.jupyter.error']")
        assert not errors, errors[0].text[:1000]
        explorer = _explorers(driver)[-1]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", explorer)
        assert not _narrow_controls(explorer), _narrow_controls(explorer)

        WebDriverWait(driver, GENERATE_S).until(lambda d: _shown(explorer))  # its first drawing is there
        before = _shown(explorer)
        for offset in (40, -80):  # a mouse drag; once more the other way if the first redraw never shows
            handle = explorer.find_element(By.CSS_SELECTOR, ".widget-slider .noUi-handle")
            ActionChains(driver).click_and_hold(handle).move_by_offset(offset, 0).release().perform()
            for button in explorer.find_elements(By.CSS_SELECTOR, "button.widget-button"):
                if button.text.strip() in ("Measure", "Generate"):
                    button.click()
            try:  # redrawn: something shown again, and not what was there before
                WebDriverWait(driver, GENERATE_S // 2).until(lambda d: _shown(explorer) not in ("", before))
                break
            except TimeoutException:
                if offset < 0:
                    raise AssertionError(f"{notebook}: the explorer did not redraw after a change") from None
        time.sleep(3)  # the redrawn figure decodes before the screenshot
        assert not driver.find_elements(By.CSS_SELECTOR, "[data-mime-type='application/vnd.jupyter.error']")
        assert "<img" in _shown(explorer) or "<table" in _shown(explorer) or not "<img" in before, "figure lost"
        driver.save_screenshot(str(tmp_path / f"explorer_{stem}_changed.png"))
        print(f"screenshots: {tmp_path}/explorer_{stem}_*.png")
    except Exception:
        driver.save_screenshot(str(tmp_path / "failure.png"))
        raise
    finally:
        driver.quit()

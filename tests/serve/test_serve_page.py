"""The page ``nmt serve`` serves, in a real headless browser (Debian's chromium, driven by
Selenium through chromium-driver) on a phone-sized screen: it translates what is typed, draws
the attention heatmap of a clicked translation with a cell for every source and target piece,
lets a Transformer's layer and head be chosen, and says when the service refuses a request."""
import json
import re
import subprocess
import sys
import urllib.request
from contextlib import contextmanager

import pytest
from browser import BROWSER, browser, fits_the_screen  # noqa: F401 (a fixture)
from conftest import ROOT
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

pytestmark = BROWSER

SENTENCE = "Tom sees the cat."


@contextmanager
def serving(run, *flags):
    """``nmt serve`` of ``run`` in a process of its own; its address."""
    server = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "serve", "--checkpoint", str(run),
                               "--port", "0", "--max-lines", "2", "--no-access-log", *flags],
                              cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        for line in server.stderr:
            found = re.search(r"at (http://\S+/)", line)
            if found:
                yield found.group(1)
                break
        else:
            pytest.fail(f"nmt serve exited with {server.wait()} before listening")
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.fixture
def served(transformer_run):
    with serving(transformer_run) as base:
        yield base


def _attention(base, body):
    request = urllib.request.Request(base + "attention", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def _visible(driver, selector):
    return WebDriverWait(driver, 60).until(lambda d: [e for e in d.find_elements(By.CSS_SELECTOR, selector)
                                                      if e.is_displayed()])


def _open(browser, base, architecture):
    browser.get(base)
    WebDriverWait(browser, 60).until(lambda d: architecture in d.find_element(By.ID, "model").text)
    browser.find_element(By.ID, "source").send_keys(SENTENCE)


def test_the_page_translates_and_draws_attention_on_a_phone(served, browser, tmp_path):
    _open(browser, served, "Transformer")
    assert "fp32 on cpu" in browser.find_element(By.ID, "model").text  # serve's auto on a CPU, even with bf16
    Select(browser.find_element(By.ID, "beam")).select_by_value("2")
    Select(browser.find_element(By.ID, "nbest")).select_by_value("2")
    browser.find_element(By.ID, "translate").click()
    translations = _visible(browser, "button.translation")
    assert len(translations) == 2

    translations[1].click()  # the second best
    cells = _visible(browser, "#heatmap td.cell")
    expected = _attention(served, {"text": SENTENCE, "beam": 2, "rank": 2})
    keys = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#heatmap th.key")]
    queries = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#heatmap th.query")]
    assert (keys, queries) == (expected["keys"], expected["queries"])
    assert len(cells) == len(keys) * len(queries) > 0
    mean = [[float(c.get_attribute("data-weight")) for c in cells[q * len(keys):(q + 1) * len(keys)]]
            for q in range(len(queries))]
    last = expected["weights"][-1]
    assert mean[0][0] == pytest.approx(sum(h[0][0] for h in last) / len(last), abs=1e-3)  # the last layer, mean
    assert all(browser.find_element(By.ID, control).is_displayed() for control in ("kind", "layer", "head"))

    Select(browser.find_element(By.ID, "layer")).select_by_value("1")
    Select(browser.find_element(By.ID, "head")).select_by_value("2")
    cells = browser.find_elements(By.CSS_SELECTOR, "#heatmap td.cell")
    drawn = [float(c.get_attribute("data-weight")) for c in cells]
    assert drawn == pytest.approx([w for row in expected["weights"][0][1] for w in row], abs=1e-6)
    assert fits_the_screen(browser)
    shot = tmp_path / "page.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:4] == b"\x89PNG"

    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys("Tom.\nMary.\nThe cat.")  # three lines: this service takes two
    browser.find_element(By.ID, "translate").click()
    error = _visible(browser, "#error")[0]
    assert "refused the request (422)" in error.text and "at most 2 items" in error.text


def test_a_gru_run_draws_its_one_map_with_no_layer_or_head_to_choose(tiny_run, browser):
    with serving(tiny_run) as base:
        _open(browser, base, "GRU")
        browser.find_element(By.ID, "translate").click()
        _visible(browser, "button.translation")[0].click()
        cells = _visible(browser, "#heatmap td.cell")
        expected = _attention(base, {"text": SENTENCE})
    assert len(cells) == len(expected["keys"]) * len(expected["queries"]) > 0
    assert not any(browser.find_element(By.ID, control).is_displayed() for control in ("kind", "layer", "head"))


def test_an_export_translates_and_says_it_has_no_attention(transformer_run, browser, tmp_path):
    pytest.importorskip("ctranslate2")
    export = subprocess.run([sys.executable, str(ROOT / "cli.py"), "export", str(transformer_run), "-o",
                             str(tmp_path / "ct2")], capture_output=True, text=True)
    assert export.returncode == 0, export.stderr
    with serving(tmp_path / "ct2", "--engine", "ctranslate2") as base:
        _open(browser, base, "Transformer")
        assert "CTranslate2" in browser.find_element(By.ID, "model").text
        assert "no attention to show" in browser.find_element(By.ID, "model").text
        browser.find_element(By.ID, "translate").click()
        shown = _visible(browser, ".translation.plain")
        shown[0].click()  # nothing to show: no request, no error
        assert not browser.find_elements(By.CSS_SELECTOR, "button.translation")
        assert not browser.find_element(By.ID, "attention").is_displayed()
        assert not browser.find_element(By.ID, "error").is_displayed()
        assert fits_the_screen(browser)

"""The page of nmt compare --html, in a real headless browser on a phone-sized screen: it
shows every score, interval and p-value the comparison found, fits the screen, shows text as
text (never as markup), marks words in no reference, and narrows the examples to those where
a chosen system scores best."""
import random
from pathlib import Path

from browser import BROWSER, browser, fits_the_screen  # noqa: F401 (a fixture)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from nmt.comparison.compare import Comparison
from nmt.comparison.differences import differing_most
from nmt.comparison.page import render
from nmt.comparison.significance import paired_test
from nmt.comparison.systems import System
from nmt.inference.evaluate import TestSet as HeldOut  # (not a test class)

pytestmark = BROWSER
WORDS = "le chat chien voit aime chasse petit grand rouge souris oiseau maintenant".split()
HOSTILE = '<script>document.title="owned"</script> & <b>bold</b>'


def _comparison(tmp_path: Path) -> tuple[Comparison, list]:
    rng = random.Random(1)
    refs = [" ".join(rng.choices(WORDS, k=rng.randint(3, 7))) for _ in range(80)]
    good = [" ".join(w if rng.random() < 0.85 else rng.choice(WORDS) for w in r.split()) for r in refs]
    poor = [" ".join(w if rng.random() < 0.5 else "xyz" for w in r.split()) for r in refs]
    poor[0], good[0] = HOSTILE, refs[0]  # the widest spread: listed first
    poor[1:4], good[1:4] = refs[1:4], ["xyz"] * 3  # where the baseline scores best
    names = ["baseline run", "a much longer system name/with/a/path@averaged", "hyps.txt"]
    hyps = [poor, good, list(poor)]
    test = HeldOut("test.tsv", [f"source {i}" for i in range(80)], [refs])
    signatures, estimates = paired_test(list(zip(names, hyps)), test.refs, ["bleu", "chrf"], "bs", 200, 3)
    systems = [System(name, "file", (tmp_path / name,)) for name in names]
    return (Comparison(systems, test, hyps, [False] * 3, estimates, signatures, "bs", 200, 3),
            differing_most(test.sources, test.refs, hyps, 12))


def test_the_page_shows_the_comparison_on_a_phone(browser, tmp_path: Path) -> None:
    comparison, examples = _comparison(tmp_path)
    page = tmp_path / "compare.html"
    page.write_text(render(comparison, examples, "test.tsv: 80 sentences"), encoding="utf-8")
    browser.get(page.as_uri())
    assert fits_the_screen(browser)
    assert browser.title.startswith("nmt compare: baseline run")  # the hostile text ran no script
    for metric, rows in comparison.estimates.items():
        table = browser.find_element(By.CSS_SELECTOR, f'table.scores[data-metric="{metric}"]')
        shown = [[c.text for c in row.find_elements(By.CSS_SELECTOR, "th, td")]
                 for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert [r[0] for r in shown] == [s.name for s in comparison.systems]
        for cells, e in zip(shown, rows):
            assert cells[1] == f"{e.score:.2f}" and cells[2] == f"{e.mean:.2f} ± {e.ci:.2f}"
            assert cells[4] == ("" if e.p is None else f"{e.p:.4f}")
        assert shown[2][5] == "identical" and shown[1][5] == "significant"
    articles = browser.find_elements(By.CSS_SELECTOR, "#examples article")
    assert len(articles) == len(examples) == 12
    hostile = browser.find_element(By.CSS_SELECTOR, 'article[data-index="0"] dd[data-system="0"]')
    assert HOSTILE.split()[0] in hostile.text and not browser.find_elements(By.CSS_SELECTOR, "#examples b")
    for article in articles:  # marked: the words of a hypothesis that are in none of its references
        known = {w for ref in article.find_elements(By.CSS_SELECTOR, "dd.ref") for w in ref.text.split()}
        marked = {m.text for m in article.find_elements(By.CSS_SELECTOR, "mark")}
        words = {w for hyp in article.find_elements(By.CSS_SELECTOR, "dd.hyp .text") for w in hyp.text.split()}
        assert not marked & known and marked == words - known
    assert "xyz" in {m.text for m in browser.find_elements(By.CSS_SELECTOR, "#examples mark")}

    Select(browser.find_element(By.ID, "filter")).select_by_value("0")
    visible = [a for a in articles if a.is_displayed()]
    wins = [e for e in examples if e.chrf[0] == max(e.chrf)]
    assert 0 < len(wins) < len(examples)
    assert len(visible) == len(wins) and browser.find_element(By.ID, "shown").text == f"{len(wins)} of 12"
    Select(browser.find_element(By.ID, "filter")).select_by_value("")
    assert all(a.is_displayed() for a in articles)
    shot = tmp_path / "page.png"
    assert browser.save_screenshot(str(shot)) and shot.read_bytes()[:4] == b"\x89PNG"

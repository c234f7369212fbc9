"""The docs stay references that the README and the code can point into: every page is under
the size a reference keeps to, every link from the README lands on a page, and every section
that the code or a page cites by name (``docs/performance.md, "Packed weights"``) is a
heading of that page."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
# a citation wraps across comment or docstring lines: "A\n    # whole run under 1 GB"
CITATION = re.compile(r'docs/([\w.-]+\.md), "([^"]+)"')
MAX_PAGE_BYTES = 15_500


def headings(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {m.group(1).strip() for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def citations() -> list[tuple[str, str, str]]:
    found = []
    for path in [*ROOT.glob("nmt/**/*.py"), *ROOT.glob("benchmarks/*.py"), ROOT / "cli.py", *DOCS,
                 ROOT / "README.md"]:
        text = re.sub(r"\s*\n\s*#?\s*", " ", path.read_text(encoding="utf-8"))
        found += [(str(path.relative_to(ROOT)), page, title) for page, title in CITATION.findall(text)]
    return found


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_pages_are_references_not_logs(page):
    assert page.stat().st_size <= MAX_PAGE_BYTES, f"{page.name}: {page.stat().st_size:,} bytes"


def test_readme_links_land_on_pages():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", readme)
    assert links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing


def test_cited_sections_are_headings():
    cited = citations()
    assert len(cited) >= 10  # the code does cite sections; a broken pattern must not pass quietly
    wrong = [(where, page, title) for where, page, title in cited
             if title not in headings(ROOT / "docs" / page)]
    assert not wrong, wrong

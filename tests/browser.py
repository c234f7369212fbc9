"""A real headless browser for the pages nmt writes or serves: Debian's chromium, driven by
Selenium through chromium-driver, on a phone-sized screen. Test modules that use it take
``pytestmark = BROWSER`` and the ``browser`` fixture (``from browser import browser``)."""
import shutil

import pytest

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
BROWSER = [pytest.mark.slow, pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver; .ci/run does)")]
PHONE = {"width": 390, "height": 844, "pixelRatio": 2}


@pytest.fixture
def browser(tmp_path_factory):
    """Chromium on a phone's screen, with a profile of its own (not loose in /tmp)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--user-data-dir={profile}", f"--disk-cache-dir={profile / 'cache'}"):
        options.add_argument(argument)
    options.add_experimental_option("mobileEmulation", {"deviceMetrics": PHONE})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


def fits_the_screen(driver) -> bool:
    """The page is as wide as the phone: it does not scroll sideways."""
    width, page_width = driver.execute_script("return [innerWidth, document.documentElement.scrollWidth]")
    return width == PHONE["width"] and page_width <= width

"""The web page in headless Chromium (tests/web.rs sets the data up).

web_browser.py URL OFFICER_KEY ANALYST_KEY SHOTS_DIR

Fails (an AssertionError, exit 1) at the first page that is not as it
should be; saves a screenshot of each page in SHOTS_DIR.
"""

import os
import sys

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

URL, OFFICER, ANALYST, SHOTS = sys.argv[1:5]


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        # The gateway's certificate is its own (self-signed).
        "--ignore-certificate-errors",
        "--window-size=1280,900",
        # Nothing from outside: the page must work offline.
        "--proxy-server=http://0.0.0.0:9",
        "--proxy-bypass-list=127.0.0.1",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


d = browser()
wait = WebDriverWait(d, 30)


def shot(name):
    d.save_screenshot(os.path.join(SHOTS, f"{name}.png"))


def no_script_ran():
    try:
        alert = d.switch_to.alert
        raise AssertionError(f"a script ran: {alert.text}")
    except NoAlertPresentException:
        pass


def main_text():
    return d.find_element(By.TAG_NAME, "main").text


def go(path):
    d.get(URL + path)
    no_script_ran()


def link(text):
    return d.find_element(By.LINK_TEXT, text)


def sign_in(key, screenshot=False):
    go("/ui/")
    assert d.current_url == URL + "/ui/login", d.current_url
    if screenshot:
        shot("login")
    field = d.find_element(By.NAME, "key")
    field.send_keys(key)
    field.send_keys(Keys.ENTER)
    wait.until(EC.url_to_be(URL + "/ui/"))


def sign_out():
    d.find_element(By.XPATH, "//button[text()='Sign out']").click()
    wait.until(EC.url_to_be(URL + "/ui/login"))
    go("/ui/datasets/ds")
    assert d.current_url == URL + "/ui/login", "signed out: " + d.current_url


# ---- the officer sees everything ----------------------------------------
go("/ui/login")
field = d.find_element(By.NAME, "key")
field.send_keys("dtfs_not_a_key")
field.send_keys(Keys.ENTER)
assert "unknown or revoked" in main_text(), main_text()

sign_in(OFFICER, screenshot=True)
assert "ds" in main_text()
shot("datasets")

link("ds").click()
wait.until(EC.url_to_be(URL + "/ui/datasets/ds"))
rows = d.find_elements(By.CSS_SELECTOR, "table.log tbody tr")
assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == ["v3", "v2", "v1"], [r.text for r in rows]
text = main_text()
assert "latest~2" in text and "published" in text and "third" in text, text
shot("log")

# Keyboard: the first Tab reaches the skip link, the next ones the links.
body = d.find_element(By.TAG_NAME, "body")
body.send_keys(Keys.TAB)
assert d.switch_to.active_element.text == "Skip to content", d.switch_to.active_element.text
d.switch_to.active_element.send_keys(Keys.TAB)
assert d.switch_to.active_element.tag_name == "a"

# A phone's width: nothing wider than the screen but the tables' own scroll.
d.set_window_size(390, 844)
go("/ui/datasets/ds")
wide = d.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
assert wide <= 1, f"{wide} px wider than a phone"
shot("phone-log")
d.set_window_size(1280, 900)

link("Browse latest").click()
wait.until(EC.url_contains("/versions/latest/files"))
# A name that is markup is a name.
assert d.find_elements(By.LINK_TEXT, "<img src=x onerror=alert(1)>.csv")
no_script_ran()
link("many/").click()
wait.until(EC.url_contains("/files/many"))
assert "page 1 of 100 (20000)" in main_text(), main_text()
names = d.find_elements(By.CSS_SELECTOR, "table.files tbody tr")
assert len(names) == 201, len(names)  # 200 and ".."
shot("folder")
d.find_element(By.CSS_SELECTOR, "a[rel=next]").click()
wait.until(EC.url_contains("page=2"))
assert "f00200" in main_text() and "f00199" not in main_text()

go("/ui/datasets/ds/versions/v1/files/tables/weather.csv")
cells = [c.text for c in d.find_elements(By.CSS_SELECTOR, "table.preview td")]
assert "<script>alert(1)</script>" in cells, cells
assert "integer" in main_text()
no_script_ran()
shot("csv")

go("/ui/datasets/ds/versions/latest/files/%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E.csv")
assert "<img src=y onerror=alert(2)>" in main_text(), main_text()
no_script_ran()

go("/ui/datasets/ds/versions/latest/files/plot.png")
image = d.find_element(By.CSS_SELECTOR, "img.image")
wait.until(lambda _: d.execute_script("return arguments[0].complete", image))
assert d.execute_script("return arguments[0].naturalWidth", image) == 2, "the image shows"
shot("image")

go("/ui/datasets/ds/versions/latest/files/tables/t.parquet")
text = main_text()
assert "100 rows shown of 1000" in text and "INT64" in text and "n99" in text, text
shot("parquet")

go("/ui/datasets/ds/diff/v1..v3")
text = main_text()
assert "readme.txt" in text and "tables/weather.csv" in text, text
shot("diff")
link("readme.txt").click()
wait.until(EC.url_contains("/files/readme.txt"))
assert "-<b>world</b>" in main_text() and "+there" in main_text(), main_text()
shot("diff-text")
go("/ui/datasets/ds/diff/v1..v3/files/tables/weather.csv")
text = main_text()
assert "Rows added (2)" in text and "Rows removed (2)" in text and "Lima" in text, text
shot("diff-table")

go("/ui/datasets/ds")
d.find_element(By.ID, "path").send_keys("readme.txt", Keys.ENTER)
wait.until(EC.url_contains("/history"))
rows = [r.text for r in d.find_elements(By.CSS_SELECTOR, "table.log tbody tr")]
assert len(rows) == 2 and rows[0].startswith("v3 M") and rows[1].startswith("v1 A"), rows
shot("history")

go("/ui/datasets/ds/audit")
assert "Every chain check holds" in main_text(), main_text()
assert "v2" in main_text()
shot("audit")

go("/ui/health")
assert "status" in main_text()
shot("health")

sign_out()

# ---- the analyst: a version and a folder hidden --------------------------
sign_in(ANALYST)
seen = []


def visit(path):
    go(path)
    source = d.page_source
    seen.append(path)
    for hidden in ("private", "secret", "notes-of-the-hidden-version", ">v2<", "/v2/", "second"):
        assert hidden not in source, f"{path} shows {hidden!r}"
    return main_text()


text = visit("/ui/datasets/ds")
rows = d.find_elements(By.CSS_SELECTOR, "table.log tbody tr")
assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == ["v3", "v1"], [r.text for r in rows]
assert "+ / ~ / −" in text
visit("/ui/datasets/ds/versions/v3/files")
assert "tables/" in main_text()
visit("/ui/datasets/ds/diff/v1..v3")
visit("/ui/datasets/ds/audit")


def as_missing(hidden_path, missing_path, hidden, missing):
    """A page asking for something hidden is the page for something that
    never was, but for the name typed."""
    go(hidden_path)
    shown = main_text().replace(hidden, missing)
    go(missing_path)
    assert shown == main_text(), f"{hidden_path}: {shown!r} / {main_text()!r}"


as_missing("/ui/datasets/ds/versions/v2/files", "/ui/datasets/ds/versions/v9/files", "v2", "v9")
as_missing("/ui/datasets/ds/versions/v1/files/private", "/ui/datasets/ds/versions/v1/files/nothere", "private", "nothere")
as_missing(
    "/ui/datasets/ds/versions/v1/files/private/secret.csv",
    "/ui/datasets/ds/versions/v1/files/nothere/secret.csv",
    "private",
    "nothere",
)
as_missing(
    "/ui/datasets/ds/versions/v1/download/private/secret.csv",
    "/ui/datasets/ds/versions/v1/download/nothere/secret.csv",
    "private",
    "nothere",
)
as_missing("/ui/datasets/ds/diff/v1..v2", "/ui/datasets/ds/diff/v1..v9", "v2", "v9")
as_missing(
    "/ui/datasets/ds/history?path=private/secret.csv",
    "/ui/datasets/ds/history?path=nothere/secret.csv",
    "private",
    "nothere",
)
as_missing(
    "/ui/datasets/ds/history?path=notes-of-the-hidden-version.txt",
    "/ui/datasets/ds/history?path=nothere.txt",
    "notes-of-the-hidden-version.txt",
    "nothere.txt",
)
shot("analyst-log")
sign_out()
d.quit()
print("ok:", len(seen), "hidden-checked pages")

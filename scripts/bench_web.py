"""Page times of the web page in headless Chromium (scripts/bench-web.sh).

bench_web.py URL KEY RUNS
"""
import statistics
import sys

import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

URL, KEY, RUNS = sys.argv[1], sys.argv[2], int(sys.argv[3])
options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--ignore-certificate-errors", "--window-size=1280,900"):
    options.add_argument(arg)
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
d.get(URL + "/ui/login")
field = d.find_element(By.NAME, "key")
field.send_keys(KEY, Keys.ENTER)


def timed(path):
    """Milliseconds from navigation to the load event, and to the first
    byte, each the median of RUNS navigations; and the first navigation's
    load (nothing of the page in the gateway's memory yet)."""
    loads, firsts = [], []
    for _ in range(RUNS):
        d.get(URL + path)
        t = d.execute_script("const n = performance.getEntriesByType('navigation')[0];"
                             "return [n.loadEventEnd - n.startTime, n.responseStart - n.startTime];")
        loads.append(t[0])
        firsts.append(t[1])
    return statistics.median(loads), statistics.median(firsts), loads[0]


for name, path in [
    ("log of 1,000 versions, first page", "/ui/datasets/big"),
    ("folder of 20,000 files, first page", "/ui/datasets/big/versions/latest/files/many"),
    ("preview of a 1 GiB Parquet file (100 rows)", "/ui/datasets/big/versions/latest/files/tables/big.parquet"),
]:
    load, first, cold = timed(path)
    print(f"{name}: load {load:.0f} ms median (first byte {first:.0f} ms); the first navigation {cold:.0f} ms")
requests.packages.urllib3.disable_warnings()
r = requests.get(URL + "/datasets/big/versions/latest/preview/tables/big.parquet",
                 headers={"Authorization": "Bearer " + KEY}, verify=False)
p = r.json()
print(f"Parquet preview: {len(p['rows'])} rows of {p['total_rows']}, {p['bytes_read'] / 2**20:.1f} MiB read of {p['size'] / 2**30:.2f} GiB")
d.quit()

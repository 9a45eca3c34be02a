"""docs/img/report.png: the HTML report of the default scenario in a headless browser, zoomed onto
the steady state with the pointer on a backward pass (run from the repository root; it needs
chromium, chromedriver and selenium, as the report's tests do).

    python docs/report_screenshot.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    from outputs.browser import chromium, hover, open_report
    from simtrain import api

    result = api.simulate(api.resolve(None))
    tl = result.timeline
    backward = next(s for s in tl.spans(tl.mask(rank=16, stream="compute", kind="B")) if s.mb == 6)
    with tempfile.TemporaryDirectory() as tmp, chromium(1400, 1000) as driver:
        page = api.write_outputs(result, tmp, plot=False, html=True)["html"]
        open_report(driver, Path(page).as_uri())
        driver.execute_script("simtrain.setWindow(arguments[0], arguments[1])", 0.9, 2.4)
        hover(driver, 16, "compute", (backward.start_s + backward.end_s) / 2)
        driver.save_screenshot(str(ROOT / "docs" / "img" / "report.png"))
    print("wrote docs/img/report.png", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Write the step report's screenshot kept in docs/ (``make report-screenshot``, after ``make demo``).

``python tests/tools/report_screenshot.py PAGE PNG``: opens PAGE in headless
Chromium with the network off (tests/helpers/browser.py) and keeps the top
of it, as a reader first sees it; fails on a console error or a request.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # tests/ from this checkout, after the wheel

from tests.helpers.browser import open_page  # noqa: E402


def main() -> int:
    page, png = Path(sys.argv[1]), Path(sys.argv[2])
    opened = open_page(page, png, width=1280, height=1500)
    if opened.console_errors or opened.blocked:
        print(f"{page}: console errors {opened.console_errors}, requests {opened.blocked}", file=sys.stderr)
        return 1
    print(f"wrote {png} ({png.stat().st_size / 1024:.0f} KB, {opened.distinct_colours()} colours)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every template card of the pack opens from ComfyUI's Templates dialog into a non-empty graph (headless Chromium).

ComfyUI lists a pack's `example_workflows/*.json` at `/workflow_templates` and serves them (and the `.jpg`
thumbnails beside them) under `/api/workflow_templates/<pack>/`. This test checks the server side of that
(names, thumbnails, no API-format file among them) and then, in the browser, opens the Templates dialog
(command `Comfy.BrowseTemplates`), clicks each of our cards by its title and waits for the graph to hold
exactly that workflow's nodes. Same skips as test_web_extension.py (browser) and conftest.py (server).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.integration.test_web_extension import UI_SETTINGS, browser  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PACK = "ComfyUI-Inferix"  # conftest links the repository as custom_nodes/ComfyUI-Inferix
CARDS = sorted((REPO / "example_workflows").glob("*.json"))


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.read()


def _click_text(page, text: str, what: str, timeout: float = 60) -> None:
    """Click the innermost element of the (last open) dialog whose whole text is `text`, once it is there."""
    page.wait_for(
        f"""(() => {{
          const dialogs = document.querySelectorAll('[role=dialog], .p-dialog');
          const dialog = dialogs[dialogs.length - 1];
          if (!dialog) return false;
          const hits = [...dialog.querySelectorAll('*')].filter((e) => e.textContent.trim() === {json.dumps(text)});
          if (!hits.length) return false;
          hits[hits.length - 1].click();
          return true;
        }})()""",
        timeout,
        what,
    )


def test_server_lists_our_cards_with_thumbnails(comfyui):
    listed = comfyui.get_json("/workflow_templates")
    assert sorted(listed.get(PACK, [])) == sorted(p.stem for p in CARDS), listed.get(PACK)
    for card in CARDS:
        base = f"{comfyui.url}/api/workflow_templates/{PACK}/{urllib.parse.quote(card.stem)}"
        assert json.loads(_get(base + ".json")) == json.loads(card.read_text())
        thumb = _get(base + ".jpg")
        assert thumb[:3] == b"\xff\xd8\xff", f"{card.stem}.jpg is not a JPEG"


def test_every_template_opens_a_non_empty_graph(comfyui, browser):  # noqa: F811 - the fixture
    status, _ = comfyui.post_json("/settings", UI_SETTINGS)
    assert status == 200
    browser.send("Page.navigate", url=comfyui.url + "/")
    browser.wait_for("!!(window.app?.graph && window.app?.extensionManager?.command)", 180, "the ComfyUI page")
    for card in CARDS:
        expected = sorted(n["type"] for n in json.loads(card.read_text())["nodes"])
        browser.eval("app.graph.clear()")
        browser.eval("app.extensionManager.command.execute('Comfy.BrowseTemplates')")
        # the pack's own category (a side-bar entry under Extensions in 1.45), then the card by its title
        _click_text(browser, PACK, f"the {PACK} category in the Templates dialog")
        _click_text(browser, card.stem, f"the card {card.stem} in the Templates dialog")
        nodes = browser.wait_for(
            "app.graph.nodes.length && app.graph.nodes.map((n) => n.comfyClass || n.type)",
            60,
            f"the graph of {card.stem}",
        )
        assert sorted(nodes) == expected, card.stem
        browser.eval("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")

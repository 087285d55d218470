"""Every template card of the pack opens from ComfyUI's Templates dialog into a non-empty graph (headless Chromium).

ComfyUI lists a pack's `example_workflows/*.json` at `/workflow_templates` and serves them (and the `.jpg`
thumbnails beside them) under `/api/workflow_templates/<pack>/`. This test checks the server side of that
(names, thumbnails, no API-format file among them) and then, in the browser, opens the Templates dialog
(command `Comfy.BrowseTemplates`), clicks each of our cards by its title and waits for the graph to hold
exactly that workflow's nodes. Same skips as test_web_extension.py (browser) and conftest.py (server).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.integration.test_web_extension import UI_SETTINGS, browser  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PACK = "ComfyUI-Inferix"  # conftest links the repository as custom_nodes/ComfyUI-Inferix
CARDS = sorted((REPO / "example_workflows").glob("*.json"))
# close whatever dialog the previous card left open (a missing-models notice, the Templates dialog itself)
CLOSE_DIALOGS = """document.querySelectorAll('.p-dialog-close-button, .p-dialog-header-close, [aria-label=Close]')
  .forEach((b) => b.click())"""


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.read()


def _open_card(page, title: str, timeout: float = 90) -> None:
    """In the open dialogs: click the pack's category until the card titled `title` shows, then the card.

    The category is clicked again every few seconds while the card is missing: the dialog selects its first
    category itself once the template index has loaded, which can undo an earlier click (frontend 1.27).
    Its scrollable parts are scrolled to the end meanwhile: past the first page the cards render on scroll.
    """
    page.wait_for(
        f"""(() => {{
          const dialogs = [...document.querySelectorAll('[role=dialog], .p-dialog')];
          const innermost = (text) => {{
            const hits = dialogs.flatMap((d) => [...d.querySelectorAll('*')]).filter((e) => e.textContent.trim() === text);
            return hits.length ? hits[hits.length - 1] : null;
          }};
          const card = innermost({json.dumps(title)});
          if (card) {{ card.click(); return true; }}
          // more cards than the first page: the dialog renders the rest as it is scrolled (frontend 1.27)
          dialogs.flatMap((d) => [...d.querySelectorAll('*')])
            .filter((e) => e.scrollHeight > e.clientHeight + 4)
            .forEach((e) => {{ e.scrollTop = e.scrollHeight; }});
          const now = Date.now();
          if (!window.__inferixPackClick || now - window.__inferixPackClick > 3000) {{
            const pack = innermost({json.dumps(PACK)});
            if (pack) {{ pack.click(); window.__inferixPackClick = now; }}
          }}
          return false;
        }})()""",
        timeout,
        f"the card {title} in the Templates dialog",
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
    # no missing-models dialog over the Templates dialog (the Self-Forcing cards name files the test lacks)
    quiet = {"Comfy.Workflow.ShowMissingModelsWarning": False, "Comfy.Workflow.ShowMissingNodesWarning": False}
    status, _ = comfyui.post_json("/settings", {**UI_SETTINGS, **quiet})
    assert status == 200
    browser.send("Page.navigate", url=comfyui.url + "/")
    browser.wait_for("!!(window.app?.graph && window.app?.extensionManager?.command)", 180, "the ComfyUI page")
    for card in CARDS:
        expected = sorted(n["type"] for n in json.loads(card.read_text())["nodes"])
        # the previous card's dialog must be gone: Comfy.BrowseTemplates on a dialog still closing closes it
        browser.wait_for(
            f"(() => {{ {CLOSE_DIALOGS}; return !document.querySelector('[role=dialog], .p-dialog'); }})()",
            30,
            "the previous dialogs to close",
        )
        time.sleep(0.5)
        browser.eval("app.graph.clear()")
        browser.eval("app.extensionManager.command.execute('Comfy.BrowseTemplates')")
        browser.eval("window.__inferixPackClick = 0")
        _open_card(browser, card.stem)  # via the pack's category (Extensions in 1.45, Custom Nodes in 1.27)
        nodes = browser.wait_for(
            "app.graph.nodes.length && app.graph.nodes.map((n) => n.comfyClass || n.type)",
            60,
            f"the graph of {card.stem}",
        )
        assert sorted(nodes) == expected, card.stem
        browser.eval("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")

"""The page at ``GET /``, in Chromium: a prompt streams its continuation, a task's inputs
show its JSON, and text from the user or the model is shown as text, never as markup."""

from __future__ import annotations

from helpers import live

ATTACK = "<img src=x onerror=\"document.title='owned'\">"


def open_page(browser, url: str):
    tab = browser.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.goto(url)
    tab.errors = errors
    return tab


def test_a_prompt_streams_its_continuation_as_text(browser, lm_run) -> None:
    with live(lm_run) as url:
        tab = open_page(browser, url)
        tab.fill("#input", f"to be {ATTACK}")
        tab.fill("#temperature", "0")
        tab.fill("#max", "12")
        tab.click("button[type=submit]")
        tab.wait_for_function(
            "document.getElementById('output').textContent.length > 30", timeout=30_000
        )
        tab.wait_for_timeout(500)
        output = tab.text_content("#output")
        assert output.startswith(f"to be {ATTACK}")
        assert tab.query_selector("#output img") is None and tab.title() != "owned"
        assert tab.errors == []
        tab.close()


def test_a_tasks_inputs_show_its_json(browser, copy_run) -> None:
    with live(copy_run) as url:
        tab = open_page(browser, url)
        tab.fill("#input", "3 4 5\n7 7 1")
        tab.click("button[type=submit]")
        tab.wait_for_function(
            "document.getElementById('output').textContent.includes('translation')",
            timeout=30_000,
        )
        shown = tab.text_content("#output")
        assert shown.count('"translation"') == 2 and tab.errors == []
        tab.close()

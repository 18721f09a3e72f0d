"""The page at ``GET /``, in Chromium: a prompt streams its continuation, a task's inputs
show its JSON, the attention viewer shows the last input's tokens, and text from the user
or the model is shown as text, never as markup."""

from __future__ import annotations

import json

from helpers import live
from scratchformer.run import load_run
from scratchformer.viz import capture_attention

ATTACK = "<img src=x onerror=\"document.title='owned'\">"


def open_page(browser, url: str):
    tab = browser.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.goto(url)
    tab.errors = errors
    return tab


def attention_tokens(tab) -> list[str]:
    """The query tokens of the attention viewer in the page's frame, once it shows."""
    tab.wait_for_selector("#attention:not([hidden])", timeout=30_000)
    viewer = tab.query_selector("#attention").content_frame()
    viewer.wait_for_selector('.token[data-side="query"]')
    assert viewer.query_selector(".token img") is None
    return viewer.eval_on_selector_all(
        '.token[data-side="query"]', "ts => ts.map(t => t.textContent)"
    )


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
        shown = "".join(attention_tokens(tab))  # (a space is shown as ␣ where it is a token's)
        assert shown.startswith("tobe") and "<img" in shown
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
        assert shown.count('"translation"') == 2
        task, model = load_run(copy_run)
        assert attention_tokens(tab) == capture_attention(task, model, "7 7 1").queries["encoder"]
        assert tab.errors == []
        tab.close()


def test_a_question_and_its_context_are_the_fields_of_a_line(browser, qa_run) -> None:
    with live(qa_run) as url:
        tab = open_page(browser, url)
        tab.fill("#input", "Who won?\tThe winner is Grace.")
        tab.click("button[type=submit]")
        tab.wait_for_function(
            "document.getElementById('output').textContent.includes('probability')",
            timeout=30_000,
        )
        [answer] = json.loads(tab.text_content("#output"))
        task, model = load_run(qa_run)
        [expected] = task.predict(model, [("Who won?", "The winner is Grace.")])
        assert answer["answer"] == expected.answer and tab.errors == []
        tab.close()

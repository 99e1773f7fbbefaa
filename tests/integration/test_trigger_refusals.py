"""The trigger form in a real browser refuses every bad value when Trigger is pressed: the API
server's check answers with one sentence, the form shows it in its error box, and no DAG run is
created. Number boxes keep what was typed (no silent clamping), the switches carry no "required"
asterisk, and the form starts from the demo's configuration. Screenshots of each refusal, scrolled
to the sentence, go to build/ui-screenshots/refused-*.png."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.stack import Stack
from tests.integration.ui import DAG, log_in, open_trigger_form, shot

Fill = Callable[[Any, Any], None]


def _text(field: str, value: str) -> Fill:
    """Type ``value`` into the text field ``field``."""
    def fill(page: Any, dialog: Any) -> None:
        dialog.locator(f"#element_{field}").fill(value)
    return fill


def _number(field: str, value: str) -> Fill:
    """Type ``value`` into the number box ``field`` and leave it; the box must keep it as typed."""
    def fill(page: Any, dialog: Any) -> None:
        box = dialog.locator(f'[id="number-input:element_{field}"] input')
        box.fill(value)
        box.press("Tab")  # a number box with a minimum would clamp here (-5 became 1)
        assert box.input_value() == value, f"the {field} box changed {value!r} to {box.input_value()!r}"
    return fill


def _knobs(text: str) -> Fill:
    """Replace the knobs' JSON editor (Monaco) text with ``text``, pasted as a user would (typing
    it would add the editor's automatic closing quotes and braces)."""
    def fill(page: Any, dialog: Any) -> None:
        dialog.locator("#element_model_knobs .view-lines").click()
        page.keyboard.press("Control+A")
        page.evaluate("""text => {
            const data = new DataTransfer();
            data.setData('text/plain', text);
            document.activeElement.dispatchEvent(
                new ClipboardEvent('paste', {clipboardData: data, bubbles: true, cancelable: true}));
        }""", text)
        page.wait_for_timeout(500)
    return fill


#: (name, form section, what the user does, the sentence the form must show)
REFUSALS: list[tuple[str, str, Fill, str]] = [
    ("unknown-model", "Model", _text("model", "no_such_model"),
     "parameter 'model': unknown model 'no_such_model' (zoo: inception_v3, mlp, nmt, tensor_holography, "
     "transformer; or a .keras file under {home}/models, or MODULE:FUNCTION under CELERITAS_MODEL_MODULES)"),
    ("missing-keras-file", "Model", _text("model", "resnet.keras"),
     "parameter 'model': no such .keras file: {home}/models/resnet.keras"),
    ("negative-batch", "Model", _number("batch_size", "-5"),
     "parameter 'batch_size': Batch size must be at least 1, not -5"),
    ("garbage-knob", "Model", _knobs('{"layers": "many"}'),
     "parameter 'model_knobs.layers': Model size knobs must be a whole number, not \"many\""),
    ("unknown-knob", "Model", _knobs('{"depth": 3}'),
     "parameter 'model_knobs': tensor_holography has no knob 'depth' (its knobs: layers, filters, "
     "image_size); leave the knobs empty for its own sizes"),
    ("other-model-with-the-demos-knobs", "Model", _text("model", "nmt"),
     "parameter 'model_knobs': nmt has no knob 'filters' (its knobs: layers, units, seq_len, vocab); "
     "leave the knobs empty for its own sizes"),
    ("device-memory-garbage", "Cluster", _text("device_memory", "lots"),
     "parameter 'device_memory': Memory per device: \"lots\" is not a number of bytes with an optional "
     "unit, e.g. 32GiB, 500MB or 1e9"),
    ("device-memory-too-large", "Cluster", _text("device_memory", "1e30"),
     "parameter 'device_memory': Memory per device must be at most 1e+18 bytes (1 EB), not \"1e30\""),
    ("too-many-devices", "Cluster", _number("num_devices", "65"),
     "parameter 'num_devices': Devices must be at most 64, not 65"),
    ("fraction-above-one", "Placement", _number("memory_fraction", "1.5"),
     "parameter 'memory_fraction': Cluster memory cap must be at most 1, not 1.5"),
    ("run-dir-outside-the-runs-root", "Storage", _text("run_dir", "/etc"),
     "parameter 'run_dir': /etc is outside the runs root {home}/build/runs (CELERITAS_RUNS_ROOT)"),
]


@pytest.fixture(scope="module")
def page(browser, stack: Stack) -> Any:
    """A logged-in page, the placement DAG parsed and unpaused."""
    stack.wait_for_dag(DAG)
    page = browser.new_page()
    log_in(page, stack)
    return page


@pytest.mark.parametrize(("name", "section", "fill", "sentence"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_bad_value_is_refused_at_trigger_time_with_one_sentence_and_no_run(
        page: Any, stack: Stack, name: str, section: str, fill: Fill, sentence: str) -> None:
    runs_before = len(stack.runs(DAG))
    dialog = open_trigger_form(page, stack)
    dialog.get_by_role("button", name=section, exact=True).click()
    fill(page, dialog)
    dialog.get_by_role("button", name="Trigger").click()
    alert = dialog.get_by_test_id("error-alert")
    alert.wait_for(timeout=30_000)
    alert.scroll_into_view_if_needed()  # the box is at the top of the dialog, Trigger at its bottom
    shot(page, f"refused-{name}", full_page=False)
    expected = sentence.format(home=stack.env["CELERITAS_HOME"])
    assert alert.inner_text().split("\n") == ["400 Bad Request", "", expected]
    assert alert.is_visible() and dialog.is_visible()  # the dialog stays open with what was typed
    page.get_by_text("Failed to Trigger Dag").first.wait_for(timeout=10_000)  # and the notification
    assert len(stack.runs(DAG)) == runs_before


def test_a_knob_that_is_not_json_is_refused_at_its_field_and_trigger_is_disabled(page: Any,
                                                                                   stack: Stack) -> None:
    """NaN is not JSON: the form itself refuses it, under the field, before any request."""
    runs_before = len(stack.runs(DAG))
    dialog = open_trigger_form(page, stack)
    dialog.get_by_role("button", name="Model", exact=True).click()
    _knobs('{"layers": NaN}')(page, dialog)
    error = dialog.get_by_text("is not valid JSON")
    error.wait_for(timeout=10_000)
    shot(page, "refused-nan-knob", full_page=False)
    assert "Unexpected token 'N'" in error.inner_text()
    assert dialog.get_by_role("button", name="Trigger").is_disabled()
    assert dialog.get_by_test_id("error-alert").count() == 0 and len(stack.runs(DAG)) == runs_before


def test_the_form_starts_from_the_demos_configuration_and_switches_carry_no_asterisk(page: Any,
                                                                                   stack: Stack) -> None:
    from tasks.params import DEMO_KNOBS
    from tests.demo import demo_params

    demo = demo_params()
    dialog = open_trigger_form(page, stack)
    dialog.get_by_role("button", name="Model", exact=True).click()
    assert dialog.locator("#element_model").input_value() == demo["model"]
    assert dialog.locator('[id="number-input:element_batch_size"] input').input_value() == \
        str(demo["batch_size"])
    editor = dialog.locator("#element_model_knobs .view-lines")
    editor.filter(has_text="image_size").wait_for(timeout=10_000)  # drawn after the section opens
    # the editor draws its lines in any order, spaces as U+00A0: compare each "knob":value alone
    knobs = "".join((editor.text_content() or "").split())
    assert demo["model_knobs"] == DEMO_KNOBS
    assert all(f'"{knob}":{value}' in knobs for knob, value in DEMO_KNOBS.items()), knobs
    _required(dialog, {"Model": True, "Batch size": True, "Paper configuration": False})
    shot(page, "trigger-form-defaults-model", full_page=False)
    dialog.get_by_role("button", name="Cluster", exact=True).click()
    assert dialog.locator('[id="number-input:element_num_devices"] input').input_value() == \
        str(demo["num_devices"])
    assert dialog.locator("#element_device_memory").input_value() == demo["device_memory"]
    _required(dialog, {"Memory per device": True, "Calibrate transfers": False})
    shot(page, "trigger-form-defaults-cluster", full_page=False)


def _required(dialog: Any, fields: dict[str, bool]) -> None:
    """Each field label carries the form's "required" asterisk exactly when ``fields`` says so."""
    for title, required in fields.items():
        label = dialog.locator("label", has_text=title).first
        label.wait_for(timeout=10_000)
        assert ("*" in label.inner_text()) == required, (title, label.inner_text())

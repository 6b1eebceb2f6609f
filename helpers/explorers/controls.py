"""What every explorer's button does: run the work with the button disabled, and show a failure in the widget."""
from __future__ import annotations

import html


def on_press(button, status, output, work, *, busy: str, error_html=None):
    """Wire ``button`` to ``work() -> (html, status text)``, shown in ``output`` and ``status``; the button is disabled
    while it runs. An exception is shown in ``output`` (``error_html(message)`` or a red line): a callback's
    exception would otherwise vanish into the kernel's log. Returns the callback (call it to run once now)."""
    def press(_=None):
        button.disabled, status.value = True, busy
        try:
            output.value, status.value = work()
        except Exception as error:  # noqa: BLE001 - any failure is the user's to see
            message = html.escape(f"{type(error).__name__}: {error}")
            output.value = error_html(message) if error_html else f"<b style='color:#a00'>{message}</b>"
            status.value = "failed"
        finally:
            button.disabled = False

    button.on_click(press)
    return press

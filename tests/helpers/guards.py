"""Guards a test puts where something must not happen: they fail with the test's message whatever they are
called with (a stub taking the wrong arguments would fail with a TypeError instead, hiding the message)."""

import pytest


def refuse(message: str):
    def fail(*args, **kwargs):
        pytest.fail(message)

    return fail

"""speckit's errors are also the built-in exceptions they mean, so callers catch them plainly."""

from __future__ import annotations

import pytest

from speckit import errors


@pytest.mark.parametrize("cls, builtin", [
    (errors.UsageError, ValueError), (errors.FormatError, ValueError),
    (errors.PlanError, ValueError), (errors.HubError, OSError),
    (errors.IntegrityError, OSError), (errors.EngineError, RuntimeError),
])
def test_each_error_is_its_builtin_and_keeps_message_hint_and_exit_code(cls, builtin):
    with pytest.raises(builtin) as got:
        raise cls("config.json: hidden_size is 'abc'", hint="write an integer")
    err = got.value
    assert isinstance(err, errors.SpeckitError)
    assert err.message == "config.json: hidden_size is 'abc'"
    assert err.hint == "write an integer"
    assert str(err) == "config.json: hidden_size is 'abc'\nhint: write an integer"
    assert err.exit_code == cls.exit_code > 1

"""Resumable training checkpoints: a checkpoint whose tensors do not match the head is refused
with the names, never loaded with some tensors silently dropped or left untouched."""

from __future__ import annotations

import pytest
import torch

from speckit.errors import FormatError
from speckit.train.state import load_checkpoint, save_checkpoint


class _Tiny(torch.nn.Module):
    """A stand-in head: trainable tensors, and a frozen one checkpoints leave out."""

    def __init__(self, extra: bool = False):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
        if extra:
            self.more = torch.nn.Parameter(torch.zeros(2))


def _opt(head):
    return torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=1e-3)


def _saved(tmp_path, head) -> None:
    save_checkpoint(tmp_path, head, _opt(head), step=1, epoch=0, batch=0, history=[], keep=2,
                    fsdp=False)


def test_checkpoint_round_trip_restores_the_trainable_tensors(tmp_path):
    head = _Tiny()
    _saved(tmp_path, head)
    other = _Tiny()
    state = load_checkpoint(tmp_path, other, _opt(other), fsdp=False)
    assert state is not None and state["step"] == 1
    assert torch.equal(other.fc.weight, head.fc.weight)


@pytest.mark.parametrize("saved_extra", [True, False])
def test_checkpoint_with_missing_or_unexpected_tensors_is_refused(tmp_path, saved_extra):
    _saved(tmp_path, _Tiny(extra=saved_extra))
    other = _Tiny(extra=not saved_extra)
    with pytest.raises(FormatError, match="does not match this head") as e:
        load_checkpoint(tmp_path, other, _opt(other), fsdp=False)
    which = "unexpected ['more']" if saved_extra else "missing ['more']"
    assert which in e.value.message

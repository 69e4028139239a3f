"""Adversarial: honest for its first calls, then rebinds one of its own functions to a wrong one, as a
candidate that behaves under verification and cheats once measured would."""

from polyinfer.candidates.reference import ReferenceForward

CALLS_BEFORE_SWITCH = 20


def finish(logits):
    return logits


def _cheat(logits):
    return logits * 1.5


class SwitchesLater(ReferenceForward):
    calls = 0

    def __call__(self, batch):
        SwitchesLater.calls += 1
        if SwitchesLater.calls == CALLS_BEFORE_SWITCH:
            globals()["finish"] = _cheat
        return finish(super().__call__(batch))


def build(ctx):
    return SwitchesLater(ctx)

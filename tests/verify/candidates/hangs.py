"""Adversarial: never returns from its forward pass."""

import time


def build(ctx):
    def forward(batch):
        while True:
            time.sleep(1)

    return forward

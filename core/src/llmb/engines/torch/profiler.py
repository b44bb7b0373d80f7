"""The profiling window of a torch-engine run, as a context manager around each step.

``ProfileWindow(spec.profile, ...)`` reads the window ``llmb.runs.profiling``
planned (``kind``, ``start``, ``stop``, ``dir``); ``with window.step(n):``
around step ``n`` opens the capture before the window's first step and
closes it after its last: nsys's capture (``cudaProfilerStart``/``Stop``:
nsys runs the rank with ``--capture-range=cudaProfilerApi``), or a
torch.profiler trace, written to ``rank<N>_trace.json`` in the window's
directory. A step that raises leaves the capture as it is (the rank ends).
Without a window (``profile`` None) it does nothing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator


class ProfileWindow:
    """The capture of steps ``profile["start"]`` to ``profile["stop"]`` (``profile``: the run spec's)."""

    def __init__(self, profile: dict | None, rank: int, cuda: bool, say: Callable[..., None]):
        self.profile, self.rank, self.cuda, self.say = profile or {}, rank, cuda, say
        self.first, self.last = self.profile.get("start"), self.profile.get("stop")
        self.trace = None  # the open torch.profiler.profile

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Around step ``step``: the capture opens before the first step and closes after the last."""
        if self.profile and step == self.first:
            self._open()
        yield
        if self.profile and step == self.last:
            self._close()

    def _open(self) -> None:
        import torch

        if self.profile["kind"] == "nsys":
            torch.cuda.profiler.start()
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.trace = torch.profiler.profile(activities=activities)
        self.trace.__enter__()

    def _close(self) -> None:
        import torch

        if self.profile["kind"] == "nsys":
            torch.cuda.profiler.stop()
            return
        if self.trace is None:
            return
        self.trace.__exit__(None, None, None)
        os.makedirs(self.profile["dir"], exist_ok=True)
        path = os.path.join(self.profile["dir"], f"rank{self.rank}_trace.json")
        trace, self.trace = self.trace, None
        trace.export_chrome_trace(path)
        self.say(f"[llmb] torch.profiler trace of steps {self.first}-{self.last}: {path}")

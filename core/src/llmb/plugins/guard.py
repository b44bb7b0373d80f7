"""Every call into a plugin's hook implementations goes through one guard, put around each of them
when the plugin host registers the plugin (``guard_plugin``), whichever way the hook is then called
(``pm.hook``, a subset caller, the host's own loops):

- an exception the plugin's code raises on purpose as llmb's (``LlmbError``: a ``UsageError`` of a
  recipe it cannot resolve) keeps its meaning;
- any other exception keeps its type and message (a rank's log shows it as raised) and is marked
  with the plugin and the hook (``blame``): the CLI says "the plugin X failed in its hook Y" in one
  line and exits 2 (``llmb.cli.main``; the traceback with ``LLMB_DEBUG=1``);
- what would end the command from inside a plugin, ``KeyboardInterrupt``, ``SystemExit`` or
  ``GeneratorExit`` raised by its own code, becomes ``PluginHookFailure``, told as the others are;
- only a real Ctrl-C (a SIGINT delivered to this process while the plugin ran, ``CtrlC``) is an
  interrupt, even where the plugin caught what the signal raised.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from functools import wraps
from typing import Any

from llmb.errors import LlmbError

_BLAME = "__llmb_hook_blame__"


@dataclass(frozen=True)
class Blame:
    """Which plugin's hook implementation raised: ``plugin`` as users are shown it
    (``llmb-plugin-foo 0.3.0``, a module named in LLMB_PLUGINS), ``hook`` its name."""

    plugin: str
    hook: str


class PluginHookFailure(Exception):
    """A plugin's hook implementation raised what would end the command (``KeyboardInterrupt``,
    ``SystemExit``, ``GeneratorExit``) without a Ctrl-C; ``__cause__`` is what it raised."""

    def __init__(self, blame: Blame, raised: BaseException):
        super().__init__(describe(raised))
        setattr(self, _BLAME, blame)


def describe(exc: BaseException) -> str:
    """``Type: message``, or the type alone; ``SystemExit(3)``; a ``KeyboardInterrupt`` said to be the
    plugin's own (a real Ctrl-C never gets here)."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r})"
    text = str(exc)
    shown = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if isinstance(exc, KeyboardInterrupt):
        shown += " (raised by its own code: no Ctrl-C was pressed)"
    return shown


def blame(exc: BaseException) -> Blame | None:
    """The plugin and hook ``exc`` came from, where it came from a plugin's hook."""
    return getattr(exc, _BLAME, None)


def raised(exc: BaseException) -> BaseException:
    """What the plugin raised: the cause of a ``PluginHookFailure``, else ``exc``."""
    if isinstance(exc, PluginHookFailure) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def failure_message(exc: BaseException) -> str | None:
    """The CLI's one line for an exception from a plugin's hook; None for any other."""
    found = blame(exc)
    if found is None:
        return None
    return (
        f"the plugin {found.plugin} failed in its hook {found.hook}: {describe(raised(exc))}. "
        f"This is a bug in that plugin, not in the command: report it to its authors, or uninstall "
        f"it ('llmb plugins' says where it comes from); LLMB_DEBUG=1 shows the traceback"
    )


class CtrlC:
    """Tells a real Ctrl-C from a ``KeyboardInterrupt`` (or ``SystemExit``, ...) that a plugin's code
    raises itself: while plugin code runs, SIGINT's handler is wrapped by one that first records that
    the signal arrived. ``pressed`` is then True even where the plugin caught what the signal raised.
    Outside the main thread no signal reaches the code, so nothing it raises is a Ctrl-C; where SIGINT
    is ignored or not handled in Python (SIG_IGN, SIG_DFL), there is nothing to wrap."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous: Any = None
        self._handler: Any = None

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is not threading.main_thread():
            return self
        previous = signal.getsignal(signal.SIGINT)
        if not callable(previous):
            return self

        def handler(signum, frame):
            self.pressed = True
            return previous(signum, frame)  # the default one raises KeyboardInterrupt

        try:
            signal.signal(signal.SIGINT, handler)
        except (ValueError, OSError):  # no signals here (an embedding interpreter)
            return self
        self._previous, self._handler = previous, handler
        return self

    def __exit__(self, *exc: object) -> None:
        # a plugin that installed its own handler meanwhile keeps it
        if self._handler is not None and signal.getsignal(signal.SIGINT) is self._handler:
            signal.signal(signal.SIGINT, self._previous)

    def check(self) -> None:
        """Raise KeyboardInterrupt where a real Ctrl-C arrived (a plugin may have swallowed it)."""
        if self.pressed:
            raise KeyboardInterrupt


def _judged(exc: BaseException, who: Blame, ctrl_c: CtrlC) -> BaseException:
    """What a guarded call raises for ``exc``, which the plugin's code raised."""
    if ctrl_c.pressed:  # a real Ctrl-C, whatever the plugin made of it
        return exc if isinstance(exc, KeyboardInterrupt) else KeyboardInterrupt()
    if isinstance(exc, LlmbError) or blame(exc) is not None:
        return exc  # llmb's own error, or one already told (a nested hook call's)
    if isinstance(exc, Exception):
        try:
            setattr(exc, _BLAME, who)
            return exc
        except (AttributeError, TypeError):  # an exception type that takes no attributes
            pass
    failure = PluginHookFailure(who, exc)
    failure.__cause__ = exc
    return failure


def _guarded_call(function, who: Blame):
    @wraps(function)
    def guarded(*args, **kwargs):
        with CtrlC() as ctrl_c:
            try:
                result = function(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - judged: only a real Ctrl-C interrupts
                judged = _judged(exc, who, ctrl_c)
                if judged is exc:
                    raise
                raise judged from exc
        ctrl_c.check()
        return result

    return guarded


def _guarded_wrapper(function, who: Blame):
    """A hook wrapper (``wrapper=True`` or ``hookwrapper=True``): a generator, guarded at each of
    its steps; what pluggy sends and throws into it passes through to the plugin's generator, and an
    exception thrown in that the plugin lets through is not the plugin's."""

    @wraps(function)
    def guarded(*args, **kwargs):
        inner = _guarded_call(function, who)(*args, **kwargs)
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            stopped: StopIteration | None = None
            with CtrlC() as ctrl_c:
                try:
                    value = inner.throw(thrown) if thrown is not None else inner.send(sent)
                except StopIteration as stop:
                    stopped = stop
                except BaseException as exc:  # noqa: BLE001 - as _guarded_call
                    if exc is thrown:
                        raise
                    judged = _judged(exc, who, ctrl_c)
                    if judged is exc:
                        raise
                    raise judged from exc
            ctrl_c.check()
            if stopped is not None:
                return stopped.value
            thrown = None
            try:
                sent = yield value
            except GeneratorExit:
                inner.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - pluggy's way to give the wrapper an error
                thrown = exc

    return guarded


def guard_plugin(pm, plugin: object, shown_as: str) -> None:
    """Put the guard around each hook implementation of ``plugin``, registered in ``pm``; the plugin
    is ``shown_as`` in what is said of its failures."""
    for caller in pm.get_hookcallers(plugin) or ():
        for impl in caller.get_hookimpls():
            if impl.plugin is not plugin or getattr(impl.function, _BLAME, None) is not None:
                continue
            who = Blame(shown_as, caller.name)
            wrap = _guarded_wrapper if impl.wrapper or impl.hookwrapper else _guarded_call
            guarded = wrap(impl.function, who)
            setattr(guarded, _BLAME, who)
            # pluggy reads the implementation's argument names when it registers it (done), and calls
            # ``function`` with them: the guarded function takes what it is given and passes it on
            impl.function = guarded  # type: ignore[misc] - HookImpl.function is Final only to type checkers

"""Armed kills for crash tests: after the next N answered calls that match, one signal to one process, answer first."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from aiohttp import web

log = logging.getLogger(__name__)

# How long an answer may sit in our socket buffer before we signal anyway (a client that stopped reading).
FLUSH_TIMEOUT_S = 5.0
_FLUSH_POLL_S = 0.001

S_contra = TypeVar("S_contra", contravariant=True)
S = TypeVar("S")


class Match(Protocol[S_contra]):
    """Which calls an armed kill counts; `as_json` is how the admin API shows it."""

    def matches(self, subject: S_contra) -> bool: ...

    def as_json(self) -> dict[str, Any]: ...


def parse_signal(value: str | int) -> signal.Signals:
    """A signal by name (`SIGKILL`, `KILL`, `kill`) or number (9)."""
    try:
        if isinstance(value, int) and not isinstance(value, bool):
            return signal.Signals(value)
        if isinstance(value, str):
            name = value.upper()
            return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
    except (KeyError, ValueError):
        pass
    raise ValueError(f"not a signal: {value!r}")


class Target:
    """One process, held by a pidfd from arming on: if it exits and its pid is reused, the signal reaches nobody,
    never the stranger. pidfd_send_signal reaches that one process, never a group."""

    def __init__(self, pid: int) -> None:
        # 0 and negative pids name process groups to kill(2), 1 is init, and our own death ends every armed kill.
        if isinstance(pid, bool) or pid <= 1 or pid == os.getpid():
            raise ValueError(f"pid {pid} cannot be a target: it must be another process, not a group, not init")
        self.pid = pid
        try:
            self._pidfd: int | None = os.pidfd_open(pid)  # Linux 5.3 or later
        except ProcessLookupError:
            raise ValueError(f"no process {pid}") from None
        except OSError as error:
            raise ValueError(f"cannot hold process {pid}: {error}") from error

    def send(self, signum: signal.Signals) -> str:
        """Signals the process once: 'signalled', 'gone' if it exited since it was armed, or why it failed."""
        if self._pidfd is None:
            return "gone"
        try:
            signal.pidfd_send_signal(self._pidfd, signum)
        except ProcessLookupError:
            return "gone"
        except OSError as error:  # not ours to signal: reported, and the server carries on
            return f"failed: {error}"
        finally:
            self.close()
        return "signalled"

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


@dataclass(eq=False)  # each armed kill is itself, whatever its fields
class Armed(Generic[S]):
    id: str
    match: Match[S]
    target: Target
    signum: signal.Signals
    remaining: int  # matching answers still to let through; the kill fires after the one that makes this 0
    ok_only: bool  # count only answers that succeeded (the call took effect)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "when": self.match.as_json(),
            "pid": self.target.pid,
            "signal": self.signum.name,
            "remaining": self.remaining,
            "ok_only": self.ok_only,
        }


class KillSwitch(Generic[S]):
    """The armed kills of one server, and a log of those that fired."""

    def __init__(self) -> None:
        self._armed: list[Armed[S]] = []
        self._fired: list[dict[str, Any]] = []
        self._next_id = 1
        # Deliveries run shielded from the handler's cancellation; held here so none is garbage collected.
        self._deliveries: set[asyncio.Task[None]] = set()

    def arm(
        self,
        match: Match[S],
        pid: int,
        *,
        after: int = 1,
        signum: signal.Signals = signal.SIGKILL,
        ok_only: bool = True,
    ) -> Armed[S]:
        """After the `after`-th answered call from now on that `match`es, `signum` to `pid`; else ValueError."""
        if isinstance(after, bool) or after < 1:
            raise ValueError(f"'after' counts answered calls and must be at least 1, not {after!r}")
        armed = Armed(f"k{self._next_id}", match, Target(pid), signum, after, ok_only)
        self._next_id += 1
        self._armed.append(armed)
        log.info("armed %s", armed.as_json())
        return armed

    def armed(self) -> list[dict[str, Any]]:
        return [one.as_json() for one in self._armed]

    def fired(self) -> list[dict[str, Any]]:
        return list(self._fired)

    def listing(self) -> dict[str, Any]:
        return {"armed": self.armed(), "fired": self.fired()}

    def clear(self) -> None:
        """Disarms every kill and forgets those that fired."""
        for one in self._armed:
            one.target.close()
        self._armed.clear()
        self._fired.clear()

    def take(self, subject: S, *, ok: bool) -> list[Armed[S]]:
        """Counts one answered call; the kills now due leave the armed list (synchronously, so two concurrent
        answers can never both fire one kill)."""
        due: list[Armed[S]] = []
        for one in self._armed:
            if (ok or not one.ok_only) and one.match.matches(subject):
                one.remaining -= 1
                if one.remaining <= 0:
                    due.append(one)
        self._armed = [one for one in self._armed if one not in due]
        return due

    def fire(self, due: Sequence[Armed[S]], call: Mapping[str, Any], *, answer_sent: bool) -> None:
        for one in due:
            result = one.target.send(one.signum)
            record = {k: v for k, v in one.as_json().items() if k != "remaining"}
            record |= {"call": dict(call), "answer_sent": answer_sent, "result": result, "at_s": time.time()}
            self._fired.append(record)
            log.warning("kill %s: %s to pid %d after %s: %s", one.id, one.signum.name, one.target.pid, call, result)

    async def deliver_then_fire(
        self, request: web.BaseRequest, response: web.StreamResponse, due: Sequence[Armed[S]], call: Mapping[str, Any]
    ) -> None:
        """Finishes the answer (prepared or not), waits until it has left our socket buffer, then fires `due`.

        Shielded: a client that hangs up after reading must not cancel the kill its answer armed; a client
        that hung up before it could read still gets its kill, reported with answer_sent false.
        """

        async def deliver() -> None:
            sent = False
            try:
                await response.prepare(request)
                await response.write_eof()
                sent = await _flushed(request, FLUSH_TIMEOUT_S)
            except (ConnectionError, RuntimeError) as error:
                log.info("answer to %s not delivered: %s", call, error)
            finally:
                self.fire(due, call, answer_sent=sent)

        task = asyncio.ensure_future(deliver())
        self._deliveries.add(task)
        task.add_done_callback(self._deliveries.discard)
        await asyncio.shield(task)


async def _flushed(request: web.BaseRequest, timeout_s: float) -> bool:
    """True once the transport holds nothing more to send: every byte of the answer is in the kernel's hands."""
    deadline_s = time.monotonic() + timeout_s
    transport = request.transport
    while transport is not None and not transport.is_closing() and transport.get_write_buffer_size() > 0:
        if time.monotonic() >= deadline_s:
            return False
        await asyncio.sleep(_FLUSH_POLL_S)
    return transport is not None and not transport.is_closing()


# --- the admin API, for any server with a KillSwitch -----------------------------------------------


def kill_routes(
    path: str, switch: KillSwitch[S], parse_match: Callable[[Mapping[str, Any]], Match[S]]
) -> list[web.RouteDef]:
    """
    GET    PATH   {"armed": [...], "fired": [...]}: each armed kill with its id, "when", "pid", "signal",
                  "remaining", "ok_only"; each fired one with the "call" that fired it, "answer_sent",
                  "result" ("signalled" or "gone") and "at_s" (Unix time)
    POST   PATH   {"pid", "after" (1), "signal" ("SIGKILL"; a name or number), "ok_only" (true), and what
                  parse_match reads}: arms a kill; answers {"id"} and the listing; 400 for a bad body or pid
    DELETE PATH   disarms every kill and forgets those that fired
    """

    async def get_kills(_: web.Request) -> web.Response:
        return web.json_response(switch.listing())

    async def post_kill(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            armed = switch.arm(parse_match(body), **kill_terms(body))
        except ValueError as error:  # a JSON decode error is one too
            raise web.HTTPBadRequest(text=str(error)) from error
        return web.json_response({"id": armed.id, **switch.listing()})

    async def delete_kills(_: web.Request) -> web.Response:
        switch.clear()
        return web.json_response(switch.listing())

    return [web.get(path, get_kills), web.post(path, post_kill), web.delete(path, delete_kills)]


def kill_terms(body: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of KillSwitch.arm from an admin body; ValueError names what is wrong."""
    pid = body.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        raise ValueError(f"'pid' must be a process id, not {pid!r}")
    after = body.get("after", 1)
    if not isinstance(after, int) or isinstance(after, bool):
        raise ValueError(f"'after' must be a whole number, not {after!r}")
    ok_only = body.get("ok_only", True)
    if not isinstance(ok_only, bool):
        raise ValueError(f"'ok_only' must be true or false, not {ok_only!r}")
    return {"pid": pid, "after": after, "signum": parse_signal(body.get("signal", "SIGKILL")), "ok_only": ok_only}


def text_field(body: Mapping[str, Any], name: str, *, default: str | None = None) -> str:
    value = body.get(name, default)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name!r} must be a non-empty string, not {value!r}")
    return value

"""The programs of one SPMD launch, run as simulated cores that can communicate.

Every program of a launch grid runs in a thread of its own with its own RunContext (program 0 in
the calling thread). A baton lets exactly one program execute at a time: a program hands it on
only when it finishes or waits for its peers at a cross-core instruction (a collective,
``sendrecv``, ``core_barrier``), to the next program in row-major order that can run. Kernels
that do not communicate therefore run one program after another exactly as before, and kernels
that do are deterministic too. A program waiting for peers that have all finished or wait
themselves is a deadlock (rule ``cross-core-deadlock``, raised at its kernel line); when a
program fails, the programs waiting for it are aborted and the launch raises that program's
error, so nothing ever waits forever. The one wait outside the launch is for the programs of other
processes (`Launch.outside`, collectives across a torch.distributed job): it hands the baton on
meanwhile and is bounded by the job's store timeout.
"""
from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from ..errors import NKIError

_NEW, _READY, _WAITING, _DONE, _OUTSIDE = range(5)  # _OUTSIDE: waits for other processes


class _Aborted(BaseException):
    """A peer program failed: unwind this one (not an error of its own)."""


@dataclass
class _Rendezvous:
    members: tuple[int, ...]
    what: str
    arrivals: dict[int, Any] = field(default_factory=dict)
    result: Any = None


class Launch:
    """The programs of one launch: the baton, the rendezvous of cross-core instructions and the
    `nl.shared_hbm` tensors (the n-th allocation of every program is the same tensor)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.shared_hbm: list[Any] = []
        self._cond = threading.Condition()
        self._state = [_NEW] * count
        self._turn: int | None = None
        self._failed: BaseException | None = None
        self._deadlocked: set[int] = set()
        self._waiting_in: dict[int, str] = {}
        self._rendezvous: dict[Hashable, _Rendezvous] = {}
        self._results: list[Any] = [None] * count
        self._body: Callable[[int], Any] = lambda index: None
        self._context = contextvars.copy_context()

    def run(self, body: Callable[[int], Any]) -> list[Any]:
        """Run ``body(index)`` for every program; the return values, or the failing program's error."""
        self._body = body
        self._context = contextvars.copy_context()  # worker threads see the caller's context variables
        with self._cond:
            self._state[0], self._turn = _READY, 0
        self._program(0)
        try:
            with self._cond:
                while any(s != _DONE for s in self._state):
                    self._cond.wait(0.1)
        except BaseException as exc:  # e.g. KeyboardInterrupt: release the waiting programs
            with self._cond:
                self._fail(exc)
            raise
        if self._failed is not None:
            raise self._failed
        return self._results

    def exchange(self, index: int, key: Hashable, members: tuple[int, ...], payload: Any,
                 complete: Callable[[dict[int, Any]], Any], what: str) -> Any:
        """Meet the other `members` at the instruction `key`: the last program to arrive runs
        ``complete(payloads by program)`` for all of them; everyone gets its return value.
        `what` ("nki.collectives.all_reduce at file:line") names the wait in deadlock messages."""
        with self._cond:
            meeting = self._rendezvous.setdefault(key, _Rendezvous(members, what))
            meeting.arrivals[index] = payload
            if len(meeting.arrivals) < len(members):
                self._state[index] = _WAITING
                self._waiting_in[index] = what
                self._pass_turn(index)
                while self._turn != index:
                    self._cond.wait()
                del self._waiting_in[index]
                if self._failed is not None:
                    raise _Aborted()
                if index in self._deadlocked:
                    raise NKIError("cross-core-deadlock", self._deadlock_message(index, meeting))
                return meeting.result
            del self._rendezvous[key]
        # Without the lock, as `complete` may wait `outside`; this program holds the baton, so no
        # other program runs meanwhile.
        result = complete(meeting.arrivals)
        with self._cond:
            meeting.result = result
            for j in members:
                if self._state[j] == _WAITING:
                    self._state[j] = _READY
        return result

    def outside(self, index: int, wait: Callable[[Callable[[], bool]], Any], what: str) -> Any:
        """Run ``wait(failed)``, a wait for other processes, without the baton: the other programs
        run meanwhile (they may be what the other processes wait for). Returns its value once this
        program has the baton again; `wait` should stop early when ``failed()`` (a program of the
        launch failed: this one is then aborted)."""
        with self._cond:
            self._state[index] = _OUTSIDE
            self._waiting_in[index] = what
            self._pass_turn(index)
        try:
            return wait(lambda: self._failed is not None)
        finally:
            with self._cond:
                del self._waiting_in[index]
                self._state[index] = _READY
                if self._turn is None:
                    self._turn = index
                while self._turn != index:
                    self._cond.wait()
                if self._failed is not None:
                    raise _Aborted()

    def _program(self, index: int) -> None:
        with self._cond:
            while self._turn != index:
                self._cond.wait()
        error: BaseException | None = None
        try:
            self._results[index] = self._body(index)
        except _Aborted:
            pass
        except BaseException as exc:
            error = exc
        with self._cond:
            self._state[index] = _DONE
            if error is not None:
                self._fail(error)
            self._pass_turn(index)

    def _fail(self, error: BaseException) -> None:
        """Record the first failure; programs not started never run, waiting ones abort."""
        if self._failed is None:
            self._failed = error
        for j, state in enumerate(self._state):
            if state == _NEW:
                self._state[j] = _DONE
            elif state == _WAITING:
                self._state[j] = _READY
        self._cond.notify_all()

    def _pass_turn(self, index: int) -> None:
        """Give the baton to the next program after `index` that can run (starting it if new);
        if none can but some wait, the first of them is deadlocked."""
        for step in range(1, self.count + 1):
            j = (index + step) % self.count
            if self._state[j] in (_NEW, _READY):
                if self._state[j] == _NEW:
                    self._state[j] = _READY
                    context = self._context.copy()
                    threading.Thread(target=context.run, args=(self._program, j), daemon=True,
                                     name=f"nki-program-{j}").start()
                self._turn = j
                break
        else:
            waiting = [j for j, s in enumerate(self._state) if s == _WAITING]
            # A program waiting outside takes the baton when it returns: no deadlock yet.
            deadlocked = waiting and _OUTSIDE not in self._state
            self._turn = waiting[0] if deadlocked else None
            if deadlocked:
                self._deadlocked.add(waiting[0])
                self._state[waiting[0]] = _READY
        self._cond.notify_all()

    def _deadlock_message(self, index: int, meeting: _Rendezvous) -> str:
        absent = [j for j in meeting.members if j not in meeting.arrivals]
        where = "; ".join(f"program {j} " + (f"waits in {self._waiting_in[j]}" if j in self._waiting_in
                                              else "finished without joining") for j in absent)
        return (f"{meeting.what}: program {index} waits for programs {list(meeting.members)} to join, "
                f"but {where}. Every program of the group must issue the same cross-core instructions "
                f"in the same order")

"""Which queued job a device lane claims next: grouped by problem, fair to other problems and keys.

A problem's judge (its reference outputs and timing) is the expensive thing to set up on a device,
so a lane serves a problem's jobs together while its judge is loaded, instead of interleaving
problems in submission order (8 interleaved problems cycled a 4-judge cache into a miss per job).
The rules, among the queued jobs of the highest priority (a lower priority never goes first; it is
looked at only when every higher one is another lane's to serve, rule 2):

1. **Keep serving an open problem.** A problem this lane opened keeps its turn while it has queued
   jobs: it is claimed again while it has fewer than `per_problem` jobs in flight on the lane and its
   streak (its claims in this turn) is under `burst`; among several, the one opened first, so that a
   problem's jobs are all claimed before a later problem's (a straggler claimed after several later
   problems would find its judge evicted). The device threads still spread concurrent slots over
   different problems among the prepared jobs (pipeline.py `_next_ready`).
2. **Otherwise open a problem, fairly.** The key served least recently by this lane goes first
   (a key with one job is not starved by a key with thousands); among that key's problems, one
   that no other lane of the process holds (jobs in flight, its turn open) or has warm (`elsewhere`), even one
   with its share of this lane's slots in flight already, then one whose judge is already warm on this lane,
   then the one with the oldest job; a problem whose
   streak ran out is not opened while another can be. Opening a problem gives every problem whose
   streak ran out a new turn. A second judge of one problem on another GPU costs 10-40 s of host
   and device time (on 2 GPUs, 16 problems started 35 judges when both lanes opened the oldest),
   so lanes open different problems. A problem held elsewhere is opened only when its judge is warm
   on this lane too, or for a backlog (at least `per_problem` of its jobs queued): for fewer, the lane
   holding it finishes them sooner than a new judge starts, and this lane claims nothing (it looks
   again within a second). On two H100s, lanes that opened any problem held elsewhere once their own
   were all in flight started 23 judges for 16 problems, most of them for a problem's last 1-3 jobs.
3. **Within a problem,** the key served least recently, then its oldest job.

When only one problem waits, it is claimed whatever its streak or in-flight count (unless another
lane holds it and its backlog is short, as above): the limits only decide between problems that
compete. Fairness bound: a job of another problem waits at most `burst` claims of this lane (plus
the jobs already in flight) behind a problem with many jobs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from worker.config.pipeline_section import DEFAULT_BURST
from worker.jobs.store.queue import ClaimChoice, QueueGroup


@dataclass
class ClaimPolicy:
    """One lane's claim order (its state: streaks per problem, when each key was last served)."""

    per_problem: int = 4  # jobs of one problem in flight on the lane while others wait
    burst: int = DEFAULT_BURST  # claims in a row of one problem while others wait
    _streak: dict[str, int] = field(default_factory=dict)
    _key_served: dict[str, int] = field(default_factory=dict)
    _opened_at: dict[str, int] = field(default_factory=dict)  # the claim count when its turn began
    _claims: int = 0

    def choose(self, groups: list[QueueGroup], in_flight: Mapping[str, int],
               warm: Collection[str] = (), elsewhere: Collection[str] = ()) -> ClaimChoice | None:
        """`in_flight`: this lane's claimed, unfinished jobs per problem; `warm`: problems with a judge on
        this lane; `elsewhere`: problems the process's other lanes hold or have warm. A lower priority is looked
        at only when this lane may open nothing of the higher ones (their problems are another lane's, rule 2):
        it then takes nothing that lane would have."""
        if not groups:
            return None
        levels = sorted({g.priority for g in groups}, reverse=True)
        top = [g for g in groups if g.priority == levels[0]]
        queued = {g.problem_id for g in top}
        for problem in [p for p in self._streak if p not in queued]:
            del self._streak[problem]  # no job of it waits: its turn is over
            self._opened_at.pop(problem, None)
        for level in levels:
            choice = self._choose_among([g for g in groups if g.priority == level], in_flight, warm, elsewhere)
            if choice is not None:
                return choice
        return None

    def _choose_among(self, groups: list[QueueGroup], in_flight: Mapping[str, int], warm: Collection[str],
                      elsewhere: Collection[str]) -> ClaimChoice | None:
        """Rules 1-3 among the groups of one priority; None when this lane may open none of them (rule 2)."""
        oldest: dict[str, float] = {}
        for g in groups:
            oldest[g.problem_id] = min(oldest.get(g.problem_id, g.oldest), g.oldest)
        if len(oldest) == 1:
            problem = next(iter(oldest))
            if not self._streak.get(problem) and not self._worth_opening(groups, warm, elsewhere):
                return None
        else:
            continued = self._continued(oldest, in_flight)
            if continued is not None:
                problem = continued
            else:
                groups = self._worth_opening(groups, warm, elsewhere)
                if not groups:
                    return None
                oldest = {g.problem_id: oldest[g.problem_id] for g in groups}
                problem = self._opened(groups, oldest, in_flight, warm, elsewhere)
        return ClaimChoice(groups[0].priority, self._key_within(problem, groups), problem)

    def _worth_opening(self, groups: list[QueueGroup], warm: Collection[str],
                       elsewhere: Collection[str]) -> list[QueueGroup]:
        """The groups whose problem this lane may open (rule 2): one not held by another lane, one whose judge
        is warm here too (opening it starts none), or one with a backlog of at least `per_problem` queued jobs."""
        queued: Counter[str] = Counter()
        for g in groups:
            queued[g.problem_id] += g.count
        return [g for g in groups if g.problem_id not in elsewhere or g.problem_id in warm
                or queued[g.problem_id] >= self.per_problem]

    def open_problems(self) -> set[str]:
        """The problems whose turn on this lane is open (claimed in this turn, jobs of them still queued)."""
        return set(self._streak)

    def claimed(self, choice: ClaimChoice) -> None:
        """Record a claim made with `choice`."""
        if not self._streak.get(choice.problem_id):
            self._opened_at[choice.problem_id] = self._claims
        self._streak[choice.problem_id] = self._streak.get(choice.problem_id, 0) + 1
        self._claims += 1
        self._key_served[choice.api_key_id] = self._claims

    def _continued(self, oldest: dict[str, float], in_flight: Mapping[str, int]) -> str | None:
        open_ = [p for p in oldest if 0 < self._streak.get(p, 0) < self.burst and in_flight.get(p, 0) < self.per_problem]
        return min(open_, key=lambda p: (self._opened_at.get(p, 0), oldest[p])) if open_ else None

    def _opened(self, groups: list[QueueGroup], oldest: dict[str, float], in_flight: Mapping[str, int],
                warm: Collection[str], elsewhere: Collection[str]) -> str:
        def turn_left(problem: str) -> bool:
            return in_flight.get(problem, 0) < self.per_problem and self._streak.get(problem, 0) < self.burst

        def second_judge(problem: str) -> bool:  # opening it starts a judge another GPU already has
            return problem in elsewhere and problem not in warm

        eligible = [g for g in groups if turn_left(g.problem_id)] or groups
        key = min({g.api_key_id for g in eligible},
                  key=lambda k: (self._key_served.get(k, 0), min(g.oldest for g in eligible if g.api_key_id == k)))
        # Within the key, a problem that costs no second judge goes first, even past its share of the lane's
        # slots: spreading the slots over problems another lane holds started 31 judges for 16 problems on two
        # H100s (per_problem is 2 there, so every problem was held after 32 claims and each lane then opened the
        # other's), each judge ~45 CPU s on a host whose run queues already waited 0.7 s per CPU s.
        problems = {g.problem_id for g in groups if g.api_key_id == key}
        problem = min(problems, key=lambda p: (second_judge(p), not turn_left(p), p in elsewhere, p not in warm,
                                               oldest[p]))
        # Every problem whose streak ran out gets a new turn once another problem has been opened.
        for other, streak in list(self._streak.items()):
            if other != problem and streak >= self.burst:
                del self._streak[other]
                self._opened_at.pop(other, None)
        return problem

    def _key_within(self, problem: str, groups: list[QueueGroup]) -> str:
        mine = [g for g in groups if g.problem_id == problem]
        return min(mine, key=lambda g: (self._key_served.get(g.api_key_id, 0), g.oldest)).api_key_id

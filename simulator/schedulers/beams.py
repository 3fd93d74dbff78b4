"""The beam step: which beams a group frees and which it forks, one allocator call.

The rule (``base.py``'s module docstring, "Progress of a group"; the paper's prototype,
``ancestry.py``): beam search keeps ``beam_width`` beams every step; the parent of
each of the ``beam_width`` candidates is drawn by the ancestry model; a parent chosen c
times continues as the first of them and forks c - 1 children, and parents never
chosen are freed first (a contiguous allocator forks into the regions they leave).

Speed. A step's beam groups draw their parents ahead, together
(``ancestry.UniformDraws``: the values of one ``rng.integers`` call each, from 32-bit
values the generator gives out in chunks), a drawn row's outcome is remembered (a
width-4 step has 256), and each group frees and forks in one allocator call
(``free_and_fork``) in which a child takes the id of a beam freed in the same step: a
paged allocator then keeps the beams in its running totals and leaves the copy of a
shared last block to the next bulk append (``allocators/lockstep.py``).

``BeamSteps`` is a layer of every scheduler, between ``DecodeRiders`` (``riders.py``)
and ``Scheduler`` (``base.py``); it holds what a beam step touches: the allocator, the
run's generator and the sequence-id counter.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from mypy_extensions import mypyc_attr

from pagesim._native import BoxedId
from pagesim.allocators.base import KVAllocator
from pagesim.simulator.request import SequenceGroup
from pagesim.simulator.schedulers.ancestry import BeamPlan, UniformDraws, beam_parents, beam_plan
from pagesim.simulator.schedulers.riders import DecodeRiders

#: beam steps with more possible parent draws than this (beams ** width; width 5 has
#: 3,125) are planned each time instead of remembered, so memory stays bounded
MAX_REMEMBERED_BEAM_PLANS: Final = 4096


@mypyc_attr(allow_interpreted_subclasses=True)  # plug-ins subclass its subclasses
class BeamSteps(DecodeRiders):
    """The beam step of a group (module docstring), its parents drawn ahead."""

    def __init__(
        self, allocator: KVAllocator, rng: np.random.Generator, beam_keep_prob: float
    ) -> None:
        super().__init__()
        self.allocator = allocator
        self.rng = rng
        self._beam_keep_prob = beam_keep_prob
        #: the uniform parents' draws (``beam_keep_prob`` = 0): ``rng.integers`` calls'
        #: values, the generator read ahead (``ancestry.UniformDraws``)
        self._uniform = UniformDraws(rng)
        #: the beam steps of the current ``_advance``, planned ahead, by group (keyed by
        #: the object: no id to box)
        self._beam_plan_by_group: dict[SequenceGroup, BeamPlan] = {}
        #: beam plans by (beams, width), then by parents drawn, the parents of slots
        #: 0, 1, ... as the digits of a number in base ``beams`` (``_beam_plans_of``)
        self._beam_plans: dict[tuple[int, int], dict[int, BeamPlan]] = {}
        self._next_seq_id = 0
        #: times memory was given back to the allocator (``free``, ``free_and_fork``,
        #: ``swap_out``): nothing else lets more of it be free
        self._num_frees = 0

    def _draw_beam_parents(self, work: list[tuple[int, int, SequenceGroup]]) -> None:
        """The uniform parents (``beam_keep_prob`` = 0) of every beam step ``work`` will
        take, drawn ahead: consecutive groups with the same number of beams and width
        share one draw (``UniformDraws.integers``). numpy draws such values one at a
        time, so they are those of one ``rng.integers(0, beams, size=width)`` call per
        group in batch order (``tests/simulator/test_beam_ancestry.py``); a group with
        one beam draws nothing (a range of one value consumes no random numbers)."""
        batch: list[SequenceGroup] = []
        batch_shape = (0, 0)
        for _, _, group in work:
            width = group.beam_width
            if width == 1 or group.is_riding or group.num_generated + 1 >= group.output_len:
                continue  # no beam step: not beam search, or the token ends the group
            num_beams = len(group.seq_ids)
            if num_beams == 1:
                continue
            if (num_beams, width) != batch_shape:
                if batch:
                    self._plan_beam_steps(batch, batch_shape[0], batch_shape[1])
                batch = []
                batch_shape = (num_beams, width)
            batch.append(group)
        if batch:
            self._plan_beam_steps(batch, batch_shape[0], batch_shape[1])

    def _plan_beam_steps(self, groups: list[SequenceGroup], num_beams: int, width: int) -> None:
        """Draw the parents of ``groups`` (each ``num_beams`` beams, ``width`` slots) in
        one call and keep each group's :func:`beam_plan` for its ``_beam_step``."""
        values = self._uniform.integers(num_beams, len(groups) * width)
        plan_by_group = self._beam_plan_by_group
        if num_beams**width > MAX_REMEMBERED_BEAM_PLANS:
            for i, group in enumerate(groups):
                parents = values[i * width : (i + 1) * width]
                plan_by_group[group] = beam_plan(num_beams, parents)
            return
        plans = self._beam_plans_of(num_beams, width)
        start = 0
        for group in groups:
            end = start + width
            key = 0
            for i in range(start, end):
                key = key * num_beams + values[i]
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = beam_plan(num_beams, values[start:end])
            plan_by_group[group] = plan
            start = end

    def _beam_plans_of(self, num_beams: int, width: int) -> dict[int, BeamPlan]:
        """The :func:`beam_plan` of each parents drawn so far for this many beams and
        slots (a width-4 step has 256 outcomes: plans are remembered, not recounted;
        wider steps, past ``MAX_REMEMBERED_BEAM_PLANS`` outcomes, are counted each time)."""
        plans = self._beam_plans.get((num_beams, width))
        if plans is None:
            plans = self._beam_plans[num_beams, width] = {}
        return plans

    def _beam_step(self, group: SequenceGroup) -> None:
        """The module docstring's beam rule: unchosen beams are freed, a parent chosen c
        times continues and forks c - 1 children (``KVAllocator.free_and_fork``), the ids
        kept as the objects the lists hold (boxed ids: docs/compiled_modules.md)."""
        beams: list[BoxedId] = group.seq_ids
        num_beams = len(beams)
        width = group.beam_width
        plan = self._beam_plan_by_group.get(group)
        if plan is not None:
            del self._beam_plan_by_group[group]
        else:  # not drawn ahead: keep_prob > 0, one beam, or the static scheduler
            if self._beam_keep_prob:  # draws its keeps even for one beam
                parents = beam_parents(self.rng, num_beams, width, self._beam_keep_prob).tolist()
            else:  # uniform (one beam: every slot continues it, and nothing is drawn)
                parents = self._uniform.integers(num_beams, width)
            plan = beam_plan(num_beams, parents)
        freed_positions, kept = plan
        if not freed_positions and num_beams == width:
            return  # every beam continues its own line: nothing is freed or forked
        freed: list[BoxedId] = [beams[i] for i in freed_positions]
        seq_ids: list[BoxedId] = []
        forks: list[tuple[BoxedId, BoxedId]] = []
        beam: BoxedId
        child: BoxedId
        next_seq_id = self._next_seq_id
        num_reused = 0
        for position, num_children in kept:
            beam = beams[position]
            seq_ids.append(beam)
            for _ in range(num_children):
                # a child takes the id of a freed beam while there is one (the i-th fork
                # the i-th freed id: ``KVAllocator.free_and_fork``), else a new one
                if num_reused < len(freed):
                    child = freed[num_reused]
                    num_reused += 1
                else:
                    child = next_seq_id
                    next_seq_id += 1
                forks.append((beam, child))
                seq_ids.append(child)
        self._next_seq_id = next_seq_id
        group.seq_ids = seq_ids
        # the beams not chosen are freed first: a contiguous allocator forks into their regions
        self.allocator.free_and_fork(freed, forks)
        self._num_frees += 1

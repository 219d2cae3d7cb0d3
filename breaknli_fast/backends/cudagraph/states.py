"""The generator's decode states held under a memory budget, least recently used evicted first.

A decode state (:class:`~breaknli_fast.backends.cudagraph.t5.DecodeState`) holds one bucket's static buffers, the
largest of them the self-attention cache ``[layers, rows, 2, heads, T, d_kv]``: one state of 64 prompts x K = 20
with a 48-position cache is 4.5 GB of flan-t5-base at fp32 and 12 GB of flan-t5-large (24 layers x 1,280 rows x
2 x 16 heads x 48 x 64 x 4 bytes). A state per bucket seen, never freed, fills a GPU after a few buckets.
:class:`StateCache` keeps them within ``budget`` bytes: a new state first evicts the least recently used ones
until it fits, and an evicted state's graphs are dropped with it (they were captured on its buffers' addresses;
the bucket's next call builds a new state and captures again). A state larger than the whole budget is built for
its call, kept while it is the only one held, and evicted by the next (counted as ``over_budget``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator

import torch


def tensor_bytes(obj: Any) -> int:
    """The bytes of every tensor attribute of ``obj`` (a dataclass of buffers)."""
    return sum(v.numel() * v.element_size() for v in vars(obj).values() if isinstance(v, torch.Tensor))


@dataclass
class StateStats:
    """What the cache did, for the engine's details."""

    budget_bytes: int
    held: int = 0
    held_bytes: int = 0
    built: int = 0
    evicted: int = 0
    over_budget: int = 0  # states larger than the whole budget (built for their call alone)
    peak_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"budget_mib": round(self.budget_bytes / 2**20, 1), "held": self.held,
                "held_mib": round(self.held_bytes / 2**20, 1), "built": self.built, "evicted": self.evicted,
                "over_budget": self.over_budget, "peak_mib": round(self.peak_bytes / 2**20, 1)}


@dataclass
class StateCache:
    """Decode states by key within ``budget`` bytes, least recently used first out (module notes). ``on_evict(key)``
    is called for each evicted state (the engine drops its graphs there)."""

    budget: int
    on_evict: Callable[[Hashable], None] = lambda key: None
    states: "OrderedDict[Hashable, Any]" = field(default_factory=OrderedDict)
    sizes: dict[Hashable, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if int(self.budget) < 1:
            raise ValueError(f"a state budget must be at least 1 byte, not {self.budget}")
        self.stats = StateStats(int(self.budget))

    def __contains__(self, key: Hashable) -> bool:
        return key in self.states

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.states)

    def get(self, key: Hashable, build: Callable[[], Any], nbytes: int) -> Any:
        """The state of ``key`` (marked most recently used), or one built by ``build()`` after evicting the least
        recently used states until its ``nbytes`` fit the budget."""
        if key in self.states:
            self.states.move_to_end(key)
            return self.states[key]
        while self.states and self.stats.held_bytes + nbytes > self.budget:
            self.evict(next(iter(self.states)))
        if nbytes > self.budget:
            self.stats.over_budget += 1
        state = build()
        self.states[key] = state
        self.sizes[key] = int(nbytes)
        self.stats.built += 1
        self._count()
        return state

    def evict(self, key: Hashable) -> None:
        self.states.pop(key)
        self.sizes.pop(key)
        self.stats.evicted += 1
        self._count()
        self.on_evict(key)

    def _count(self) -> None:
        self.stats.held = len(self.states)
        self.stats.held_bytes = sum(self.sizes.values())
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.stats.held_bytes)

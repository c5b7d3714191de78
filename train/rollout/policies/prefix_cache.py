"""Key/value states of token prefixes the local policy has already computed.

A radix tree over token ids: every node holds the per-layer keys and values of
its own run of tokens, so a prefix that many prompts share (system prompt,
few-shot turns, tool list) is stored once, and an episode's next turn finds its
previous turn (prompt plus sampled tokens) as a path from the root. Keys are
stored after the rotary embedding at their absolute positions, which is what a
prompt that starts with the same ids would compute at the same positions.

Memory is bounded by a token budget: least recently used leaves go first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

# [kv_heads, tokens, head_dim] keys and values, one pair per layer
LayerKV = list[tuple[torch.Tensor, torch.Tensor]]


class _Node:
    __slots__ = ("children", "ids", "kv", "last_used", "parent")

    def __init__(self, ids: tuple[int, ...], kv: LayerKV, parent: _Node | None) -> None:
        self.ids = ids
        self.kv = kv
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.last_used = 0

    def split(self, at: int) -> None:
        """Keep ids[:at] here; the rest becomes the one child (which takes the children)."""
        # clones, so that evicting one half frees its memory
        tail = _Node(self.ids[at:], [(k[:, at:].clone(), v[:, at:].clone()) for k, v in self.kv], self)
        tail.children, tail.last_used = self.children, self.last_used
        for child in tail.children.values():
            child.parent = tail
        self.ids = self.ids[:at]
        self.kv = [(k[:, :at].clone(), v[:, :at].clone()) for k, v in self.kv]
        self.children = {tail.ids[0]: tail}


def _common(a: tuple[int, ...], b: list[int], start: int) -> int:
    n = 0
    limit = min(len(a), len(b) - start)
    while n < limit and a[n] == b[start + n]:
        n += 1
    return n


class PrefixCache:
    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.root = _Node((), [], None)
        self.tokens = 0
        self._clock = itertools.count(1)
        self.hits = 0  # prompt tokens served from the cache
        self.misses = 0  # prompt tokens prefilled

    def clear(self) -> None:
        """Free every cached key/value now. A node and its parent refer to each other, so a tree
        merely let go of waits for Python's cycle collector: the demo's update ran with hundreds
        of megabytes of stale caches still resident."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            node.kv, node.children, node.parent = [], {}, None
        self.root = _Node((), [], None)
        self.tokens = 0

    def match_length(self, ids: list[int], limit: int) -> int:
        """How many of ids[:limit] are cached (no copies, no bookkeeping)."""
        node, matched = self.root, 0
        while matched < limit:
            child = node.children.get(ids[matched])
            if child is None:
                break
            n = _common(child.ids, ids[:limit], matched)
            matched += n
            if n < len(child.ids):
                break
            node = child
        return matched

    def lookup(self, ids: list[int], limit: int) -> tuple[int, LayerKV | None]:
        """The longest cached prefix of ids[:limit]: its length and its keys/values ([kv_heads, n, dim])."""
        node, matched, parts = self.root, 0, []
        now = next(self._clock)
        while matched < limit:
            child = node.children.get(ids[matched])
            if child is None:
                break
            n = _common(child.ids, ids[:limit], matched)
            child.last_used = now
            parts.append((child, n))
            matched += n
            if n < len(child.ids):
                break
            node = child
        if not matched:
            return 0, None
        layers = len(parts[0][0].kv)
        kv = [
            (
                torch.cat([p.kv[i][0][:, :n] for p, n in parts], dim=1),
                torch.cat([p.kv[i][1][:, :n] for p, n in parts], dim=1),
            )
            for i in range(layers)
        ]
        return matched, kv

    def insert(self, ids: list[int], kv_from: Callable[[int], LayerKV]) -> None:
        """Store the keys/values of ids; kv_from(start) gives those of ids[start:], asked only for
        the part not cached yet (gathering a 4k-token row that is cached already would be waste)."""
        if self.max_tokens <= 0 or not ids:
            return
        node, at = self.root, 0
        now = next(self._clock)
        while at < len(ids):
            child = node.children.get(ids[at])
            if child is None:
                leaf = _Node(tuple(ids[at:]), kv_from(at), node)
                leaf.last_used = now
                node.children[ids[at]] = leaf
                self.tokens += len(leaf.ids)
                break
            n = _common(child.ids, ids, at)
            if n < len(child.ids):
                child.split(n)
            child.last_used = now
            node, at = child, at + n
        self._evict()

    def _evict(self) -> None:
        while self.tokens > self.max_tokens:
            leaves = [n for n in self._nodes() if not n.children]
            if not leaves:
                return
            victim = min(leaves, key=lambda n: n.last_used)
            assert victim.parent is not None
            del victim.parent.children[victim.ids[0]]
            self.tokens -= len(victim.ids)

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())


def shared_prefixes(prompts: list[list[int]], cached: list[int], min_tokens: int) -> list[list[int]]:
    """Prefixes that two or more prompts share beyond what is cached for them (each at most a
    prompt's length - 1, at least min_tokens): prefilled once, they serve every prompt that has them."""
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    found: set[tuple[int, ...]] = set()
    # in sorted order, a prompt's longest prefix shared with any other is shared with a neighbour
    for a, b in zip(order, order[1:], strict=False):
        pa, pb = prompts[a], prompts[b]
        n = _common(tuple(pa[: len(pb)]), pb, 0)
        n = min(n, len(pa) - 1, len(pb) - 1)
        if n >= min_tokens and n > cached[a] and n > cached[b]:
            found.add(tuple(pa[:n]))
    return [list(p) for p in sorted(found)]

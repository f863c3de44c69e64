"""KV slots: a paged allocator and the writes into the request-to-token table (SGLang `mem_cache`).

A request's row of `req_to_token` maps its token positions to KV slots. Slots are
handed out a page (`page_size` consecutive slots) at a time, and slot 0 is the
padding slot that is never handed out. Growing a row from `cur` to `nxt` first
uses the rest of the page that holds position `cur - 1` (its slots are already
owned), then takes whole new pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import List

import torch

from dspark import _validate


class TokenToKVPoolAllocator:
    def __init__(self, size: int, page_size: int = 1):
        self.page_size = _validate.positive_int("page_size", page_size)
        _validate.positive_int("size", size)
        self.free_pages: List[int] = list(range(1, size // self.page_size + 1))  # page 0 holds the padding slot

    def available_size(self) -> int:
        return len(self.free_pages) * self.page_size

    def alloc_pages(self, n: int) -> List[int]:
        _validate.nonnegative_int("n", n)
        if n > len(self.free_pages):
            raise RuntimeError(f"kv cache: {n} pages asked, {len(self.free_pages)} free")
        taken, self.free_pages = self.free_pages[:n], self.free_pages[n:]
        return taken


def _row_growth(row: torch.Tensor, cur: int, nxt: int, page: int, pages: List[int]) -> torch.Tensor:
    """Slots for positions [cur, nxt) of one row, taking new pages from `pages` (consumed in order)."""
    slots = []
    for pos in range(cur, nxt):
        if pos % page and pos == cur:  # continue the page that holds position cur-1
            base = int(row[cur - 1]) - (cur - 1) % page
        elif pos % page == 0:
            base = pages.pop(0) * page
        slots.append(base + pos % page)
    return torch.tensor(slots, dtype=row.dtype)


def pages_needed(cur: Sequence[int], nxt: Sequence[int], page: int) -> int:
    """New pages to grow each row from cur to nxt (the partly used last page is reused)."""
    return sum(max(0, -(-n // page) - -(-c // page)) for c, n in zip(cur, nxt))


def extend_rows(req_to_token: torch.Tensor, rows: Sequence[int], cur: Sequence[int], nxt: Sequence[int],
                allocator: TokenToKVPoolAllocator) -> int:
    """Grow each row from cur[i] to nxt[i]; returns the slots drawn. Everything is checked before anything is written."""
    rows, cur, nxt = (_validate.listed(name, v) for name, v in (("rows", rows), ("cur", cur), ("nxt", nxt)))
    if not len(rows) == len(cur) == len(nxt):
        raise ValueError(f"rows: {len(rows)} rows, {len(cur)} current and {len(nxt)} next lengths")
    for i, r in enumerate(rows):
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < req_to_token.shape[0]:
            raise ValueError(f"rows[{i}]: expected a row in [0, {req_to_token.shape[0]}), got {r!r}")
    if len(set(rows)) != len(rows):
        raise ValueError(f"rows: a row may grow once per call, got {rows}")
    width = req_to_token.shape[1]
    for i, (c, n) in enumerate(zip(cur, nxt)):
        _validate.integer(f"cur[{i}]", c)
        _validate.integer(f"nxt[{i}]", n)
        if not 0 <= c <= n:
            raise ValueError(f"nxt[{i}]: a row grows from {c} to {n}; it may only grow")
        if n > width:
            raise ValueError(f"nxt[{i}]: {n} slots exceed the request-to-token row width {width}")
    page = allocator.page_size
    pages = allocator.alloc_pages(pages_needed(cur, nxt, page))
    drawn = len(pages) * page
    for r, c, n in zip(rows, cur, nxt):
        if n > c:
            req_to_token[r, c:n] = _row_growth(req_to_token[r], c, n, page, pages)
    return drawn


class DraftContextPool:
    """The draft model's context KV: one projected target hidden per committed position, by request row.

    SGLang keeps the draft KV in a slot pool addressed through `req_to_token`; one dense row per request is that
    addressing with the page as wide as the row. It keeps its own lengths, so "one draft row per committed position"
    stays a fact to check, not a definition. A step's commit is one batched write, not a concatenation per request.
    Rows hold float64 (the reference's compute dtype): a handoff's lower-precision hiddens widen exactly.
    """

    def __init__(self, size: int, max_context_len: int, hidden_size: int):
        self.size = _validate.positive_int("size", size)
        self.width = _validate.positive_int("max_context_len", max_context_len)
        self.hidden_size = _validate.positive_int("hidden_size", hidden_size)
        self.lens = torch.zeros(size, dtype=torch.int64)
        self.hiddens = torch.zeros(size, max_context_len, hidden_size, dtype=torch.float64)

    def check_load(self, name: str, hiddens: torch.Tensor) -> None:
        """Raise naming `name` if `hiddens` cannot be a row's context (not [n <= width, hidden_size] floats)."""
        if not hiddens.is_floating_point():
            raise TypeError(f"{name}: expected floating hiddens, got {hiddens.dtype}")
        if hiddens.dim() != 2 or hiddens.shape[1] != self.hidden_size:
            raise ValueError(f"{name}: expected [n, {self.hidden_size}] hiddens, got {list(hiddens.shape)}")
        if hiddens.shape[0] > self.width:
            raise ValueError(f"{name}: {hiddens.shape[0]} rows exceed the draft context width {self.width}")
        if not bool(torch.isfinite(hiddens).all()):
            raise ValueError(f"{name}: holds NaN or infinite values")

    def _row(self, row) -> int:
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < self.size:
            raise ValueError(f"row: expected an int in [0, {self.size}), got {row!r}")
        return row

    def load(self, row: int, hiddens: torch.Tensor) -> None:
        self._row(row)
        self.check_load("hiddens", hiddens)
        n = hiddens.shape[0]
        self.hiddens[row, :n] = hiddens
        self.lens[row] = n

    def append(self, rows: torch.Tensor, hidden: torch.Tensor, counts: torch.Tensor) -> None:
        """Row rows[i] gains hidden[i, :counts[i]] ([bs, T, hidden_size]) after its current end, in one write."""
        bs = _validate.same_length(rows=_validate.int_tensor("rows", rows), counts=_validate.int_tensor("counts", counts))
        if not isinstance(hidden, torch.Tensor) or hidden.dim() != 3 or hidden.shape[0] != bs or \
                hidden.shape[2] != self.hidden_size:
            raise ValueError(f"hidden: expected [{bs}, T, {self.hidden_size}], got {_validate.shape_of(hidden)}")
        T = hidden.shape[1]
        _validate.in_range("rows", rows, 0, self.size)
        _validate.unique("rows", rows)  # a row twice would keep only one of its writes
        _validate.in_range("counts", counts, 0, T + 1)
        start, counts = self.lens[rows], counts.to(torch.int64)
        if bs and int((start + counts).max()) > self.width:
            raise ValueError(f"counts: a row would pass the draft context width {self.width}")
        keep = torch.arange(T)[None, :] < counts[:, None]
        written = hidden[keep].to(torch.float64)
        # As load refuses them (rows the drafter reads). One float64 sum, not a mask: finite iff every entry is.
        if not bool(torch.isfinite(written.sum())):
            raise ValueError("hidden: holds NaN or infinite values")
        slots = (rows * self.width + start)[:, None] + torch.arange(T)  # flat slot of each verify column
        self.hiddens.view(-1, self.hidden_size)[slots[keep]] = written
        self.lens[rows] = start + counts

    def context(self, row: int) -> torch.Tensor:
        """The row's context [len, hidden_size] (a view: valid until the row is written again or handed on)."""
        return self.hiddens[self._row(row), : int(self.lens[row])]

    def batch(self, rows: torch.Tensor) -> "DraftContextBatch":
        return DraftContextBatch(self, rows)


class DraftContextBatch(Sequence):
    """A batch's draft contexts as the drafter reads them: item i is request i's context, and `last_rows()` gives
    every request's latest row in one gather (zeros for an empty context)."""

    def __init__(self, pool: DraftContextPool, rows: torch.Tensor):
        self.pool, self.rows = pool, rows

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __getitem__(self, i):
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self.pool.context(int(self.rows[i]))

    def last_rows(self) -> torch.Tensor:
        lens = self.pool.lens[self.rows]
        last = self.pool.hiddens[self.rows, (lens - 1).clamp(min=0)]
        return torch.where((lens > 0)[:, None], last, 0.0)

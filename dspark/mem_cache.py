"""KV slots: a paged allocator and the writes into the request-to-token table (SGLang `mem_cache`).

A request's row of `req_to_token` maps its token positions to KV slots. Slots are
handed out a page (`page_size` consecutive slots) at a time, and slot 0 is the
padding slot that is never handed out. Growing a row from `cur` to `nxt` first
uses the rest of the page that holds position `cur - 1` (its slots are already
owned), then takes whole new pages.
"""

from __future__ import annotations

from typing import List, Sequence

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
    width = req_to_token.shape[1]
    for i, (c, n) in enumerate(zip(cur, nxt)):
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

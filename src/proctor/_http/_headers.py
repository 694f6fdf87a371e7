"""An ordered, case-insensitive multi-map of HTTP header fields."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TypeAlias

__all__ = ["HeaderSource", "Headers", "as_pairs"]


class Headers:
    """Header fields in the order received; names compare case-insensitively.

    Values are `str` decoded as latin-1, so every byte round-trips.
    """

    __slots__ = ("_items", "_keys")

    def __init__(self, items: Iterable[tuple[str, str]] | Mapping[str, str] = ()) -> None:
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        self._items: list[tuple[str, str]] = pairs
        self._keys: list[str] = [name.lower() for name, _ in pairs]

    @classmethod
    def _trusted(cls, items: list[tuple[str, str]], keys: list[str]) -> Headers:
        """Wrap lists the parser built, without copying them."""
        self = cls.__new__(cls)
        self._items = items
        self._keys = keys
        return self

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of `name`, or `default`."""
        try:
            return self._items[self._keys.index(name.lower())][1]
        except ValueError:
            return default

    def get_all(self, name: str) -> list[str]:
        """Every value of `name`, in order."""
        key = name.lower()
        return [self._items[i][1] for i, k in enumerate(self._keys) if k == key]

    def items(self) -> list[tuple[str, str]]:
        """Every field as received (original name case)."""
        return list(self._items)

    def set(self, name: str, value: str) -> None:
        """Replace every field named `name` with one `name: value`."""
        self.remove(name)
        self.add(name, value)

    def add(self, name: str, value: str) -> None:
        """Append a field, keeping any others of the same name."""
        self._items.append((name, value))
        self._keys.append(name.lower())

    def remove(self, name: str) -> None:
        """Drop every field named `name` (no error when there is none)."""
        key = name.lower()
        if key in self._keys:
            kept = [(k, item) for k, item in zip(self._keys, self._items, strict=True) if k != key]
            self._keys = [k for k, _ in kept]
            self._items = [item for _, item in kept]

    def copy(self) -> Headers:
        """An independent copy."""
        return Headers._trusted(list(self._items), list(self._keys))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._keys

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Headers):
            return NotImplemented
        return [(k, v) for k, (_, v) in zip(self._keys, self._items, strict=True)] == [
            (k, v) for k, (_, v) in zip(other._keys, other._items, strict=True)
        ]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


HeaderSource: TypeAlias = Headers | Iterable[tuple[str, str]] | Mapping[str, str]
"""Anything a header argument accepts."""


def as_pairs(headers: HeaderSource) -> Iterable[tuple[str, str]]:
    """Any accepted header source as (name, value) pairs, without copying."""
    if isinstance(headers, Headers):
        return headers._items
    if isinstance(headers, Mapping):
        return headers.items()
    return headers

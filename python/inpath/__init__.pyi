"""Type stubs for the inpath package."""

from collections.abc import Iterable
from typing import Any, Literal, Optional, Union

__version__: str

class InpathError(ValueError):
    """Bad input or parameters for an inpath engine."""

_Items = Union[Any, Iterable[Union[str, bytes, int]], str, bytes]

class Sketch:
    """One-pass HyperLogLog + Fast-AGMS + Count-Min + min/max/count sketch (SKT).

    >>> s = Sketch(); s.update(["a", "b", "a"]); s.frequency("a")
    2
    """

    def __init__(
        self,
        hll_p: int = 16,
        cm: tuple[int, int] = (6, 13),
        agms: tuple[int, int] = (6, 13),
        hash: Literal["fast", "compat"] = "fast",
        seed: Optional[int] = None,
        kind: Optional[Literal["u32", "u64", "bytes"]] = None,
    ) -> None: ...
    def update(self, data: _Items) -> None:
        """Add items: a 1-D contiguous NumPy array of uint32/int32 (u32 items) or
        uint64/int64 (u64 items), a pandas Series, or str/bytes values."""
    def cardinality(self, estimator: Literal["ertl", "reference"] = "ertl") -> float: ...
    def f2(self) -> float: ...
    def frequency(self, key: Union[int, str, bytes]) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def min(self) -> Optional[Union[int, float]]: ...
    @property
    def max(self) -> Optional[Union[int, float]]: ...
    @property
    def kind(self) -> Optional[Literal["u32", "u64", "bytes"]]: ...
    def summary(self, estimator: Literal["ertl", "reference"] = "ertl") -> dict[str, Any]: ...
    def merge(self, other: "Sketch") -> None: ...
    def to_bytes(self) -> bytes: ...
    @staticmethod
    def from_bytes(data: bytes) -> "Sketch": ...
    def __len__(self) -> int: ...

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
    def update(self, data: _Items, threads: Optional[int] = None) -> None:
        """Add items: a 1-D contiguous NumPy array of uint32/int32 (u32 items) or
        uint64/int64 (u64 items), a pandas Series, or str/bytes values. An integer array is
        sketched without the GIL on up to ``threads`` threads (default: one per CPU); the
        state is the same for any count."""
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

class DataSketchesHll:
    """A HyperLogLog with Apache DataSketches' hashing and registers (Spark's ``hll_*``)."""

    def __init__(self, lg_k: int = 12) -> None: ...
    def update(self, data: Any) -> None: ...
    def estimate(self) -> float: ...
    @property
    def lg_k(self) -> int: ...
    def registers(self) -> bytes: ...
    def merge(self, other: "DataSketchesHll") -> None: ...
    def to_bytes(self) -> bytes: ...
    @staticmethod
    def from_bytes(data: bytes) -> "DataSketchesHll": ...

class Statistics:
    """Exact sufficient statistics of M streams; mergeable and picklable."""

    @property
    def streams(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def names(self) -> list[str]: ...
    @property
    def dtype(self) -> str: ...
    def merge(self, other: "Statistics") -> None: ...
    def regression(self, x: int, y: int, constant: Literal["nan", "zero"] = "nan") -> tuple[float, float, float]:
        """(slope, intercept, slope through the origin) of stream y on stream x."""
    def cosine(self, i: int, j: int, constant: Literal["nan", "zero"] = "nan") -> float: ...
    def to_bytes(self) -> bytes: ...
    @staticmethod
    def from_bytes(data: bytes) -> "Statistics": ...

class CorrResult:
    statistics: Statistics
    names: list[str]
    count: int
    pearson: Any
    covariance: Any
    means: Any
    std: Any
    def __init__(self, statistics: Statistics, constant: str = "nan", ddof: int = 1, labelled: bool = False) -> None: ...

def corr(
    data: Any,
    *,
    rowvar: bool = False,
    nan: Literal["raise", "propagate"] = "raise",
    constant: Literal["nan", "zero"] = "nan",
    ddof: int = 1,
    threads: Optional[int] = None,
    names: Optional[list[str]] = None,
) -> CorrResult: ...

_Buffer = Union[bytes, bytearray, memoryview]

def seal(
    page: _Buffer,
    key: Optional[bytes] = None,
    key_id: int = 1,
    compress: str = "deflate",
    cipher: str = "aes256-gcm",
    level: Optional[int] = None,
) -> bytes: ...
def seal_batch(
    pages: Iterable[_Buffer],
    key: Optional[bytes] = None,
    key_id: int = 1,
    compress: str = "deflate",
    cipher: str = "aes256-gcm",
    level: Optional[int] = None,
    threads: Optional[int] = None,
) -> list[bytes]: ...
def unseal(record: _Buffer, keys: Optional[dict[int, bytes]] = None, max_page: int = 1 << 30) -> bytes: ...
def unseal_batch(
    records: Iterable[_Buffer], keys: Optional[dict[int, bytes]] = None, threads: Optional[int] = None, max_page: int = 1 << 30
) -> list[bytes]: ...
def compress(data: _Buffer, format: str = "zstd", level: Optional[int] = None) -> bytes: ...
def decompress(data: _Buffer, format: Optional[str] = None, limit: int = 1 << 34) -> bytes: ...

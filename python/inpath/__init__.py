"""inpath: compute on data while it moves.

One-pass engines from the FPGA systems that analyse data on the network card or the storage
path, in software, one ``import`` away:

- :class:`Sketch` — SKT's HyperLogLog + Fast-AGMS + Count-Min + min/max/count from one hash
  per item, on NumPy arrays, pandas Series or sequences of strings.

Every result equals the ``inpath`` command line's on the same data (the same sketch bytes);
the work runs in Rust with the GIL released.

>>> import numpy as np, inpath
>>> s = inpath.Sketch()
>>> s.update(np.arange(1_000_000, dtype=np.uint64) % 5000)
>>> round(s.cardinality(), -1)
5000.0
"""

from ._inpath import InpathError, Sketch, __version__

__all__ = ["InpathError", "Sketch", "__version__"]

"""Pure models of Kueue: quantities, typed views of Kueue objects, GPU types and flavor fit.

Nothing here performs I/O; the dispatcher's algorithms, the Kueue emulator of the sandbox and the
simulator share these functions.
"""

from __future__ import annotations

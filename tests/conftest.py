"""Make tests/refmodel.py importable whatever pytest's import mode is."""

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if _here not in sys.path:
    sys.path.insert(0, _here)

"""A short evolution search from CifarNet on the bundled digits (minutes on 2 CPU cores).

    nas-search --config=configs/digits_cnn_search.py --workdir=runs/digits
Children inherit their parent's weights, so each trains for a few epochs only. The search
settings (`nas.search.presets.evolution`, which says why each is what it is) are also
`nas.run_search`'s defaults; this file adds the digits.
"""

import os
import runpy

from nas.search.presets import evolution


def get_config(arg=None):
    del arg
    here = os.path.dirname(os.path.abspath(__file__))
    train = runpy.run_path(os.path.join(here, "digits_cnn.py"))["get_config"]()
    return evolution(train)

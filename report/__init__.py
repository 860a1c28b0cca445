"""``sparktap report``: a self-contained HTML report of one application, read from ClickHouse.

``collect`` (``collect.py``) reads the ``<table>_dedup`` views of one application into a ``Report`` (``model.py``)
and runs the detection rules scoped to it; ``render`` (``render.py``) turns it into one HTML file with the plotly
figures of ``charts.py`` and ``plans.py`` inline, so the file opens offline; ``cli.py`` is the command.
"""

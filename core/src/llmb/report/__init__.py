"""``llmb report``: runs grouped into series, plotted, and written as a page.

``series`` groups and aggregates result rows as plain data; ``tables``
formats them; ``plots`` draws them with matplotlib (imported only there, and
only when drawing); ``html`` and ``markdown`` write the two documents;
``write`` puts the files in the output directory.
"""

"""Results: runs' logs parsed into rows, stored, analysed, compared and archived.

scan.py         finding experiments' logs and reading them safely (regular files, bounded)
parsers.py      the log formats (Megatron-Bridge, NeMo 2, the torch engine's)
experiments.py  an experiment directory's name and recipe read back
records.py      the result row and its statuses
analyze.py      the statistics window and the metrics of one run
collect.py      every run under the install, rescanned when its log changed
store.py        the results database (SQLite)
compare.py      rows against the published figures or a baseline
export.py       CSV / JSON output
archive.py      ``llmb archive``: experiments packed without profiles, traces or checkpoints
"""
